/**
 * Device discovery: the RDMA devices the kernel exposes, without opening them.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { Errno } from "../types/errno.ts";
import { NoDeviceError } from "../types/errors.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { nativeError } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";

/** One RDMA device as `ibv_get_device_list` reports it. */
export interface DeviceInfo {
  /** Kernel device name, e.g. `rxe0`, `mlx5_0`. */
  readonly name: string;
  /** Node GUID as 16 hex digits, formatted like `ibv_devices`. */
  readonly guid: string;
  /** Kernel device index (`ibv_get_device_index`), or -1 when unknown. */
  readonly index: number;
  /** `enum ibv_node_type` value (1 = CA, 4 = RNIC, ...). */
  readonly nodeType: number;
  /** `enum ibv_transport_type` value (0 = IB, 1 = iWARP, ...). */
  readonly transportType: number;
  /** The uverbs device name, e.g. `uverbs0`. */
  readonly devName: string;
  /** The sysfs path of the device. */
  readonly ibdevPath: string;
}

/**
 * Lists the RDMA devices. Throws {@link NoDeviceError} when the kernel has no RDMA
 * support (ENOSYS) or no device exists, with what to do about it.
 */
export function listDevices(): DeviceInfo[] {
  return withDeviceList((list, count) => {
    const n = native();
    const dev = layouts().ibv_device.fields;
    const out: DeviceInfo[] = [];
    for (let i = 0; i < count; i++) {
      const d = n.readPointer(list, i * 8)!;
      const view = new DataView(n.arrayBuffer(d, dev.ibdev_path.offset + dev.ibdev_path.size));
      const guid = BigInt.asUintN(64, BigInt(n.ibverbs.ibv_get_device_guid(d)));
      const bytes = new DataView(new ArrayBuffer(8));
      bytes.setBigUint64(0, guid, true); // __be64 as stored: print its bytes in order
      out.push({
        name: n.cstring(n.ibverbs.ibv_get_device_name(d)) ?? "",
        guid: bytes.getBigUint64(0, false).toString(16).padStart(16, "0"),
        index: n.ibverbs.ibv_get_device_index(d),
        nodeType: view.getInt32(dev.node_type.offset, true),
        transportType: view.getInt32(dev.transport_type.offset, true),
        devName: n.cstring(d, dev.dev_name.offset) ?? "",
        ibdevPath: n.cstring(d, dev.ibdev_path.offset) ?? "",
      });
    }
    return out;
  });
}

/**
 * Runs `fn` with the native device list (an `ibv_device **`) and frees it after.
 * Throws {@link NoDeviceError} when there is no device.
 */
export function withDeviceList<T>(
  fn: (list: NativePointer, count: number) => T,
): T {
  const n = native();
  return NativeBlock.with(4, (countBox) => {
    n.setErrno(0);
    const list = n.ibverbs.ibv_get_device_list(countBox.ptr);
    if (list === null) {
      const errno = n.errno();
      if (errno === Errno.ENOSYS) {
        throw new NoDeviceError(
          "the kernel has no RDMA support: ibv_get_device_list failed with ENOSYS",
        );
      }
      throw nativeError("ibv_get_device_list", errno);
    }
    try {
      const count = countBox.view.getInt32(0, true);
      if (count === 0) throw new NoDeviceError("ibv_get_device_list returned no devices");
      return fn(list, count);
    } finally {
      n.ibverbs.ibv_free_device_list(list);
    }
  });
}
