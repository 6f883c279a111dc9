/**
 * Event streams over O_NONBLOCK fds: an rdma_cm event channel, a device's async-event fd, or
 * any fd with a non-blocking "read one event or null" function. Reading drains until EAGAIN
 * (null) before waiting for the next edge.
 *
 * @module
 */

import { now } from "../ffi/clock.ts";
import { AbortedError, ClosedError } from "../types/errors.ts";
import { type FdWatch, Poller, watchesOf } from "./poller.ts";
import { timedOutError, type WaitOptions } from "./wait.ts";

/** Options of an event stream. */
export interface EventStreamOptions extends WaitOptions {
  /** The poller to wait through (default {@link Poller.default}). */
  poller?: Poller;
}

/** The watch of `fd` to wait on; `owned` when this caller created it (and closes it). */
function watchFor(
  fd: number,
  poller: Poller,
  source?: object,
): { watch: FdWatch; owned: boolean } {
  if (source) {
    for (const w of watchesOf(source)) {
      if (w.fd === fd && w.poller === poller) return { watch: w, owned: false };
    }
    return { watch: poller.registerOwned(source, fd), owned: true };
  }
  const existing = poller.watchOf(fd);
  if (existing) return { watch: existing, owned: false };
  return { watch: poller.register(fd), owned: true };
}

/**
 * The next event from `fd`: returns `read()`'s first non-null result, waiting for the fd to
 * become readable as needed. `timeout`/`signal` bound the whole wait (AbortedError).
 */
export async function nextEvent<T>(
  fd: number,
  read: () => T | null,
  options: EventStreamOptions = {},
): Promise<T> {
  const first = read();
  if (first !== null) return first;
  const { watch, owned } = watchFor(fd, options.poller ?? Poller.default());
  const deadline = options.timeout === undefined ? Infinity : now() + options.timeout;
  try {
    for (;;) {
      try {
        await watch.readable({
          signal: options.signal,
          timeout: deadline === Infinity ? undefined : Math.max(0, deadline - now()),
        });
      } catch (e) {
        // a later round timed out with what was left: name the whole timeout
        if (e instanceof AbortedError && !options.signal?.aborted && deadline !== Infinity) {
          throw timedOutError("event wait", options.timeout!);
        }
        throw e;
      }
      const ev = read();
      if (ev !== null) return ev;
    }
  } finally {
    if (owned) watch.close();
  }
}

/**
 * Events from `fd` as an async iterable: yields each non-null `read()` result, draining until
 * null before waiting. `timeout` bounds each wait for the next event, `signal` the whole
 * stream (both throw AbortedError); the stream ends when its watch is closed, and with
 * `source` (the fd's owner) when `closeWatchesOf(source)` is called.
 */
export async function* eventStream<T>(
  fd: number,
  read: () => T | null,
  options: EventStreamOptions = {},
  source?: object,
): AsyncGenerator<T, void, undefined> {
  const { watch, owned } = watchFor(fd, options.poller ?? Poller.default(), source);
  try {
    for (;;) {
      if (watch.closed) return;
      const ev = read();
      if (ev !== null) {
        yield ev;
        continue;
      }
      try {
        await watch.readable(options);
      } catch (e) {
        if (e instanceof ClosedError && watch.closed) return;
        throw e;
      }
    }
  } finally {
    if (owned) watch.close();
  }
}

/** A device context as the poller sees it (structural: the verbs `Context`). */
export interface AsyncEventSource<T> {
  /** The O_NONBLOCK async-event fd. */
  readonly asyncFd: number;
  /** Reads (and acks) one async event, or null when none is pending. */
  getAsyncEvent(): T | null;
}

/**
 * A device's async events (port changes, QP/CQ/SRQ errors, ...) as an async iterable; it ends
 * when the context closes.
 */
export function asyncEvents<T>(
  context: AsyncEventSource<T>,
  options: EventStreamOptions = {},
): AsyncGenerator<T, void, undefined> {
  return eventStream(context.asyncFd, () => context.getAsyncEvent(), options, context);
}
