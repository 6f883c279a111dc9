/**
 * Completion queues: `poll` fills a native WC array through one prepared FFI call
 * and exposes the completions in place through a reusable cursor.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { PreparedCall } from "../types/native.ts";
import { ClosedError, InvalidArgumentError } from "../types/errors.ts";
import {
  awaitCompletions,
  cancelCompletionWaits,
  completions,
  type CompletionWaitOptions,
} from "../poller/completions.ts";
import { CompletionPump, type CompletionRecord } from "../poller/tracker.ts";
import type { WaitOptions } from "../poller/wait.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { nativeError, throwErrno, throwReturned } from "../ffi/errors.ts";
import { Errno } from "../types/errno.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, checkResource, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import { WorkCompletion } from "./wc.ts";
import { type CompletionChannel, countArmed } from "./channel.ts";
import type { Context } from "./context.ts";
import { forgetObject, rememberObject } from "./_objects.ts";
import type { RecvWr, SendWr } from "./wr.ts";
import { holdMemory } from "./mr.ts";
import { checkInteger, checkObject } from "../types/check.ts";

/** Options of {@link Context.createCq}. */
export interface CqInit {
  /** Minimum number of entries (the provider may grant more; see `cq.cqe`). */
  readonly cqe: number;
  /** A completion channel for event notification. */
  readonly channel?: CompletionChannel;
  /** Completion vector (default 0). */
  readonly compVector?: number;
  /** Size of the native WC array one `poll` fills (default min(cqe, 64)). */
  readonly pollBatch?: number;
}

/** Something that receives the completions of one QP from a shared CQ (a QueuePair). */
interface CompletionTarget {
  readonly qpNum: number;
  onCompletion: ((wc: WorkCompletion) => void) | null;
}

/**
 * The wr_ids `qp.send()`/`qp.recv()` post with: from 2^62 up. A CQ with tracked work requests
 * reserves them; post other work requests on it with wr_ids below 2^62.
 */
export const TRACKED_WR_ID_BASE: bigint = 1n << 62n;

const POLL_BATCH_MAX = 4096;

/**
 * The most polls one `poll(max, tries)` makes: each blocks the event loop for about what one
 * provider poll takes (tens of nanoseconds on hardware).
 */
export const MAX_POLL_TRIES = 65536;

/** A {@link CqInit} after its checks (module-private). */
export interface CheckedCqInit {
  /** Minimum number of entries. */
  readonly cqe: number;
  /** The completion channel, or null. */
  readonly channel: CompletionChannel | null;
  /** Completion vector. */
  readonly compVector: number;
  /** Size of the native WC array one `poll` fills. */
  readonly pollBatch: number;
}

/**
 * The native CQ a {@link CompletionQueue} wraps (module-private): its pointer and, for a CQ not
 * polled with `ibv_poll_cq` (an extended CQ), the poll that fills the CQ's `struct ibv_wc` array.
 */
export interface CqHandle {
  /** The `struct ibv_cq *`. */
  readonly ptr: NativePointer;
  /** Given the CQ's native WC array, returns the poll that fills it (up to `max` entries). */
  readonly poll?: (wcs: NativeBlock) => (max: number) => number;
}

/**
 * What a CQ shares with the QPs on it and the poller (module-private): the QPs `dispatch()` routes
 * to, CQ events not acked yet, the pump of tracked work requests and the next tracked wr_id.
 */
class CqLinks {
  readonly targets = new Map<number, CompletionTarget>();
  unacked = 0;
  /** Armed (`requestNotify`) and its event not read yet. */
  armed = false;
  pump: CompletionPump | null = null;
  tags = 0n;
  readonly #cq: CompletionQueue;

  constructor(cq: CompletionQueue) {
    this.#cq = cq;
  }

  /** Hands `wc` to the QP it belongs to, or to `onUnmatched`. */
  route(wc: WorkCompletion): void {
    const fn = this.targets.get(wc.qpNum)?.onCompletion ?? this.#cq.onUnmatched;
    if (fn) fn(wc);
  }

  /** The pump that drives the CQ for tracked work requests (made on first use). */
  pumpFor(): CompletionPump {
    const cq = this.#cq;
    return this.pump ??= new CompletionPump(cq, {
      strategy: cq.channel ? undefined : "busy",
      onUntracked: (wc) => this.route(wc as WorkCompletion),
    });
  }
}

/** A CQ's links (module-private: reads its private field). */
let linksOf: (cq: CompletionQueue) => CqLinks;

type PollSpec = typeof IBVERBS_OPS.poll_cq;
type NotifySpec = typeof IBVERBS_OPS.req_notify_cq;

/** A completion queue. */
export class CompletionQueue extends NativeResource {
  /** The `struct ibv_cq *`. */
  readonly ptr: NativePointer;
  /** Its context. */
  readonly context: Context;
  /** Its completion channel, if any. */
  readonly channel: CompletionChannel | null;
  /** How many WCs one `poll` can return. */
  readonly pollBatch: number;
  /** The cursor over the WC array; `completion(i)` moves it. */
  readonly wc: WorkCompletion;
  /** Completions received for a QP number no target is registered for (dispatch only). */
  onUnmatched: ((wc: WorkCompletion) => void) | null = null;
  readonly #wcs: NativeBlock;
  readonly #poll: PreparedCall<PollSpec>;
  readonly #notify: PreparedCall<NotifySpec>;
  #notifySolicited: PreparedCall<NotifySpec> | null = null; // made on first use
  readonly #cqView: DataView;
  readonly #links: CqLinks;
  #pollMax: number;
  readonly #custom: ((max: number) => number) | null;

  static {
    linksOf = (cq) => cq.#links;
  }

  /**
   * Not for direct use: `context.createCq()` makes CQs (`context.createCqEx()` too): `init` is
   * checked and the native CQ made before the object wraps it.
   */
  constructor(context: Context, init: CheckedCqInit, handle: CqHandle, token: symbol) {
    checkConstruct(token, "CQs are made by context.createCq()");
    super("CompletionQueue", [context, init.channel]);
    const n = native();
    const cq = handle.ptr;
    this.ptr = cq;
    this.context = context;
    this.channel = init.channel;
    this.#links = new CqLinks(this);
    const L = layouts();
    this.#cqView = new DataView(n.arrayBuffer(cq, L.ibv_cq.size));
    this.pollBatch = init.pollBatch;
    this.#wcs = new NativeBlock(L.ibv_wc.size * this.pollBatch, 64);
    this.wc = new WorkCompletion(this.#wcs.view, this.#wcs.ptr);
    this.#pollMax = this.pollBatch;
    this.#custom = handle.poll?.(this.#wcs) ?? null;
    this.#poll = n.prepareCall(context.op("poll_cq")!, IBVERBS_OPS.poll_cq, [
      cq,
      this.pollBatch,
      this.#wcs.ptr,
    ]);
    const notify = context.op("req_notify_cq")!;
    this.#notify = n.prepareCall(notify, IBVERBS_OPS.req_notify_cq, [cq, 0]);
    rememberObject(context, cq, this);
  }

  #solicitedCall(): PreparedCall<NotifySpec> {
    return this.#notifySolicited ??= native().prepareCall(
      this.context.op("req_notify_cq")!,
      IBVERBS_OPS.req_notify_cq,
      [this.ptr, 1],
    );
  }

  /** The number of entries the provider granted. */
  get cqe(): number {
    return this.#cqView.getInt32(layouts().ibv_cq.fields.cqe.offset, true);
  }

  /**
   * Polls up to `max` completions (default and limit: `pollBatch`) into the WC array
   * and returns how many arrived; read them with `completion(i)`. Allocates nothing.
   *
   * `tries` (default 1, at most {@link MAX_POLL_TRIES}) polls again while nothing arrived, up to
   * that many polls in all: a busy poll whose empty polls loop in native code where the runtime
   * can (Deno and Bun on x86-64), at what an empty poll costs C, instead of one FFI call each.
   */
  poll(max: number = this.pollBatch, tries: number = 1): number {
    if (this.closed) this.assertOpen();
    if (max !== this.#pollMax) {
      checkInteger("poll(max)", max, 1, this.pollBatch);
      this.#pollMax = max;
      this.#poll.setArg(1, max);
    }
    let got: number;
    if (tries === 1) got = this.#custom ? this.#custom(this.#pollMax) : this.#poll.call();
    else {
      if (!(tries >= 1 && tries <= MAX_POLL_TRIES) || !Number.isInteger(tries)) {
        checkInteger("poll(tries)", tries, 1, MAX_POLL_TRIES);
      }
      if (this.#custom) {
        got = this.#custom(this.#pollMax);
        while (got === 0 && --tries > 0) got = this.#custom(this.#pollMax);
      } else got = this.#poll.retry(tries);
    }
    if (got < 0) throw nativeError("ibv_poll_cq", Errno.EIO, `returned ${got}`);
    return got;
  }

  /** The cursor at completion `i` of the last `poll` (the same object each time). */
  completion(i: number): WorkCompletion {
    if (this.closed) this.assertOpen();
    if (typeof i !== "number" || !(i >= 0 && i < this.pollBatch) || !Number.isInteger(i)) {
      checkInteger("completion index", i, 0, this.pollBatch - 1);
    }
    return this.wc.at(i);
  }

  /**
   * Polls and hands each completion to the QP it belongs to (by qp_num): one CQ shared
   * by many QPs. Returns the number of completions handled.
   */
  dispatch(max: number = this.pollBatch): number {
    const got = this.poll(max);
    for (let i = 0; i < got; i++) this.#links.route(this.wc.at(i));
    return got;
  }

  /**
   * Waits until completions arrive and returns how many (read them with `completion(i)`),
   * with the poller's strategy (`adaptive` by default; `busy` when the CQ has no channel).
   */
  wait(options: CompletionWaitOptions = {}): Promise<number> {
    return awaitCompletions(this, this.#withStrategy(options));
  }

  /** `for await` over batches of completions: yields each batch's count; read with `completion(i)`. */
  batches(options: CompletionWaitOptions = {}): AsyncGenerator<number, void, undefined> {
    return completions(this, this.#withStrategy(options));
  }

  /**
   * A promise for the completion of a WR posted with `wrId` (post it signaled in the same tick):
   * resolves with a copy on success, rejects with WorkCompletionError on an error status. While
   * promises are pending the CQ is driven for them; completions nobody tracks go to their QP's
   * `onCompletion` (or `onUnmatched`). Do not also poll this CQ by hand meanwhile.
   * `qp.send()`/`qp.recv()` do this for one WR with a reserved wr_id
   * ({@link TRACKED_WR_ID_BASE}).
   */
  track(wrId: bigint, options?: WaitOptions): Promise<CompletionRecord> {
    try {
      this.assertOpen();
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#links.pumpFor().track(wrId, options);
  }

  #withStrategy(options: CompletionWaitOptions): CompletionWaitOptions {
    return options.strategy || this.channel ? options : { ...options, strategy: "busy" };
  }

  /**
   * Arms the CQ: the channel gets one event for the next completion (or the next
   * solicited one). Arm first, then drain with `poll`, then wait.
   */
  requestNotify(solicitedOnly = false): void {
    this.assertOpen();
    if (!this.channel) throw new InvalidArgumentError("requestNotify: the CQ has no channel");
    const rc = (solicitedOnly ? this.#solicitedCall() : this.#notify).call();
    if (rc !== 0) throwReturned("ibv_req_notify_cq", rc);
    const links = this.#links;
    if (!links.armed) {
      links.armed = true;
      countArmed(this.channel, 1);
    }
  }

  /** True from {@link CompletionQueue.requestNotify} until the channel reads the CQ's event. */
  get armed(): boolean {
    return this.#links.armed;
  }

  /** Resizes the CQ to at least `cqe` entries. */
  resize(cqe: number): void {
    this.assertOpen();
    checkInteger("cqe", cqe, 1, 0x7fffffff);
    const rc = native().ibverbs.ibv_resize_cq(this.ptr, cqe);
    if (rc !== 0) throwReturned("ibv_resize_cq", rc, `cqe ${cqe}`);
  }

  /** CQ events received from the channel and not yet acked. */
  get unackedEvents(): number {
    return this.#links.unacked;
  }

  /** Acks every counted CQ event now (`ibv_ack_cq_events`). */
  ackEvents(): void {
    const links = this.#links;
    if (links.unacked === 0) return;
    native().ibverbs.ibv_ack_cq_events(this.ptr, links.unacked);
    links.unacked = 0;
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    const n = native();
    // pending waits and tracked WRs settle with a typed error instead of hanging
    this.#links.pump?.close(new ClosedError("CompletionQueue"));
    cancelCompletionWaits(this);
    this.ackEvents(); // ibv_destroy_cq waits for every retrieved event to be acked
    forgetObject(this.context, this.ptr);
    this.#poll.free();
    this.#notify.free();
    this.#notifySolicited?.free();
    const rc = n.ibverbs.ibv_destroy_cq(this.ptr);
    this.#wcs.free();
    if (rc !== 0) throwReturned("ibv_destroy_cq", rc);
    disarm(this); // its event, if one was pending, went with it
  }
}

/** Registers a QP for `cq.dispatch()` (module-private: QPs do it for their CQs). */
export function attachTarget(cq: CompletionQueue, target: CompletionTarget): void {
  linksOf(cq).targets.set(target.qpNum, target);
}

/**
 * Removes a closing QP from dispatch, and settles its tracked work requests with ClosedError: no
 * completion comes for them once the QP is gone (module-private: QPs call it when they close).
 */
export function detachTarget(cq: CompletionQueue, target: CompletionTarget): void {
  const targets = linksOf(cq).targets;
  if (targets.get(target.qpNum) === target) targets.delete(target.qpNum);
  settleClosedQp(cq, target.qpNum);
}

/**
 * Rejects the tracked work requests of QP `qpNum` with ClosedError: the QP closed, so no
 * completion will come for them (module-private: QPs call it when they close).
 */
export function settleClosedQp(cq: CompletionQueue, qpNum: number): void {
  linksOf(cq).pump?.tracker.rejectQp(qpNum, new ClosedError("QueuePair"));
}

/**
 * Counts one CQ event, after which the CQ is no longer armed; acks in batches of `batch`
 * (module-private: the channel calls it).
 */
export function noteCqEvent(cq: CompletionQueue, batch: number): void {
  disarm(cq);
  if (++linksOf(cq).unacked >= batch) cq.ackEvents();
}

function disarm(cq: CompletionQueue): void {
  const links = linksOf(cq);
  if (!links.armed) return;
  links.armed = false;
  countArmed(cq.channel!, -1);
}

/**
 * Posts one WR with a reserved wr_id (`post(tag)`) and tracks it by that tag and the QP's
 * number, reporting the WR's own `wrId`; the MRs of its SGEs are held (refuse to close) until
 * it settles (module-private: `qp.send()`/`qp.recv()`).
 */
export function trackTagged(
  cq: CompletionQueue,
  qp: { readonly qpNum: number },
  wr: SendWr | RecvWr,
  options: WaitOptions | undefined,
  post: (tag: bigint) => void,
): Promise<CompletionRecord> {
  cq.assertOpen();
  const links = linksOf(cq);
  const tag = TRACKED_WR_ID_BASE + links.tags++;
  post(tag);
  const release = holdMemory(wr.sg);
  const reportAs = BigInt(wr.wrId ?? 0);
  return links.pumpFor().track(tag, { ...options, qpNum: qp.qpNum, reportAs }).then(
    (r) => {
      release();
      return r;
    },
    (e) => {
      release();
      throw e;
    },
  );
}

/** Checks the options of a CQ before anything is created (module-private). */
export function checkCqInit(context: Context, init: CqInit): CheckedCqInit {
  checkObject("CQ init", init);
  if (init.channel !== undefined) {
    checkResource<CompletionChannel>(init.channel, "CompletionChannel", "channel");
    if (init.channel.context !== context) {
      throw new InvalidArgumentError("the completion channel is on another device");
    }
  }
  const cqe = checkInteger("cqe", init.cqe, 1, 0x7fffffff);
  return {
    cqe,
    channel: init.channel ?? null,
    compVector: checkInteger("compVector", init.compVector ?? 0, 0, 0x7fffffff),
    pollBatch: checkInteger("pollBatch", init.pollBatch ?? Math.min(cqe, 64), 1, POLL_BATCH_MAX),
  };
}

/** `ibv_create_cq` (module-private: `context.createCq`). */
export function createCq(context: Context, init: CqInit): CompletionQueue {
  const c = checkCqInit(context, init);
  const ptr = native().ibverbs.ibv_create_cq(
    context.ptr,
    c.cqe,
    null,
    c.channel?.ptr ?? null,
    c.compVector,
  );
  if (ptr === null) throwErrno("ibv_create_cq", `cqe ${c.cqe}`);
  try {
    return new CompletionQueue(context, c, { ptr }, CONSTRUCT);
  } catch (e) {
    native().ibverbs.ibv_destroy_cq(ptr);
    throw e;
  }
}
