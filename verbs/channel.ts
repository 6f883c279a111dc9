/**
 * Completion channels: a non-blocking fd that signals armed CQs. `getEvent()`
 * returns the CQ that fired, or null when nothing is pending; events are acked in
 * batches and flushed before a CQ is destroyed. The channel counts its armed CQs
 * (`armedCqs`).
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { Errno } from "../types/errno.ts";
import { nativeError, throwErrno, throwReturned } from "../ffi/errors.ts";
import { setNonBlocking } from "../ffi/fd.ts";
import { closeWatchesOf } from "../poller/poller.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, checkResource, isInstance, NativeResource } from "../ffi/resource.ts";
import { type CompletionQueue, noteCqEvent } from "./cq.ts";
import type { Context } from "./context.ts";
import { contextObjects, objectAt } from "./_objects.ts";

/** Counts one of `channel`'s CQs armed (+1) or no longer (-1) (module-private: CQs call it). */
export let countArmed: (channel: CompletionChannel, delta: 1 | -1) => void;

/** A completion channel (`ibv_create_comp_channel`) with its fd set O_NONBLOCK. */
export class CompletionChannel extends NativeResource {
  /** The `struct ibv_comp_channel *`. */
  readonly ptr: NativePointer;
  /** Its context. */
  readonly context: Context;
  /** The fd to wait on (readable when an event is pending). */
  readonly fd: number;
  /** How many events of a CQ are acked at once (`ibv_ack_cq_events` takes a mutex). */
  ackBatch = 16;
  readonly #box: NativeBlock;
  readonly #contextOut: NativePointer;
  #armedCqs = 0;

  static {
    countArmed = (channel, delta) => {
      channel.#armedCqs += delta;
    };
  }

  /** Not for direct use: `context.createCompChannel()` makes one. */
  constructor(context: Context, token: symbol) {
    checkConstruct(token, "completion channels are made by context.createCompChannel()");
    checkResource<Context>(context, "Context", "context");
    const n = native();
    const ch = n.ibverbs.ibv_create_comp_channel(context.ptr);
    if (ch === null) throwErrno("ibv_create_comp_channel");
    super("CompletionChannel", [context]);
    this.ptr = ch;
    this.context = context;
    const f = layouts().ibv_comp_channel.fields.fd.offset;
    this.fd = new DataView(n.arrayBuffer(ch, f + 4)).getInt32(f, true);
    setNonBlocking(this.fd, "completion channel");
    // out-parameters of ibv_get_cq_event (cq at 0, cq_context at 8), built once: reading an
    // event allocates nothing
    this.#box = new NativeBlock(16, 8);
    this.#contextOut = this.#box.at(8);
  }

  /**
   * How many of the channel's CQs are armed (`requestNotify` called and their event not read
   * yet). Each signals once, so where a CQ is armed again only after its event was read (the
   * stream connections' CQs), 0 means no event is pending and a reader need not read again to
   * find EAGAIN. A CQ armed again while its event is unread may signal twice: read until EAGAIN.
   */
  get armedCqs(): number {
    return this.#armedCqs;
  }

  /**
   * Reads one CQ event: the CQ that was signalled, or null when none is pending
   * (EAGAIN). The event is counted for batched acking and the CQ is no longer armed. Re-arm
   * the CQ, then drain it.
   */
  getEvent(): CompletionQueue | null {
    this.assertOpen();
    const n = native();
    if (n.ibverbs.ibv_get_cq_event(this.ptr, this.#box.ptr, this.#contextOut) !== 0) {
      const errno = n.errno();
      if (errno === Errno.EAGAIN) return null;
      throw nativeError("ibv_get_cq_event", errno);
    }
    const cq = objectAt(this.context, this.#box.view.getBigUint64(0, true));
    if (!isInstance<CompletionQueue>(cq, "CompletionQueue")) {
      throw nativeError("ibv_get_cq_event", Errno.EINVAL, "event for an unknown CQ");
    }
    noteCqEvent(cq, this.ackBatch);
    return cq;
  }

  /** Reads every pending event; returns the distinct CQs that fired. */
  drainEvents(): CompletionQueue[] {
    const out: CompletionQueue[] = [];
    for (let cq = this.getEvent(); cq; cq = this.getEvent()) if (!out.includes(cq)) out.push(cq);
    return out;
  }

  /** Acks every counted event of this channel's CQs now. */
  flushAcks(): void {
    for (const o of contextObjects(this.context)) {
      if (isInstance<CompletionQueue>(o, "CompletionQueue") && o.channel === this) o.ackEvents();
    }
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    closeWatchesOf(this); // the poller drops its watch before the fd number can be reused
    const rc = native().ibverbs.ibv_destroy_comp_channel(this.ptr);
    this.#box.free();
    if (rc !== 0) throwReturned("ibv_destroy_comp_channel", rc);
  }
}
