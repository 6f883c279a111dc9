/**
 * Every wait's timeout served by one timer per process: a wait with a `timeout` adds a deadline
 * to a set instead of starting a timer of its own, and the one timer is armed for the earliest
 * deadline.
 *
 * The timer is not cleared when the set empties: it is unref'd (it no longer keeps the process
 * alive) and stays armed; a later deadline refs it again, and only a deadline earlier than the
 * armed one re-arms it. When it fires with nothing due it re-arms for the earliest pending
 * deadline, or stops. So a loop of one wait at a time with the same timeout - the common
 * `await cq.wait({ timeout })` loop - starts no timer and clears none: each wait costs a `ref()`
 * and an `unref()`, far cheaper than a timer started and cleared per wait in both runtimes
 * (`bench/wakeup-cost.ts` measures both; figures in `bench/results/host-wakeup.md`).
 *
 * @module
 */

import { now } from "../ffi/clock.ts";
import { refTimer, startTimer, stopTimer, type TimerHandle, unrefTimer } from "../ffi/timers.ts";
import { costs, COUNTING } from "../ffi/cost.ts";

/** Something with a deadline (`at`, on the library's clock, `ffi/clock.ts`) that fires once. */
export interface Deadline {
  /** When it fires, in the library clock's milliseconds. */
  at: number;
  /** Called once when the deadline has passed (after it left the set). */
  expire(): void;
}

const pending = new Set<Deadline>();
let timer: TimerHandle | undefined;
let armedAt = Infinity;
let held = false;

function arm(at: number): void {
  if (timer !== undefined) stopTimer(timer);
  armedAt = at;
  if (COUNTING) costs.timers++;
  timer = startTimer(fire, Math.max(0, at - now()));
  held = true;
}

function fire(): void {
  timer = undefined;
  armedAt = Infinity;
  held = false;
  if (pending.size === 0) return;
  const t = now();
  const due: Deadline[] = [];
  let next = Infinity;
  for (const d of pending) {
    // setTimeout may fire a little early; what is due within a millisecond is due now
    if (d.at <= t + 1) due.push(d);
    else if (d.at < next) next = d.at;
  }
  for (const d of due) pending.delete(d);
  if (next !== Infinity) arm(next);
  for (const d of due) d.expire();
}

/** Adds `d`; it expires at `d.at` unless removed first. */
export function addDeadline(d: Deadline): void {
  pending.add(d);
  if (d.at < armedAt) arm(d.at);
  else if (!held) {
    refTimer(timer!);
    held = true;
  }
}

/**
 * Removes `d` (it will not expire). With no deadline left the timer stops keeping the process
 * alive (it stays armed, unref'd).
 */
export function removeDeadline(d: Deadline): void {
  if (!pending.delete(d)) return;
  if (pending.size === 0 && held) {
    unrefTimer(timer!);
    held = false;
  }
}
