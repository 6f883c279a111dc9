/**
 * The event-loop integration: completions, rdma_cm events and async events on the JS event
 * loop, by non-blocking reads - never by a blocked event loop.
 *
 * - {@link Poller}: one epoll set (edge-triggered) holding every watched fd and a wake eventfd;
 *   `Poller.default()` is the shared one. `register(fd, onReadable?)` gives an {@link FdWatch}
 *   with `readable({ signal, timeout })` and `for await` over edges; whoever is notified reads
 *   until EAGAIN. Waiting happens off the JS thread (Deno: one `nonblocking` `epoll_wait` in
 *   flight only while something is awaited, cancelled through the eventfd; Bun: the epoll fd
 *   adopted as a socket by `Bun.connect({ fd })`, whose readiness is the wake-up, with io_uring
 *   and a Worker as the selectable alternatives; see `useWaiter` and poller/README.md), so an idle
 *   process exits by itself.
 * - {@link awaitCompletions} / {@link completions}: wait for a CQ's completions with the
 *   `busy`, `event` or `adaptive` strategy (default {@link DEFAULT_STRATEGY}, see
 *   `completions.ts` for the measurement that chose it). Event waits arm, drain, then wait.
 * - {@link WorkRequestTracker} / {@link CompletionPump}: a promise per signaled WR by wr_id,
 *   rejected with `WorkCompletionError` (status, name, vendor error, wr_id, qp_num) on failure.
 * - {@link eventStream} / {@link nextEvent} / {@link asyncEvents}: rdma_cm event channels,
 *   device async events and any O_NONBLOCK "read one event or null" source as async iterables.
 * - {@link WaitList} / {@link WaitOptions}: the one wait primitive behind every awaitable of the
 *   library. Every wait takes `signal` and `timeout` (ms) and rejects with `AbortedError`; a bad
 *   timeout is an `InvalidArgumentError`.
 *
 * @module
 */

export { FdWatch, Poller, PollerHold, type PollerOptions, WEAK_CHECK_MS } from "./poller.ts";
export { useWaiter, waiterKinds } from "./waiter.ts";
export {
  abortedError,
  checkWaitOptions,
  type HoldCounter,
  timedOutError,
  WaitList,
  type WaitOptions,
} from "./wait.ts";
export {
  AUTO_SPIN_MAX_MICROS,
  awaitCompletions,
  BUSY_SLICE_MICROS,
  type CompletionChannelLike,
  completions,
  type CompletionSource,
  type CompletionWaitOptions,
  DEFAULT_SPIN_MICROS,
  DEFAULT_STRATEGY,
  MAX_SPIN_MICROS,
  SPIN_CLOCK_EVERY,
  type Strategy,
} from "./completions.ts";
export {
  CompletionPump,
  type CompletionRecord,
  type CompletionView,
  type PumpOptions,
  type TrackOptions,
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
