/**
 * The one wait primitive of the library: a {@link WaitList} of pending promises, each bounded by
 * an `AbortSignal` and/or a timeout ({@link WaitOptions}). Every awaitable in the library -
 * fd readiness, completions, tracked work requests, connection manager events, stream reads
 * and writes - is a wait in one of these lists. Timeouts share one timer (`deadlines.ts`).
 *
 * @module
 */

import { now } from "../ffi/clock.ts";
import { AbortedError, InvalidArgumentError, type RdmaError } from "../types/errors.ts";
import { addDeadline, type Deadline, removeDeadline } from "./deadlines.ts";
import { describe } from "../types/check.ts";
import { costs, COUNTING } from "../ffi/cost.ts";
import { nextTurn } from "../ffi/timers.ts";

/** One event-loop turn (a macrotask), counted as a yield when costs are counted. */
export function yieldToLoop(): Promise<void> {
  if (COUNTING) costs.yields++;
  return new Promise((r) => nextTurn(r));
}

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
    throw new InvalidArgumentError(
      `timeout must be a finite number >= 0 (ms), got ${describe(timeout)}`,
    );
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

/**
 * One pending wait: its own deadline entry and abort listener (`handleEvent`), so a wait
 * allocates this object and its promise, and no closures besides the promise's executor.
 */
class Pending<T, K> implements Deadline {
  at: number;
  done = false;
  settle!: (value: T) => void;
  fail!: (e: Error) => void;

  constructor(
    readonly list: Pending<T, K>[],
    readonly holds: HoldCounter,
    readonly key: K,
    readonly what: string,
    readonly timeout: number | undefined,
    readonly signal: AbortSignal | undefined,
    since: number,
  ) {
    this.at = timeout === undefined ? Infinity : since + timeout;
  }

  resolve(value: T): void {
    if (this.#finish()) this.settle(value);
  }

  reject(e: Error): void {
    if (this.#finish()) this.fail(e);
  }

  /** The deadline passed. */
  expire(): void {
    this.reject(timedOutError(this.what, this.timeout!));
  }

  /** The signal fired (this object is the abort listener). */
  handleEvent(): void {
    this.reject(abortedError(this.signal!, this.what));
  }

  #finish(): boolean {
    if (this.done) return false;
    this.done = true;
    const list = this.list;
    const last = list.length - 1;
    if (list[last] === this) list.pop();
    else {
      const i = list.indexOf(this);
      if (i >= 0) list.splice(i, 1);
    }
    if (this.timeout !== undefined) removeDeadline(this);
    this.signal?.removeEventListener("abort", this);
    this.holds.unref();
    return true;
  }
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
   * timeout, counted from `since` (a time of the library's clock; default now: a wait that resumes
   * an earlier one keeps its deadline and names its whole timeout). Invalid options reject with
   * {@link InvalidArgumentError}.
   */
  add(options?: WaitOptions, key?: K, what = "wait", since?: number): Promise<T> {
    let signal: AbortSignal | undefined;
    let timeout: number | undefined;
    if (options !== undefined) {
      try {
        checkWaitOptions(options);
      } catch (e) {
        return Promise.reject(e);
      }
      if (options !== null) {
        signal = options.signal;
        timeout = options.timeout;
        if (signal?.aborted) return Promise.reject(abortedError(signal, what));
      }
    }
    if (COUNTING) costs.waits++;
    const p = new Pending<T, K>(
      this.#list,
      this.#holds,
      key as K,
      what,
      timeout,
      signal,
      timeout === undefined ? 0 : since ?? now(),
    );
    const promise = new Promise<T>((resolve, reject) => {
      p.settle = resolve;
      p.fail = reject;
    });
    if (signal) signal.addEventListener("abort", p, { once: true });
    if (timeout !== undefined) addDeadline(p);
    this.#list.push(p);
    this.#holds.ref();
    return promise;
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
