/**
 * {@link StreamCq}: a stream's CQ on the completion channel that the streams of one device context
 * and poller share. The channel's fd is watched once; each event goes to the handler of the CQ
 * that fired. With the shared rdma_cm event channels (`connect.ts`'s, the listener's) a
 * stream connection holds no fd of its own; rsocket's hold two.
 *
 * The CQs are armed through {@link StreamCq.arm}, so the channel knows how many events can still
 * come (an armed CQ signals once): a wake-up reads events until none can be pending, without the
 * read that would find EAGAIN when every armed CQ's event is in (rsocket, with a channel per
 * socket, reads one event per sleep). An edge while no CQ is armed reads until EAGAIN.
 *
 * @module
 */

import type { CompletionChannel } from "../verbs/channel.ts";
import type { Context } from "../verbs/context.ts";
import type { CompletionQueue } from "../verbs/cq.ts";
import type { Poller } from "../poller/poller.ts";
import { type Lease, SharedByKey } from "./_shared.ts";

/** Called for each event of a CQ (`null`), or with the shared channel's failure. */
export type CqEventHandler = (error: Error | null) => void;

/** A completion channel shared by streams' CQs; its events go to the CQ's handler. */
class CqEvents {
  readonly channel: CompletionChannel;
  readonly cqs = new Map<CompletionQueue, StreamCq>();
  /** How many of the CQs are armed (each signals once, then must be armed again). */
  armed = 0;

  constructor(ctx: Context, poller: Poller) {
    this.channel = ctx.createCompChannel();
    try {
      poller.registerOwned(this.channel, this.channel.fd, this.#dispatch);
    } catch (e) {
      this.channel.close();
      throw e;
    }
  }

  get closed(): boolean {
    return this.channel.closed;
  }

  close(): void {
    this.channel.close();
  }

  readonly #dispatch = () => {
    const ch = this.channel;
    if (ch.closed) return;
    for (;;) {
      let cq: CompletionQueue | null;
      try {
        cq = ch.getEvent();
      } catch (err) {
        for (const s of [...this.cqs.values()]) s.fired(err as Error);
        return;
      }
      if (cq === null) return;
      this.cqs.get(cq)?.fired(null);
      if (this.armed === 0) return; // no armed CQ is left to signal: no event is pending
    }
  };
}

const ignore: CqEventHandler = () => {};

/** Per poller, the shared channels by context (a poller's entry goes with the poller). */
const byPoller = new WeakMap<Poller, SharedByKey<Context, CqEvents>>();

/** A stream's CQ on its context's shared completion channel. */
export class StreamCq {
  /** The CQ (armed and drained by its connection). */
  readonly cq: CompletionQueue;
  /** Where the CQ's events go (set by its connection). */
  onEvent: CqEventHandler = ignore;
  readonly #events: Lease<CqEvents>;
  #armed = false;

  /** Creates a CQ of `cqe` entries on the channel `ctx` and `poller` share. */
  constructor(ctx: Context, poller: Poller, cqe: number) {
    let shared = byPoller.get(poller);
    if (!shared) {
      shared = new SharedByKey((c: Context) => new CqEvents(c, poller));
      byPoller.set(poller, shared);
    }
    const events = shared.lease(ctx);
    try {
      this.cq = ctx.createCq({ cqe, channel: events.value.channel });
    } catch (e) {
      events.release();
      throw e;
    }
    this.#events = events;
    events.value.cqs.set(this.cq, this);
  }

  /** True from {@link StreamCq.arm} until the CQ's event is read. */
  get armed(): boolean {
    return this.#armed;
  }

  /** Asks for the CQ's next event (`ibv_req_notify_cq`) unless already armed. */
  arm(): void {
    if (this.#armed) return;
    this.cq.requestNotify();
    this.#armed = true;
    this.#events.value.armed++;
  }

  /** The CQ's event was read (`null`), or the shared channel failed: unarmed, then handled. */
  fired(error: Error | null): void {
    this.#disarm();
    this.onEvent(error);
  }

  #disarm(): void {
    if (!this.#armed) return;
    this.#armed = false;
    this.#events.value.armed--;
  }

  /** Destroys the CQ (its events acked first), then ends its use of the channel. */
  close(): void {
    this.#disarm();
    this.#events.value.cqs.delete(this.cq);
    try {
      this.cq.close();
    } finally {
      this.#events.release();
    }
  }
}
