/**
 * The one wait primitive of the library: a {@link WaitList} of pending promises, each bounded by
 * an `AbortSignal` and/or a timeout ({@link WaitOptions}). Every awaitable in the library —
 * fd readiness, completions, tracked work requests, connection manager events, stream reads
 * and writes — is a wait in one of these lists. Timeouts share one timer (`deadlines.ts`).
 *
 * @module
 */

import { AbortedError, InvalidArgumentError, type RdmaError } from "../types/errors.ts";
import { addDeadline, type Deadline, removeDeadline } from "./deadlines.ts";

/** Options accepted by every wait. */
export interface WaitOptions {
  /** Rejects the wait with {@link AbortedError} when aborted. */
  signal?: AbortSignal;
  /** Rejects the wait with {@link AbortedError} after this many milliseconds (finite, >= 0). */
  timeout?: number;
}

/** Something that counts how many waits are pending (the poller, to keep waiting). */
export interface HoldCounter {
  /** One more wait is pending. */
  ref(): void;
  /** One wait ended. */
  unref(): void;
}

const NO_HOLD: HoldCounter = { ref() {}, unref() {} };

/** Throws {@link InvalidArgumentError} unless `options` are valid wait options. */
export function checkWaitOptions(options: WaitOptions | undefined): void {
  if (options === undefined || options === null) return;
  if (typeof options !== "object") {
    throw new InvalidArgumentError(`wait options must be an object, got ${typeof options}`);
  }
  const { timeout, signal } = options;
  if (timeout !== undefined && !(Number.isFinite(timeout) && timeout >= 0)) {
    throw new InvalidArgumentError(`timeout must be a finite number >= 0 (ms), got ${timeout}`);
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError("signal must be an AbortSignal");
  }
}

/** The error a wait for `what` is rejected with when its signal fires. */
export function abortedError(signal: AbortSignal, what = "wait"): AbortedError {
  const reason = signal.reason;
  if (reason instanceof AbortedError) return reason;
  const why = reason instanceof Error ? reason.message : reason === undefined ? "" : String(reason);
  return new AbortedError(`${what} aborted${why ? `: ${why}` : ""}`, { cause: reason });
}

/** The error a wait for `what` is rejected with when its timeout passes. */
export function timedOutError(what: string, timeout: number): AbortedError {
  return new AbortedError(`${what} timed out after ${timeout} ms`);
}

interface Pending<T, K> extends Deadline {
  readonly key: K;
  resolve(value: T): void;
  reject(e: Error): void;
}

/**
 * Pending waits on one condition. Each wait holds the list's {@link HoldCounter} (keeps the
 * poller waiting) until it is resolved, rejected, aborted or timed out. A wait may carry a key
 * (e.g. the event types it wants) for {@link WaitList.resolveFirst}.
 */
export class WaitList<T = void, K = undefined> {
  #list: Pending<T, K>[] = [];
  #holds: HoldCounter;

  /** Creates a list whose waits hold `holds` while pending (default: nothing). */
  constructor(holds: HoldCounter = NO_HOLD) {
    this.#holds = holds;
  }

  /** How many waits are pending. */
  get size(): number {
    return this.#list.length;
  }

  /**
   * Adds a wait for `what` (named in abort and timeout errors); it settles through
   * {@link WaitList.resolveAll}, {@link WaitList.resolveFirst}, a reject, its signal or its
   * timeout. Invalid options reject with {@link InvalidArgumentError}.
   */
  add(options?: WaitOptions, key?: K, what = "wait"): Promise<T> {
    try {
      checkWaitOptions(options);
    } catch (e) {
      return Promise.reject(e);
    }
    const signal = options?.signal;
    const timeout = options?.timeout;
    if (signal?.aborted) return Promise.reject(abortedError(signal, what));
    const list = this.#list;
    const holds = this.#holds;
    return new Promise<T>((resolve, reject) => {
      let onAbort: (() => void) | undefined;
      let done = false;
      const finish = (): boolean => {
        if (done) return false;
        done = true;
        const i = list.indexOf(p);
        if (i >= 0) list.splice(i, 1);
        if (timeout !== undefined) removeDeadline(p);
        if (onAbort) signal!.removeEventListener("abort", onAbort);
        holds.unref();
        return true;
      };
      const p: Pending<T, K> = {
        key: key as K,
        at: timeout === undefined ? Infinity : performance.now() + timeout,
        resolve(value) {
          if (finish()) resolve(value);
        },
        reject(e) {
          if (finish()) reject(e);
        },
        expire() {
          p.reject(timedOutError(what, timeout!));
        },
      };
      if (signal) {
        onAbort = () => p.reject(abortedError(signal, what));
        signal.addEventListener("abort", onAbort, { once: true });
      }
      if (timeout !== undefined) addDeadline(p);
      list.push(p);
      holds.ref();
    });
  }

  /** Resolves every pending wait with `value`. */
  resolveAll(value: T): void {
    const list = this.#list;
    if (list.length === 1) return list[0].resolve(value);
    for (const p of list.slice()) p.resolve(value);
  }

  /** Resolves the oldest wait whose key matches; returns whether one did. */
  resolveFirst(match: (key: K) => boolean, value: T): boolean {
    const p = this.#list.find((w) => match(w.key));
    if (!p) return false;
    p.resolve(value);
    return true;
  }

  /** Rejects the oldest wait (whose key matches, when `match` is given); returns whether one did. */
  rejectFirst(error: (key: K) => RdmaError | Error, match?: (key: K) => boolean): boolean {
    const p = match ? this.#list.find((w) => match(w.key)) : this.#list[0];
    if (!p) return false;
    p.reject(error(p.key));
    return true;
  }

  /** Rejects every pending wait with `error` (or the error made for its key). */
  rejectAll(error: RdmaError | Error | ((key: K) => RdmaError | Error)): void {
    for (const p of this.#list.slice()) {
      p.reject(typeof error === "function" ? error(p.key) : error);
    }
  }
}
