/**
 * The events of one CM id: operations waiting for an event type, events that arrived before
 * anyone waited for them, and the connection requests queued on a listener. Waits are the
 * library's one wait primitive ({@link WaitList}) holding the id's event channel watched.
 *
 * @module
 */

import { CmEventError } from "../types/errors.ts";
import { CmEventType } from "../types/enums.ts";
import { type HoldCounter, WaitList, type WaitOptions } from "../poller/wait.ts";
import type { CmEvent } from "./event.ts";

/** The events that fail the operation waiting on the id. */
const FAILURES: ReadonlySet<number> = new Set([
  CmEventType.ADDR_ERROR,
  CmEventType.ROUTE_ERROR,
  CmEventType.CONNECT_ERROR,
  CmEventType.UNREACHABLE,
  CmEventType.REJECTED,
  CmEventType.DEVICE_REMOVAL,
  CmEventType.MULTICAST_ERROR,
]);

/** The most queued events an id keeps for later waits; older ones are dropped. */
const QUEUE_MAX = 256;

/** What a waiting operation wants: its name (for errors) and the event types that settle it. */
export interface Want {
  /** The operation, e.g. `connect`. */
  readonly op: string;
  /** Event types that resolve it. */
  readonly types: readonly number[];
}

/** The typed error of `ev` failing `op`. */
export function failure(op: string, ev: CmEvent): CmEventError {
  return new CmEventError(op, ev.type, ev.name, ev.status, ev.privateData);
}

/** Operation waits, queued events and queued connection requests of one id. */
export class IdEvents<Request> {
  /** Operations waiting for an event. */
  readonly #ops: WaitList<CmEvent, Want>;
  /** Waits for DISCONNECTED. */
  readonly #disconnects: WaitList<CmEvent, Want>;
  /** Connection requests nobody took yet (listeners). */
  readonly requests: Request[] = [];
  readonly #queue: CmEvent[] = [];
  readonly #endObservers = new Set<(ev: CmEvent) => void>();

  /** Creates the lists; every pending wait holds `holds` (the id's event channel). */
  constructor(holds: HoldCounter) {
    this.#ops = new WaitList(holds);
    this.#disconnects = new WaitList(holds);
  }

  /**
   * Waits for one of `want.types`: an event already queued settles it at once (a queued failure
   * rejects it); otherwise it waits, bounded by `options`.
   */
  wait(want: Want, options?: WaitOptions): Promise<CmEvent> {
    const qi = this.#queue.findIndex((e) => want.types.includes(e.type) || FAILURES.has(e.type));
    if (qi >= 0) {
      const [ev] = this.#queue.splice(qi, 1);
      return want.types.includes(ev.type)
        ? Promise.resolve(ev)
        : Promise.reject(failure(want.op, ev));
    }
    return this.#ops.add(options, want, want.op);
  }

  /** Waits for DISCONNECTED. */
  waitDisconnected(options?: WaitOptions): Promise<CmEvent> {
    const want = { op: "waitDisconnected", types: [CmEventType.DISCONNECTED] };
    return this.#disconnects.add(options, want, want.op);
  }

  /**
   * Routes an event after the id updated its own state: it resolves the first operation that
   * wants it, or fails the oldest waiting operation when it is a failure (or an unexpected
   * DISCONNECTED), or is queued for a later wait.
   */
  route(ev: CmEvent): void {
    if (ev.type === CmEventType.DISCONNECTED) this.#disconnects.resolveAll(ev);
    if (this.#ops.resolveFirst((w) => w.types.includes(ev.type), ev)) return;
    if (FAILURES.has(ev.type) || ev.type === CmEventType.DISCONNECTED) {
      if (this.#ops.rejectFirst((w) => failure(w.op, ev))) return;
    }
    if (ev.type === CmEventType.DISCONNECTED || ev.type === CmEventType.CONNECT_REQUEST) return;
    this.#queue.push(ev);
    if (this.#queue.length > QUEUE_MAX) this.#queue.shift();
  }

  /**
   * Calls `observer` when the connection ends (DISCONNECTED or DEVICE_REMOVAL), without holding
   * the event channel (it is told while the channel is read for other reasons). Returns a
   * function that removes it.
   */
  observeEnd(observer: (ev: CmEvent) => void): () => void {
    this.#endObservers.add(observer);
    return () => this.#endObservers.delete(observer);
  }

  /** Tells the end observers about `ev`. */
  notifyEnd(ev: CmEvent): void {
    for (const o of [...this.#endObservers]) {
      try {
        o(ev);
      } catch (e) {
        console.error("cm: a connection-end observer threw", e);
      }
    }
  }

  /** How many operations and disconnect waits are pending. */
  get waiting(): number {
    return this.#ops.size + this.#disconnects.size;
  }

  /** Hands the queued events and requests over to `to` (the id moved to another channel). */
  moveTo(to: IdEvents<Request>): void {
    to.requests.push(...this.requests.splice(0));
    to.#queue.push(...this.#queue.splice(0));
  }

  /** Fails every wait (operations and disconnect waits) with the error made for it. */
  failAll(error: (want: Want) => Error): void {
    this.#ops.rejectAll(error);
    this.#disconnects.rejectAll(error);
  }
}
