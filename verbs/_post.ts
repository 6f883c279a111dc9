/**
 * Posting work requests through the provider's function pointers: one prepared call per queue
 * and list, `bad_wr` mapped to the index of the failing request ({@link PostCall}), a reusable
 * native list per queue ({@link ListPoster}), and the one "check each, post the valid prefix,
 * throw for the first bad one" step ({@link postChecked}).
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { PreparedCall } from "../types/native.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { InvalidWorkRequestError, PostError } from "./post-errors.ts";
import { countSges, type RecvWr, recvWrProblem, type SendWr } from "./wr.ts";
import type { ProtectionDomain } from "./pd.ts";
import { WrList } from "./_wr-list.ts";

type PostSpec = typeof IBVERBS_OPS.post_send;

/** Which inline verb a list is posted with. */
export type PostOp = "post_send" | "post_recv" | "post_srq_recv";

const OP_NAMES: Record<PostOp, string> = {
  post_send: "ibv_post_send",
  post_recv: "ibv_post_recv",
  post_srq_recv: "ibv_post_srq_recv",
};

/**
 * One prepared call of a post verb on one queue: `run(list)` posts the list the call points at
 * (its `bad_wr` out-parameter is the list's own slot) and maps a failure to {@link PostError}
 * with the index of `bad_wr`. Allocates nothing.
 */
export class PostCall {
  readonly #op: PostOp;
  readonly #call: PreparedCall<PostSpec>;

  /** Prepares `op` (function pointer `fn`) on the queue `obj` with `list`. */
  constructor(op: PostOp, fn: NativePointer, obj: NativePointer, list: WrList) {
    this.#op = op;
    this.#call = native().prepareCall(fn, IBVERBS_OPS[op], [obj, list.wr(0), list.badWr]);
  }

  /** Points the call at another list. */
  retarget(list: WrList): void {
    this.#call.setArg(1, list.wr(0));
    this.#call.setArg(2, list.badWr);
  }

  /** Posts; throws PostError naming the first request the provider refused. */
  run(list: WrList): void {
    const rc = this.#call.call();
    if (rc !== 0) throw new PostError(OP_NAMES[this.#op], Math.abs(rc), list.badIndex());
  }

  /** Frees the native argument block (idempotent). */
  free(): void {
    this.#call.free();
  }
}

/**
 * Checks each WR of `owner` with `problem`; posts the valid prefix with `post` (as
 * `ibv_post_send` does up to `bad_wr`), then throws {@link InvalidWorkRequestError} for the first
 * invalid WR. `problem` and `post` are module-level hooks of the owner's class, shared by all its
 * objects (an object stores no callback of its own: docs/06-lifetimes.md).
 */
export function postChecked<O, W>(
  what: string,
  owner: O,
  wrs: readonly W[],
  problem: (owner: O, wr: W) => string | null,
  post: (owner: O, wrs: readonly W[], count: number) => void,
): void {
  let bad = -1;
  let reason: string | null = null;
  for (let i = 0; i < wrs.length; i++) {
    reason = problem(owner, wrs[i]);
    if (reason !== null) {
      bad = i;
      break;
    }
  }
  const count = bad < 0 ? wrs.length : bad;
  if (count > 0) post(owner, wrs, count);
  if (bad >= 0) throw new InvalidWorkRequestError(what, bad, reason!);
}

/**
 * A one-WR array reused by the single-WR overloads, so posting one WR allocates nothing. Its
 * length stays 1: V8 changes an array's length through the runtime (about 50 ns a call on the
 * host), so `clear()` empties the slot instead.
 */
export class One<W> {
  readonly #list: (W | undefined)[] = [undefined];
  /** `wrs` as an array: itself when it is one, else the reused one-element array. */
  of(wrs: W | readonly W[]): readonly W[] {
    if (Array.isArray(wrs)) return wrs;
    this.#list[0] = wrs as W;
    return this.#list as W[];
  }
  /** Drops the reference to the last single WR. */
  clear(): void {
    this.#list[0] = undefined;
  }
}

/** One queue's poster: a native WR list reused across posts and its prepared call. */
export class ListPoster {
  readonly #op: PostOp;
  readonly #fn: NativePointer;
  readonly #obj: NativePointer;
  readonly #wrSize: number;
  #list: WrList | null = null;
  #call: PostCall | null = null;

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
      if (!this.#call) this.#call = new PostCall(this.#op, this.#fn, this.#obj, list);
      else this.#call.retarget(list);
      old?.block.free();
      this.#list = list;
    }
    return list;
  }

  /** Encodes and posts the first `count` send WRs (already checked). */
  postSend(wrs: readonly SendWr[], count: number): void {
    const list = this.#ensure(count, countSges(wrs, count));
    list.encodeSend(wrs, count);
    this.#call!.run(list);
  }

  /** Encodes and posts the first `count` receive WRs (already checked). */
  postRecv(wrs: readonly RecvWr[], count: number): void {
    const list = this.#ensure(count, countSges(wrs, count));
    list.encodeRecv(wrs, count);
    this.#call!.run(list);
  }

  /** Frees the native memory. */
  free(): void {
    this.#call?.free();
    this.#list?.block.free();
    this.#call = null;
    this.#list = null;
  }
}

/**
 * The receive posting of an SRQ, plain or XRC (`ibv_post_srq_recv`): each WR checked against the
 * SRQ's PD and granted SGEs, the valid prefix posted from a reused native list.
 */
export class SrqRecvPoster {
  readonly #pd: ProtectionDomain;
  readonly #maxSge: number;
  readonly #list: ListPoster;
  readonly #one = new One<RecvWr>();

  /** A poster for the SRQ `srq` (`fn`: the context's `post_srq_recv`). */
  constructor(
    pd: ProtectionDomain,
    maxSge: number,
    fn: NativePointer,
    srq: NativePointer,
    wrSize: number,
  ) {
    this.#pd = pd;
    this.#maxSge = maxSge;
    this.#list = new ListPoster("post_srq_recv", fn, srq, wrSize);
  }

  /** Why `wr` cannot be posted on the SRQ, or null. */
  problem(wr: RecvWr): string | null {
    return recvWrProblem(wr, this.#pd, this.#maxSge);
  }

  /** Checks and posts `wrs` (the WRs before an invalid one are posted, as `postChecked` says). */
  post(wrs: RecvWr | readonly RecvWr[]): void {
    try {
      postChecked("ibv_post_srq_recv", this, this.#one.of(wrs), srqProblem, srqPostValid);
    } finally {
      this.#one.clear();
    }
  }

  /** Posts WRs already checked. */
  postValid(wrs: readonly RecvWr[], count: number): void {
    this.#list.postRecv(wrs, count);
  }

  /** Frees the native list (idempotent). */
  free(): void {
    this.#list.free();
  }
}

// the hooks postChecked calls on an SRQ poster (shared by all)
const srqProblem = (p: SrqRecvPoster, wr: RecvWr) => p.problem(wr);
const srqPostValid = (p: SrqRecvPoster, wrs: readonly RecvWr[], count: number) =>
  p.postValid(wrs, count);
