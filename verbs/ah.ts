/**
 * Address handles: where a UD send goes. Created from attributes, or from a
 * received completion and its GRH to reply to the sender.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { layoutFor } from "../types/layout.ts";
import { throwErrno, throwReturned } from "../ffi/errors.ts";
import { type GidLike, parseGid } from "./gid.ts";
import { NativeBlock } from "./memory.ts";
import { Resource } from "./resource.ts";
import type { MemoryRegion } from "./mr.ts";
import type { ProtectionDomain } from "./pd.ts";
import type { WorkCompletion } from "./wc.ts";

/** The global route of an address (required on RoCE). */
export interface GlobalRoute {
  /** Destination GID. */
  readonly dgid: GidLike;
  /** Index of the local GID to send from. */
  readonly sgidIndex: number;
  /** Hop limit (default 1). */
  readonly hopLimit?: number;
  /** Traffic class (default 0). */
  readonly trafficClass?: number;
  /** Flow label (default 0). */
  readonly flowLabel?: number;
}

/** `struct ibv_ah_attr`. */
export interface AhAttr {
  /** Local port. */
  readonly port: number;
  /** Destination LID (IB; 0 on RoCE). */
  readonly dlid?: number;
  /** Service level. */
  readonly sl?: number;
  /** Source path bits. */
  readonly srcPathBits?: number;
  /** `enum ibv_rate` (0 = port rate). */
  readonly staticRate?: number;
  /** The GRH; sets `is_global`. */
  readonly grh?: GlobalRoute;
}

/** Writes an `ibv_ah_attr` at `base` of `view`. */
export function encodeAhAttr(view: DataView, base: number, a: AhAttr): void {
  const F = layoutFor(native().arch).ibv_ah_attr.fields;
  if (!Number.isInteger(a.port) || a.port < 1 || a.port > 255) {
    throw new InvalidArgumentError(`ah port must be 1..255, got ${a.port}`);
  }
  view.setUint16(base + F.dlid.offset, a.dlid ?? 0, true);
  view.setUint8(base + F.sl.offset, a.sl ?? 0);
  view.setUint8(base + F.src_path_bits.offset, a.srcPathBits ?? 0);
  view.setUint8(base + F.static_rate.offset, a.staticRate ?? 0);
  view.setUint8(base + F.port_num.offset, a.port);
  view.setUint8(base + F.is_global.offset, a.grh ? 1 : 0);
  if (a.grh) {
    const g = a.grh;
    new Uint8Array(view.buffer, view.byteOffset + base + F["grh.dgid"].offset, 16).set(
      parseGid(g.dgid),
    );
    view.setUint32(base + F["grh.flow_label"].offset, g.flowLabel ?? 0, true);
    view.setUint8(base + F["grh.sgid_index"].offset, g.sgidIndex);
    view.setUint8(base + F["grh.hop_limit"].offset, g.hopLimit ?? 1);
    view.setUint8(base + F["grh.traffic_class"].offset, g.trafficClass ?? 0);
  }
}

/** An address handle (`ibv_create_ah`). */
export class AddressHandle extends Resource {
  /** The `struct ibv_ah *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;

  private constructor(pd: ProtectionDomain, ptr: NativePointer) {
    super("AddressHandle", [pd]);
    this.ptr = ptr;
    this.pd = pd;
  }

  /** `ibv_create_ah` from attributes. */
  static fromAttr(pd: ProtectionDomain, attr: AhAttr): AddressHandle {
    const n = native();
    const block = new NativeBlock(layoutFor(n.arch).ibv_ah_attr.size, 8);
    try {
      encodeAhAttr(block.view, 0, attr);
      const ah = n.ibverbs.ibv_create_ah(pd.ptr, block.ptr);
      if (ah === null) throwErrno("ibv_create_ah");
      return new AddressHandle(pd, ah);
    } finally {
      block.free();
    }
  }

  /**
   * `ibv_create_ah_from_wc`: an AH back to the sender of a UD receive completion.
   * `grh` locates the 40-byte GRH at the start of the receive buffer.
   */
  static fromWc(
    pd: ProtectionDomain,
    wc: WorkCompletion,
    grh: { mr: MemoryRegion; offset?: number },
    port: number,
  ): AddressHandle {
    grh.mr.assertOpen();
    const off = grh.offset ?? 0;
    if (off < 0 || off + 40 > grh.mr.length) {
      throw new InvalidArgumentError("the GRH (40 bytes) must lie inside the MR");
    }
    const n = native();
    const grhPtr = n.pointer(grh.mr.addrNumber + off);
    const ah = n.ibverbs.ibv_create_ah_from_wc(pd.ptr, wc.pointer, grhPtr, port);
    if (ah === null) throwErrno("ibv_create_ah_from_wc");
    return new AddressHandle(pd, ah);
  }

  protected destroy(): void {
    const rc = native().ibverbs.ibv_destroy_ah(this.ptr);
    if (rc !== 0) throwReturned("ibv_destroy_ah", rc);
  }
}
