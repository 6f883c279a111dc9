/**
 * Posting lists of work requests through the provider's function pointers, with
 * a reusable native WR list per queue and `bad_wr` turned into an index.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { PreparedCall } from "../types/native.ts";
import type { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { IBVERBS_OPS as OPS } from "../types/symbols/ibverbs.ts";
import { NativeBlock } from "./memory.ts";
import { PostError } from "./post-errors.ts";
import { countSges, type RecvWr, type SendWr, WrList } from "./wr.ts";

type PostSpec = typeof IBVERBS_OPS.post_send;

/** Which inline verb a list is posted with. */
export type PostOp = "post_send" | "post_recv" | "post_srq_recv";

const OP_NAMES: Record<PostOp, string> = {
  post_send: "ibv_post_send",
  post_recv: "ibv_post_recv",
  post_srq_recv: "ibv_post_srq_recv",
};

/** One queue's poster: a native WR list reused across posts and its prepared call. */
export class ListPoster {
  readonly #op: PostOp;
  readonly #fn: NativePointer;
  readonly #obj: NativePointer;
  readonly #wrSize: number;
  readonly #bad = new NativeBlock(8, 8);
  #list: WrList | null = null;
  #call: PreparedCall<PostSpec> | null = null;

  /** Creates a poster for `op` (function pointer `fn`) on the queue `obj`. */
  constructor(op: PostOp, fn: NativePointer, obj: NativePointer, wrSize: number) {
    this.#op = op;
    this.#fn = fn;
    this.#obj = obj;
    this.#wrSize = wrSize;
  }

  #ensure(count: number, sges: number): WrList {
    let list = this.#list;
    if (!list || list.capacity < count || list.sgeCapacity < sges) {
      const old = list;
      list = new WrList(this.#wrSize, Math.max(count, 8), Math.max(sges, 16));
      if (!this.#call) {
        this.#call = native().prepareCall(this.#fn, OPS[this.#op], [
          this.#obj,
          list.wr(0),
          this.#bad.ptr,
        ]);
      } else this.#call.setArg(1, list.wr(0));
      old?.block.free();
      this.#list = list;
    }
    return list;
  }

  #run(list: WrList): void {
    const rc = this.#call!.call();
    if (rc !== 0) {
      const bad = native().readPointer(this.#bad.ptr, 0);
      throw new PostError(OP_NAMES[this.#op], Math.abs(rc), list.indexOf(bad));
    }
  }

  /** Encodes and posts the first `count` send WRs (already checked). */
  postSend(wrs: readonly SendWr[], count: number): void {
    const list = this.#ensure(count, countSges(wrs.slice(0, count)));
    list.encodeSend(wrs, count);
    this.#run(list);
  }

  /** Encodes and posts the first `count` receive WRs (already checked). */
  postRecv(wrs: readonly RecvWr[], count: number): void {
    const list = this.#ensure(count, countSges(wrs.slice(0, count)));
    list.encodeRecv(wrs, count);
    this.#run(list);
  }

  /** Frees the native memory. */
  free(): void {
    this.#call?.free();
    this.#list?.block.free();
    this.#bad.free();
    this.#call = null;
    this.#list = null;
  }
}

/** The name of the C call behind a post operation. */
export function postOpName(op: PostOp): string {
  return OP_NAMES[op];
}
