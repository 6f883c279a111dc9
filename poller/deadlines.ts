/**
 * Every wait's timeout served by one timer per process: a wait with a `timeout` adds a deadline
 * to a set instead of starting a timer of its own, and the one timer is armed for the earliest
 * deadline. A loop of waits with the same timeout never touches a timer (each new deadline is
 * later than the armed one), which removes a timer start and clear per wait from the hot path
 * (about 100 µs per wait in Deno in the soft-RoCE guest, measured before this existed).
 *
 * @module
 */

/** Something with a deadline (`at`, on the `performance.now()` clock) that fires once. */
export interface Deadline {
  /** When it fires, in `performance.now()` milliseconds. */
  at: number;
  /** Called once when the deadline has passed (after it left the set). */
  expire(): void;
}

const pending = new Set<Deadline>();
let timer: ReturnType<typeof setTimeout> | undefined;
let armedAt = Infinity;

function arm(at: number): void {
  if (timer !== undefined) clearTimeout(timer);
  armedAt = at;
  timer = setTimeout(fire, Math.max(0, at - performance.now()));
}

function fire(): void {
  timer = undefined;
  armedAt = Infinity;
  const now = performance.now();
  const due: Deadline[] = [];
  let next = Infinity;
  for (const d of pending) {
    // setTimeout may fire a little early; what is due within a millisecond is due now
    if (d.at <= now + 1) due.push(d);
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
}

/** Removes `d` (it will not expire). The timer stops when no deadline is left. */
export function removeDeadline(d: Deadline): void {
  if (!pending.delete(d)) return;
  if (pending.size === 0 && timer !== undefined) {
    clearTimeout(timer);
    timer = undefined;
    armedAt = Infinity;
  }
}
