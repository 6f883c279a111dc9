/**
 * The event-loop integration: one epoll set per {@link Poller}, fd watches, completion
 * waiting with the `busy`/`event`/`adaptive` strategies, per-WR promises and event streams.
 *
 * @module
 */

export { FdWatch, Poller, type PollerOptions } from "./poller.ts";
export { abortedError, type HoldCounter, WaitList, type WaitOptions } from "./wait.ts";
export {
  awaitCompletions,
  cancelCompletionWaits,
  completions,
  type CompletionSource,
  type CompletionWaitOptions,
  DEFAULT_SPIN_MICROS,
  DEFAULT_STRATEGY,
  type EventChannel,
  type Strategy,
  unwatchChannel,
} from "./completions.ts";
export {
  CompletionPump,
  type CompletionRecord,
  type CompletionView,
  type PumpOptions,
  workCompletionError,
  WorkRequestTracker,
} from "./tracker.ts";
export {
  asyncEvents,
  type AsyncEventSource,
  eventStream,
  type EventStreamOptions,
  nextEvent,
} from "./events.ts";
