/**
 * Memory windows (`ibv_alloc_mw`): type 2 windows are bound with a BIND_MW send
 * work request on a QP of the same PD and invalidated with LOCAL_INV (or a peer's
 * SEND_WITH_INV); type 1 windows are bound with `mw.bind(qp, ...)` (`ibv_bind_mw`, which posts
 * the bind on the QP's send queue) and unbound with `mw.unbind(qp)`.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { AccessFlags, MwType, QpState, QpType, SendFlags } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { nativeError, throwReturned } from "../ffi/errors.ts";
import { checkConstruct, checkResource, NativeResource } from "../ffi/resource.ts";
import type { ProtectionDomain } from "./pd.ts";
import { describe } from "../types/check.ts";
import { NativeBlock, setU64 } from "../ffi/memory.ts";
import type { MemoryRegion } from "./mr.ts";
import type { QueuePair } from "./qp.ts";
import { QpStateError } from "./post-errors.ts";
import { isU64, type U64 } from "./wr.ts";

/** A type-1 window's binding (`struct ibv_mw_bind`): the MR range it exposes and how. */
export interface MwBindOptions {
  /** The MR whose range is bound (registered with `AccessFlags.MW_BIND`, same PD). */
  readonly mr: MemoryRegion;
  /** Offset of the range in the MR (default 0). */
  readonly offset?: number;
  /** Bytes of the range (default: to the end of the MR). */
  readonly length?: number;
  /** `AccessFlags` the window grants (remote read/write/atomic). */
  readonly access: number;
  /** The wr_id of the bind's completion (default 0). */
  readonly wrId?: U64;
  /** `SendFlags` of the bind (default `SIGNALED`). */
  readonly flags?: number;
}

/** A memory window. `rkey` is the key of the current (or next) binding. */
export class MemoryWindow extends NativeResource {
  /** The `struct ibv_mw *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;
  /** `MwType.TYPE_1` or `MwType.TYPE_2`. */
  readonly type: MwType;
  /** The `struct ibv_mw`: `rkey` lives there (the provider updates it when it binds). */
  readonly #view: DataView;
  #boundMr: MemoryRegion | null = null;

  /** Not for direct use: `pd.allocMw()` makes one. */
  constructor(pd: ProtectionDomain, type: MwType | undefined, token: symbol) {
    checkConstruct(token, "memory windows are made by pd.allocMw()");
    checkResource<ProtectionDomain>(pd, "ProtectionDomain", "pd");
    type ??= MwType.TYPE_2;
    if (type !== MwType.TYPE_1 && type !== MwType.TYPE_2) {
      throw new InvalidArgumentError(`memory window type must be 1 or 2, got ${describe(type)}`);
    }
    const n = native();
    const fn = pd.context.op("alloc_mw");
    if (!fn) throw nativeError("ibv_alloc_mw", Errno.EOPNOTSUPP);
    n.setErrno(0);
    const mw = n.fnPointer(fn, IBVERBS_OPS.alloc_mw)(pd.ptr, type);
    if (mw === null) {
      const errno = n.errno();
      throw nativeError(
        "ibv_alloc_mw",
        errno || Errno.EOPNOTSUPP,
        `${pd.context.deviceName}, type ${type}${
          errno ? "" : "; the provider returned NULL without errno"
        }`,
      );
    }
    super("MemoryWindow", [pd]);
    this.ptr = mw;
    this.pd = pd;
    this.type = type;
    this.#view = mwView(mw);
  }

  /** The rkey a peer uses after the latest bind (advanced when a BIND_MW is posted). */
  get rkey(): number {
    return this.#view.getUint32(layouts().ibv_mw.fields.rkey.offset, true);
  }

  /** The rkey the next bind will use (`ibv_inc_rkey`: the low 8 bits advance). */
  nextRkey(): number {
    return ((this.rkey & 0xffffff00) | ((this.rkey + 1) & 0xff)) >>> 0;
  }

  /**
   * `ibv_bind_mw` (type 1): binds the window to a range of an MR through `qp`'s send queue (an
   * RC/UC QP of the same PD, in RTS). The bind completes on the QP's send CQ (with `wrId`
   * when signaled); the new `rkey` is valid once it completed successfully.
   */
  bind(qp: QueuePair, options: MwBindOptions): number {
    const q = this.#bindQp(qp);
    if (typeof options !== "object" || options === null) {
      throw new InvalidArgumentError("bind options must be an object");
    }
    const mr = checkResource<MemoryRegion>(options.mr, "MemoryRegion", "mr");
    if (mr.pd !== this.pd) throw new InvalidArgumentError("ibv_bind_mw: the MR is in another PD");
    if ((mr.access & AccessFlags.MW_BIND) === 0) {
      throw new InvalidArgumentError("ibv_bind_mw: the MR lacks IBV_ACCESS_MW_BIND");
    }
    const off = options.offset ?? 0;
    // the offset first: the default length is computed from it
    const len = Number.isSafeInteger(off) ? options.length ?? mr.length - off : options.length;
    if (
      !Number.isSafeInteger(off) || !Number.isSafeInteger(len) || off < 0 || len! <= 0 ||
      off + len! > mr.length
    ) {
      throw new InvalidArgumentError(
        `ibv_bind_mw: range ${describe(off)}+${describe(len)} is outside the MR`,
      );
    }
    const access = options.access;
    if (!Number.isInteger(access) || access < 0 || (access & AccessFlags.ZERO_BASED) !== 0) {
      throw new InvalidArgumentError(`ibv_bind_mw: access must be AccessFlags bits, got ${access}`);
    }
    return this.#bind(q, mr, off, len!, access, options.wrId ?? 0, options.flags);
  }

  /**
   * Unbinds a type-1 window through `qp`: `ibv_bind_mw` with length 0 over the MR of the last
   * bind (a NULL MR, which libibverbs also allows, crashes soft-RoCE's provider up to at least
   * rdma-core 44: it reads the MR's lkey unconditionally). Returns the new rkey.
   */
  unbind(qp: QueuePair, options: { readonly wrId?: U64; readonly flags?: number } = {}): number {
    const q = this.#bindQp(qp);
    const mr = this.#boundMr;
    if (mr === null) throw new InvalidArgumentError("unbind: the window is not bound");
    if (mr.closed) throw new InvalidArgumentError("unbind: the MR of the last bind is closed");
    return this.#bind(q, mr, 0, 0, 0, options.wrId ?? 0, options.flags);
  }

  #bindQp(qp: QueuePair): QueuePair {
    this.assertOpen();
    const q = checkResource<QueuePair>(qp, "QueuePair", "qp");
    if (this.type !== MwType.TYPE_1) {
      throw new InvalidArgumentError(
        "ibv_bind_mw binds type-1 windows; bind a type-2 window with a BIND_MW work request",
      );
    }
    if (q.pd !== this.pd) throw new InvalidArgumentError("ibv_bind_mw: the QP is in another PD");
    if (q.type !== QpType.RC && q.type !== QpType.UC) {
      throw new InvalidArgumentError("ibv_bind_mw: the QP must be RC or UC");
    }
    if (q.state !== QpState.RTS) throw new QpStateError("ibv_bind_mw", q.stateName);
    return q;
  }

  #bind(
    qp: QueuePair,
    mr: MemoryRegion,
    off: number,
    len: number,
    access: number,
    wrId: U64,
    flags: number | undefined,
  ): number {
    if (!isU64(wrId)) throw new InvalidArgumentError(`ibv_bind_mw: wrId must be a U64`);
    const f = flags ?? SendFlags.SIGNALED;
    if (!Number.isInteger(f) || f < 0 || f > 0xff) {
      throw new InvalidArgumentError(`ibv_bind_mw: flags must be SendFlags bits, got ${f}`);
    }
    const n = native();
    const fn = this.pd.context.op("bind_mw");
    if (!fn) throw nativeError("ibv_bind_mw", Errno.EOPNOTSUPP, this.pd.context.deviceName);
    const L = layouts();
    const B = L.ibv_mw_bind.fields;
    const rc = NativeBlock.with(L.ibv_mw_bind.size, (b) => {
      setU64(b.view, B.wr_id.offset, wrId);
      b.view.setUint32(B.send_flags.offset, f, true);
      b.setPointer(B["bind_info.mr"].offset, mr.ptr);
      setU64(b.view, B["bind_info.addr"].offset, mr.addrNumber + off);
      setU64(b.view, B["bind_info.length"].offset, len);
      b.view.setUint32(B["bind_info.mw_access_flags"].offset, access, true);
      return n.fnPointer(fn, IBVERBS_OPS.bind_mw)(qp.ptr, this.ptr, b.ptr);
    });
    if (rc !== 0) throwReturned("ibv_bind_mw", rc, `${this.pd.context.deviceName}, QP ${qp.qpNum}`);
    this.#boundMr = len > 0 ? mr : null;
    return this.rkey;
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    const n = native();
    const fn = this.pd.context.closed ? null : this.pd.context.op("dealloc_mw");
    if (!fn) return;
    const rc = n.fnPointer(fn, IBVERBS_OPS.dealloc_mw)(this.ptr);
    if (rc !== 0) throwReturned("ibv_dealloc_mw", rc);
  }
}

/** A view of a `struct ibv_mw`. */
function mwView(mw: NativePointer): DataView {
  return new DataView(native().arrayBuffer(mw, layouts().ibv_mw.size));
}

/**
 * Records the rkey a posted BIND_MW gave the window in `mw->rkey`, as a C program does after
 * `ibv_inc_rkey` (module-private: the posting step).
 */
export function setWindowRkey(mw: MemoryWindow, rkey: number): void {
  mwView(mw.ptr).setUint32(layouts().ibv_mw.fields.rkey.offset, rkey, true);
}
