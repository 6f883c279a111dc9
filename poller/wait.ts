/**
 * Pending waits with `AbortSignal` and timeout support, shared by every wait in the poller.
 *
 * @module
 */

import { AbortedError, type RdmaError } from "../types/errors.ts";

/** Options accepted by every wait. */
export interface WaitOptions {
  /** Rejects the wait with {@link AbortedError} when aborted. */
  signal?: AbortSignal;
  /** Rejects the wait with {@link AbortedError} after this many milliseconds. */
  timeout?: number;
}

/** Something that counts how many waits are pending (the poller, to keep waiting). */
export interface HoldCounter {
  /** One more wait is pending. */
  ref(): void;
  /** One wait ended. */
  unref(): void;
}

/** One pending wait. */
interface Pending {
  resolve(): void;
  reject(e: Error): void;
}

/** The error a wait is rejected with when its signal fires. */
export function abortedError(signal: AbortSignal): AbortedError {
  const reason = signal.reason;
  if (reason instanceof AbortedError) return reason;
  const why = reason instanceof Error ? reason.message : reason === undefined ? "" : String(reason);
  return new AbortedError(`wait aborted${why ? `: ${why}` : ""}`, { cause: reason });
}

/**
 * A list of waits on one condition. Each pending wait holds the counter (keeps the
 * poller waiting) until it is resolved, rejected, aborted or timed out.
 */
export class WaitList {
  #list: Pending[] = [];
  #holds: HoldCounter;

  /** Creates a list whose waits hold `holds` while pending. */
  constructor(holds: HoldCounter) {
    this.#holds = holds;
  }

  /** How many waits are pending. */
  get size(): number {
    return this.#list.length;
  }

  /** Adds a wait; it settles on {@link WaitList.resolveAll}/{@link WaitList.rejectAll}, abort or timeout. */
  add(options?: WaitOptions): Promise<void> {
    const signal = options?.signal;
    const timeout = options?.timeout;
    if (signal?.aborted) return Promise.reject(abortedError(signal));
    if (timeout !== undefined && !(timeout >= 0)) {
      return Promise.reject(new RangeError(`timeout must be >= 0 ms, got ${timeout}`));
    }
    const list = this.#list;
    const holds = this.#holds;
    return new Promise<void>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      let onAbort: (() => void) | undefined;
      const finish = () => {
        const i = list.indexOf(p);
        if (i >= 0) list.splice(i, 1);
        if (timer !== undefined) clearTimeout(timer);
        if (onAbort) signal!.removeEventListener("abort", onAbort);
        holds.unref();
      };
      const p: Pending = {
        resolve() {
          finish();
          resolve();
        },
        reject(e) {
          finish();
          reject(e);
        },
      };
      if (signal) {
        onAbort = () => p.reject(abortedError(signal));
        signal.addEventListener("abort", onAbort, { once: true });
      }
      if (timeout !== undefined) {
        timer = setTimeout(
          () => p.reject(new AbortedError(`wait timed out after ${timeout} ms`)),
          timeout,
        );
      }
      list.push(p);
      holds.ref();
    });
  }

  /** Resolves every pending wait. */
  resolveAll(): void {
    const list = this.#list;
    if (list.length === 1) return list[0].resolve();
    for (const p of list.slice()) p.resolve();
  }

  /** Rejects every pending wait with `error`. */
  rejectAll(error: RdmaError | Error): void {
    for (const p of this.#list.slice()) p.reject(error);
  }
}
