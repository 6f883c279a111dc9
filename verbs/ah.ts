/**
 * Address handles: where a UD send goes. Created from attributes, or from a
 * received completion and its GRH to reply to the sender.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { throwErrno, throwReturned } from "../ffi/errors.ts";
import { type GidLike, parseGid } from "./gid.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, checkResource, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import type { MemoryRegion } from "./mr.ts";
import type { ProtectionDomain } from "./pd.ts";
import { WorkCompletion } from "./wc.ts";
import { checkInteger } from "../types/check.ts";

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

/** An `ibv_ah_attr` read back (from a CM event or a query): every field present. */
export interface AhAttrData extends AhAttr {
  /** Destination LID (0 on RoCE). */
  readonly dlid: number;
  /** Service level. */
  readonly sl: number;
  /** Source path bits. */
  readonly srcPathBits: number;
  /** `enum ibv_rate`. */
  readonly staticRate: number;
  /** The GRH, when `is_global` is set; its `dgid` as 16 bytes. */
  readonly grh?: GlobalRoute & { readonly dgid: Uint8Array };
}

function uint(name: string, v: number | undefined, dflt: number, max: number, min = 0): number {
  return v === undefined ? dflt : checkInteger(name, v, min, max);
}

/** Writes an `ibv_ah_attr` at `base` of `view` after checking every field's range. */
export function encodeAhAttr(view: DataView, base: number, a: AhAttr): void {
  const F = layouts().ibv_ah_attr.fields;
  if (typeof a !== "object" || a === null) {
    throw new InvalidArgumentError("ah attr must be an object");
  }
  const port = uint("ah port", a.port, 0, 255, 1);
  const dlid = uint("dlid", a.dlid, 0, 0xffff);
  const sl = uint("sl", a.sl, 0, 15);
  const bits = uint("srcPathBits", a.srcPathBits, 0, 0x7f);
  const rate = uint("staticRate", a.staticRate, 0, 0xff);
  const g = a.grh;
  if (g !== undefined && (typeof g !== "object" || g === null)) {
    throw new InvalidArgumentError("grh must be an object");
  }
  const grh = g && {
    dgid: parseGid(g.dgid),
    flowLabel: uint("grh.flowLabel", g.flowLabel, 0, 0xfffff),
    sgidIndex: uint("grh.sgidIndex", g.sgidIndex, -1, 0xff),
    hopLimit: uint("grh.hopLimit", g.hopLimit, 1, 0xff),
    trafficClass: uint("grh.trafficClass", g.trafficClass, 0, 0xff),
  };
  if (grh && grh.sgidIndex < 0) throw new InvalidArgumentError("grh.sgidIndex is required");
  view.setUint16(base + F.dlid.offset, dlid, true);
  view.setUint8(base + F.sl.offset, sl);
  view.setUint8(base + F.src_path_bits.offset, bits);
  view.setUint8(base + F.static_rate.offset, rate);
  view.setUint8(base + F.port_num.offset, port);
  view.setUint8(base + F.is_global.offset, grh ? 1 : 0);
  if (grh) {
    new Uint8Array(view.buffer, view.byteOffset + base + F["grh.dgid"].offset, 16).set(grh.dgid);
    view.setUint32(base + F["grh.flow_label"].offset, grh.flowLabel, true);
    view.setUint8(base + F["grh.sgid_index"].offset, grh.sgidIndex);
    view.setUint8(base + F["grh.hop_limit"].offset, grh.hopLimit);
    view.setUint8(base + F["grh.traffic_class"].offset, grh.trafficClass);
  }
}

/** Reads an `ibv_ah_attr` at `base` of `view`. */
export function decodeAhAttr(view: DataView, base: number): AhAttrData {
  const F = layouts().ibv_ah_attr.fields;
  const at = (f: { offset: number }) => base + f.offset;
  const global = view.getUint8(at(F.is_global)) !== 0;
  const dgid = at(F["grh.dgid"]);
  return {
    port: view.getUint8(at(F.port_num)),
    dlid: view.getUint16(at(F.dlid), true),
    sl: view.getUint8(at(F.sl)),
    srcPathBits: view.getUint8(at(F.src_path_bits)),
    staticRate: view.getUint8(at(F.static_rate)),
    grh: global
      ? {
        dgid: new Uint8Array(
          view.buffer.slice(view.byteOffset + dgid, view.byteOffset + dgid + 16),
        ),
        flowLabel: view.getUint32(at(F["grh.flow_label"]), true),
        sgidIndex: view.getUint8(at(F["grh.sgid_index"])),
        hopLimit: view.getUint8(at(F["grh.hop_limit"])),
        trafficClass: view.getUint8(at(F["grh.traffic_class"])),
      }
      : undefined,
  };
}

/** An address handle (`ibv_create_ah`); made by `pd.createAh()` and `pd.createAhFromWc()`. */
export class AddressHandle extends NativeResource {
  /** The `struct ibv_ah *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;

  /** Not for direct use: `pd.createAh()` and `pd.createAhFromWc()` make one. */
  constructor(pd: ProtectionDomain, ptr: NativePointer, token: symbol) {
    checkConstruct(token, "address handles are made by pd.createAh()");
    super("AddressHandle", [pd]);
    this.ptr = ptr;
    this.pd = pd;
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    const rc = native().ibverbs.ibv_destroy_ah(this.ptr);
    if (rc !== 0) throwReturned("ibv_destroy_ah", rc);
  }
}

/** `ibv_create_ah` from attributes (module-private: `pd.createAh`). */
export function createAh(pd: ProtectionDomain, attr: AhAttr): AddressHandle {
  return NativeBlock.with(layouts().ibv_ah_attr.size, (block) => {
    encodeAhAttr(block.view, 0, attr);
    const ah = native().ibverbs.ibv_create_ah(pd.ptr, block.ptr);
    if (ah === null) throwErrno("ibv_create_ah");
    return wrapAh(pd, ah);
  });
}

/** `ibv_create_ah_from_wc` (module-private: `pd.createAhFromWc`). */
export function createAhFromWc(
  pd: ProtectionDomain,
  wc: WorkCompletion,
  grh: { mr: MemoryRegion; offset?: number },
  port: number,
): AddressHandle {
  if (!(wc instanceof WorkCompletion)) {
    throw new InvalidArgumentError("wc must be a CQ's WorkCompletion cursor");
  }
  if (typeof grh !== "object" || grh === null) {
    throw new InvalidArgumentError("grh must be { mr, offset }");
  }
  const mr = checkResource<MemoryRegion>(grh.mr, "MemoryRegion", "grh.mr");
  const off = grh.offset ?? 0;
  if (!Number.isInteger(off) || off < 0 || off + 40 > mr.length) {
    throw new InvalidArgumentError("the GRH (40 bytes) must lie inside the MR");
  }
  checkInteger("port", port, 1, 255);
  const n = native();
  const grhPtr = n.pointer(mr.addrNumber + off);
  const ah = n.ibverbs.ibv_create_ah_from_wc(pd.ptr, wc.pointer, grhPtr, port);
  if (ah === null) throwErrno("ibv_create_ah_from_wc");
  return wrapAh(pd, ah);
}

function wrapAh(pd: ProtectionDomain, ah: NativePointer): AddressHandle {
  try {
    return new AddressHandle(pd, ah, CONSTRUCT);
  } catch (e) {
    native().ibverbs.ibv_destroy_ah(ah);
    throw e;
  }
}
