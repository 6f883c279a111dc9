/**
 * Memory windows (`ibv_alloc_mw`): type 2 windows are bound with a BIND_MW send
 * work request on a QP of the same PD and invalidated with LOCAL_INV (or a peer's
 * SEND_WITH_INV).
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { MwType } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { nativeError, throwReturned } from "../ffi/errors.ts";
import { checkResource, NativeResource } from "../ffi/resource.ts";
import { ProtectionDomain } from "./pd.ts";
import { describe } from "../types/check.ts";

let rkeySetter: (mw: MemoryWindow, rkey: number) => void;

/** A memory window. `rkey` is the key of the current (or next) binding. */
export class MemoryWindow extends NativeResource {
  /** The `struct ibv_mw *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;
  /** `MwType.TYPE_1` or `MwType.TYPE_2`. */
  readonly type: MwType;
  #rkey: number;

  static {
    rkeySetter = (mw, rkey) => {
      mw.#rkey = rkey;
    };
  }

  /** Allocates a window; prefer `pd.allocMw()`. */
  constructor(pd: ProtectionDomain, type: MwType = MwType.TYPE_2) {
    checkResource(pd, ProtectionDomain, "pd");
    if (type !== MwType.TYPE_1 && type !== MwType.TYPE_2) {
      throw new InvalidArgumentError(`memory window type must be 1 or 2, got ${describe(type)}`);
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
    const L = layouts().ibv_mw.fields.rkey;
    this.#rkey = new DataView(n.arrayBuffer(mw, L.offset + 4)).getUint32(L.offset, true);
  }

  /** The rkey a peer uses after the latest bind (advanced when a BIND_MW is posted). */
  get rkey(): number {
    return this.#rkey;
  }

  /** The rkey the next bind will use (`ibv_inc_rkey`: the low 8 bits advance). */
  nextRkey(): number {
    return ((this.rkey & 0xffffff00) | ((this.rkey + 1) & 0xff)) >>> 0;
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

/** Records the rkey a posted BIND_MW gave the window (module-private: the posting step). */
export function setWindowRkey(mw: MemoryWindow, rkey: number): void {
  rkeySetter(mw, rkey);
}
