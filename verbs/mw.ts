/**
 * Memory windows (`ibv_alloc_mw`): type 2 windows are bound with a BIND_MW send
 * work request on a QP of the same PD and invalidated with LOCAL_INV (or a peer's
 * SEND_WITH_INV).
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { MwType } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { layoutFor } from "../types/layout.ts";
import { nativeError, throwReturned } from "../ffi/errors.ts";
import { Resource } from "./resource.ts";
import type { ProtectionDomain } from "./pd.ts";

/** A memory window. `rkey` is the key of the current (or next) binding. */
export class MemoryWindow extends Resource {
  /** The `struct ibv_mw *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;
  /** `MwType.TYPE_1` or `MwType.TYPE_2`. */
  readonly type: number;
  /** The rkey a peer uses after the latest bind (updated when a bind is posted). */
  rkey: number;

  /** Allocates a window; prefer `pd.allocMw()`. */
  constructor(pd: ProtectionDomain, type: number = MwType.TYPE_2) {
    if (type !== MwType.TYPE_1 && type !== MwType.TYPE_2) {
      throw new InvalidArgumentError(`memory window type must be 1 or 2, got ${type}`);
    }
    const n = native();
    const fn = pd.context.op("alloc_mw");
    if (!fn) throw nativeError("ibv_alloc_mw", Errno.EOPNOTSUPP);
    const mw = n.fnPointer(fn, IBVERBS_OPS.alloc_mw)(pd.ptr, type);
    if (mw === null) throwReturned("ibv_alloc_mw", n.errno() || Errno.ENOMEM);
    super("MemoryWindow", [pd]);
    this.ptr = mw;
    this.pd = pd;
    this.type = type;
    const L = layoutFor(n.arch).ibv_mw.fields.rkey;
    this.rkey = new DataView(n.arrayBuffer(mw, L.offset + 4)).getUint32(L.offset, true);
  }

  /** The rkey the next bind will use (`ibv_inc_rkey`: the low 8 bits advance). */
  nextRkey(): number {
    return ((this.rkey & 0xffffff00) | ((this.rkey + 1) & 0xff)) >>> 0;
  }

  protected destroy(): void {
    const n = native();
    const fn = this.pd.context.closed ? null : n.readPointer(
      this.pd.context.ptr,
      layoutFor(n.arch).ibv_context.fields["ops.dealloc_mw"].offset,
    );
    if (!fn) return;
    const rc = n.fnPointer(fn, IBVERBS_OPS.dealloc_mw)(this.ptr);
    if (rc !== 0) throwReturned("ibv_dealloc_mw", rc);
  }
}
