/**
 * The event-loop integration: one epoll set per {@link Poller}, fd watches, completion
 * waiting with the `busy`/`event`/`adaptive` strategies, per-WR promises and event streams.
 *
 * @module
 */

export { FdWatch, Poller, type PollerOptions } from "./poller.ts";
export { abortedError, type HoldCounter, WaitList, type WaitOptions } from "./wait.ts";
