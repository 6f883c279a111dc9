/**
 * {@link StreamCq}: a stream's CQ on the completion channel that the streams of one device context
 * and poller share. The channel's fd is watched once; each event goes to the handler of the CQ
 * that fired. With the shared rdma_cm event channels (`connect.ts`'s, the listener's) a
 * stream connection holds no fd of its own; rsocket's hold two. A wake-up reads events until none
 * can be pending: the channel counts its armed CQs, each of which signals once, so the read that
 * would find EAGAIN is made only while some CQ is still armed (rsocket, with a channel per socket,
 * reads one event per sleep).
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
  readonly handlers = new Map<CompletionQueue, CqEventHandler>();

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
        for (const h of [...this.handlers.values()]) h(err as Error);
        return;
      }
      if (cq === null) return;
      this.handlers.get(cq)?.(null);
      if (ch.armedCqs === 0) return; // no event can be pending
    }
  };
}

/** Per poller, the shared channels by context (a poller's entry goes with the poller). */
const byPoller = new WeakMap<Poller, SharedByKey<Context, CqEvents>>();

/** A stream's CQ on its context's shared completion channel. */
export class StreamCq {
  /** The CQ (armed and drained by its connection). */
  readonly cq: CompletionQueue;
  readonly #events: Lease<CqEvents>;

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
  }

  /** Where the CQ's events go (set by its connection). */
  set onEvent(handler: CqEventHandler) {
    this.#events.value.handlers.set(this.cq, handler);
  }

  /** Destroys the CQ (its events acked first), then ends its use of the channel. */
  close(): void {
    this.#events.value.handlers.delete(this.cq);
    try {
      this.cq.close();
    } finally {
      this.#events.release();
    }
  }
}
