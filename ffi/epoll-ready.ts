/**
 * The one way a waiter hands ready fds to the poller once it knows the epoll set is ready:
 * `epoll_wait(..., 0)` in batches until the set is drained, each batch's fds copied out of the
 * event array. Shared by every waiter that learns "ready" without the events themselves.
 *
 * @module
 */

import type { WaiterOptions } from "./wait.ts";
import type { NativeBlock } from "./memory.ts";
import { native } from "./native.ts";

/** Copies the fds of `n` `struct epoll_event`s into `fds` and hands them to `onEvents`. */
export function deliverEvents(
  o: WaiterOptions,
  events: DataView,
  fds: Int32Array,
  n: number,
): void {
  const { eventSize, dataOffset } = o;
  for (let i = 0; i < n; i++) fds[i] = events.getInt32(i * eventSize + dataOffset, true);
  if (n > 0) o.onEvents(fds, n);
}

/**
 * Takes every ready fd without blocking, `maxEvents` at a time, until a batch comes back short
 * or `stopped()` says the waiter closed meanwhile. Returns how many fds were delivered.
 */
export function takeReady(
  o: WaiterOptions,
  events: NativeBlock,
  fds: Int32Array,
  stopped: () => boolean,
): number {
  const libc = native().libc;
  const { epfd, maxEvents } = o;
  let total = 0;
  for (;;) {
    const n = libc.epoll_wait(epfd, events.ptr, maxEvents, 0);
    deliverEvents(o, events.view, fds, n);
    if (n > 0) total += n;
    if (n < maxEvents || stopped()) return total;
  }
}
