/**
 * An open RDMA device (`struct ibv_context`): the root that owns PDs, CQs,
 * completion channels, and the device's async events.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { DevicePermissionError, InvalidArgumentError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { describe } from "../types/check.ts";
import { withDeviceList } from "./devices.ts";
import { nativeError, throwErrno } from "../ffi/errors.ts";
import { checkConstruct, checkResource, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import { forgetContext } from "./_objects.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { type AhAttrData, decodeAhAttr } from "./ah.ts";
import type { MemoryRegion } from "./mr.ts";
import { WorkCompletion } from "./wc.ts";
import { setNonBlocking } from "../ffi/fd.ts";
import { closeWatchesOf } from "../poller/poller.ts";
import { type DeviceAttr, type DeviceAttrEx, queryDevice, queryDeviceEx } from "./device-attr.ts";
import {
  type GidEntry,
  gidTable,
  type PortAttr,
  queryGid,
  queryGidEx,
  queryPkey,
  queryPort,
} from "./port-attr.ts";
import { ProtectionDomain } from "./pd.ts";
import { type CompletionQueue, type CqInit, createCq } from "./cq.ts";
import { type CompletionQueueEx, type CqExInit, createCqEx } from "./cq-ex.ts";
import { openXrcd, type XrcdInit, type XrcDomain } from "./xrc.ts";
import { CompletionChannel } from "./channel.ts";
import { type AsyncEvent, readAsyncEvent } from "./async-event.ts";

/** The `ibv_context_ops` members this library calls. */
export type ContextOp =
  | "poll_cq"
  | "req_notify_cq"
  | "post_send"
  | "post_recv"
  | "post_srq_recv"
  | "alloc_mw"
  | "dealloc_mw"
  | "bind_mw";

/** The `verbs_context` members this library calls. */
export type ExtendedOp =
  | "query_port"
  | "query_device_ex"
  | "create_cq_ex"
  | "create_qp_ex"
  | "open_xrcd"
  | "close_xrcd"
  | "create_srq_ex"
  | "get_srq_num"
  | "open_qp"
  | "advise_mr"
  | "alloc_null_mr";

/** An open device context. Create with {@link openDevice}; closing it closes everything made from it. */
export class Context extends NativeResource {
  /** The `struct ibv_context *`. */
  readonly ptr: NativePointer;
  /** The device name, e.g. `rxe0`. */
  readonly deviceName: string;
  /** The async-event file descriptor (non-blocking). */
  readonly asyncFd: number;
  readonly #ops = new Map<ContextOp, NativePointer | null>();
  /** Not for direct use: {@link openDevice} opens a device and makes its context. */
  constructor(ptr: NativePointer, deviceName: string, token: symbol) {
    checkConstruct(token, "contexts are made by openDevice()");
    super("Context", []);
    const n = native();
    const L = layouts().ibv_context.fields;
    this.ptr = ptr;
    this.deviceName = deviceName;
    this.asyncFd = new DataView(n.arrayBuffer(ptr, L.async_fd.offset + 4)).getInt32(
      L.async_fd.offset,
      true,
    );
    setNonBlocking(this.asyncFd, "async_fd");
  }

  /** `ibv_context.num_comp_vectors`: how many completion vectors `createCq` can spread CQs over. */
  get numCompVectors(): number {
    this.assertOpen();
    const n = native();
    const at = layouts().ibv_context.fields.num_comp_vectors.offset;
    return new DataView(n.arrayBuffer(this.ptr, at + 4)).getInt32(at, true);
  }

  /** `ibv_query_device`: the device's limits and capabilities. */
  queryDevice(): DeviceAttr {
    return queryDevice(this);
  }

  /** `ibv_query_device_ex` (the base attributes when the provider has no extended query). */
  queryDeviceEx(): DeviceAttrEx {
    return queryDeviceEx(this);
  }

  /** The full port attributes (through the extended `query_port`). */
  queryPort(port = 1): PortAttr {
    return queryPort(this, port);
  }

  /** `ibv_query_gid`: the GID at `index` of `port`. */
  queryGid(port: number, index: number): string {
    return queryGid(this, port, index);
  }

  /** `ibv_query_gid_ex`: the GID entry with its type and netdev. */
  queryGidEx(port: number, index: number): GidEntry {
    return queryGidEx(this, port, index);
  }

  /** `ibv_query_gid_table`: every valid GID of every port. */
  gidTable(): GidEntry[] {
    return gidTable(this);
  }

  /** `ibv_query_pkey`: one P_Key in host order. */
  queryPkey(port: number, index: number): number {
    return queryPkey(this, port, index);
  }

  /** The P_Key table of `port`. */
  pkeys(port = 1): number[] {
    const len = this.queryPort(port).pkeyTblLen;
    const out: number[] = [];
    for (let i = 0; i < len; i++) out.push(this.queryPkey(port, i));
    return out;
  }

  /** Allocates a protection domain. */
  allocPd(): ProtectionDomain {
    return new ProtectionDomain(this, CONSTRUCT);
  }

  /** Creates a completion channel (fd set O_NONBLOCK). */
  createCompChannel(): CompletionChannel {
    return new CompletionChannel(this, CONSTRUCT);
  }

  /** Creates a completion queue. */
  createCq(init: CqInit): CompletionQueue {
    this.assertOpen();
    return createCq(this, init);
  }

  /**
   * `ibv_open_xrcd`: an XRC domain (XRC SRQs and receive QPs). Providers without XRC
   * (soft-RoCE, soft-iWARP) raise UnsupportedError.
   */
  openXrcd(init: XrcdInit = {}): XrcDomain {
    this.assertOpen();
    return openXrcd(this, init);
  }

  /**
   * `ibv_init_ah_from_wc`: the address attributes that reply to the sender of a received UD
   * completion (`wc`, a CQ's cursor; `grh`: the receive buffer's first 40 bytes, by MR and
   * offset), for `pd.createAh` or a QP's path.
   */
  initAhFromWc(
    wc: WorkCompletion,
    grh: { readonly mr: MemoryRegion; readonly offset?: number },
    port: number,
  ): AhAttrData {
    this.assertOpen();
    if (!(wc instanceof WorkCompletion)) {
      throw new InvalidArgumentError("wc must be a CQ's WorkCompletion cursor");
    }
    if (typeof grh !== "object" || grh === null) {
      throw new InvalidArgumentError("grh must be { mr, offset }");
    }
    const mr = checkResource<MemoryRegion>(grh.mr, "MemoryRegion", "grh.mr");
    if (mr.pd.context !== this) throw new InvalidArgumentError("grh.mr is on another device");
    const off = grh.offset ?? 0;
    if (!Number.isInteger(off) || off < 0 || off + 40 > mr.length) {
      throw new InvalidArgumentError("the GRH (40 bytes) must lie inside the MR");
    }
    if (!Number.isInteger(port) || port < 1 || port > 255) {
      throw new InvalidArgumentError(`port must be 1..255, got ${port}`);
    }
    const n = native();
    return NativeBlock.with(layouts().ibv_ah_attr.size, (b) => {
      const rc = n.ibverbs.ibv_init_ah_from_wc(
        this.ptr,
        port,
        wc.pointer,
        n.pointer(mr.addrNumber + off),
        b.ptr,
      );
      if (rc !== 0) {
        throw nativeError("ibv_init_ah_from_wc", n.errno() || Math.abs(rc), this.deviceName);
      }
      return decodeAhAttr(b.view, 0);
    });
  }

  /**
   * `ibv_create_cq_ex`: an extended CQ reporting the fields of `init.wcFlags` (completion
   * timestamps among them). Throws UnsupportedError when the provider has no extended CQs or
   * not the fields asked for.
   */
  createCqEx(init: CqExInit): CompletionQueueEx {
    this.assertOpen();
    return createCqEx(this, init);
  }

  /**
   * Reads one async event from the non-blocking async fd, or null when none is
   * pending. The event is copied and acked before it is returned.
   */
  getAsyncEvent(): AsyncEvent | null {
    return readAsyncEvent(this);
  }

  /** The function pointer of an `ibv_context_ops` member (null when the provider lacks it). */
  op(name: ContextOp): NativePointer | null {
    this.assertOpen();
    // the provider fills the table when the device opens; every QP and CQ made asks again
    const known = this.#ops.get(name);
    if (known !== undefined) return known;
    const fn = native().readPointer(this.ptr, layouts().ibv_context.fields[`ops.${name}`].offset);
    this.#ops.set(name, fn);
    return fn;
  }

  /**
   * The function pointer of a `verbs_context` member, or null when the context is not
   * an extended one, is too old to have it, or the provider left it unset.
   */
  extendedOp(name: ExtendedOp): NativePointer | null {
    this.assertOpen();
    const n = native();
    const L = layouts();
    // abi_compat == (void *)-1 marks a verbs_context; read it as a u64 (in Bun a pointer
    // is a JS number, which cannot hold 2^64 - 1 exactly)
    const abiAt = L.ibv_context.fields.abi_compat.offset;
    const abi = new DataView(n.arrayBuffer(this.ptr, abiAt + 8)).getBigUint64(abiAt, true);
    if (abi !== 0xffff_ffff_ffff_ffffn) return null;
    const vc = L.verbs_context;
    const start = n.offset(this.ptr, -vc.fields.context.offset);
    const view = new DataView(n.arrayBuffer(start, vc.fields.context.offset));
    const sz = Number(view.getBigUint64(vc.fields.sz.offset, true));
    if (sz < vc.size - vc.fields[name].offset) return null;
    return n.readPointer(start, vc.fields[name].offset);
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    forgetContext(this);
    closeWatchesOf(this); // its event streams end before the async fd closes with the context
    if (native().ibverbs.ibv_close_device(this.ptr) !== 0) throwErrno("ibv_close_device");
  }
}

/**
 * Opens the device called `name`, or the first device when no name is given.
 * Throws NoDeviceError when the machine has none, InvalidArgumentError for an unknown name.
 */
export function openDevice(name?: string): Context {
  return withDeviceList((list, count) => {
    const n = native();
    const names: string[] = [];
    for (let i = 0; i < count; i++) {
      const d = n.readPointer(list, i * 8)!;
      const devName = n.cstring(n.ibverbs.ibv_get_device_name(d)) ?? "";
      names.push(devName);
      if (name !== undefined && devName !== name) continue;
      const ctx = n.ibverbs.ibv_open_device(d);
      if (ctx === null) {
        const errno = n.errno();
        if (errno === Errno.EACCES || errno === Errno.EPERM) {
          const dev = n.cstring(d, layouts().ibv_device.fields.dev_name.offset) ?? "uverbs*";
          throw new DevicePermissionError("ibv_open_device", `/dev/infiniband/${dev}`);
        }
        throw nativeError("ibv_open_device", errno, devName);
      }
      return new Context(ctx, devName, CONSTRUCT);
    }
    throw new InvalidArgumentError(
      `no RDMA device named ${describe(name)} (have: ${names.join(", ")})`,
    );
  });
}

export { contextObjects, forgetObject, objectAt, rememberObject } from "./_objects.ts";
