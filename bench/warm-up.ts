/**
 * Untimed work before a measurement of ours: the JIT's warm-up, which in the emulated guest takes
 * seconds, not a count of iterations (bench/results/2026-11-28-stream-warm-up.md), and more of
 * them on a slower guest. C needs none.
 *
 * The warm-up runs for at least its `seconds`; then, while its steps are still getting faster
 * (the median step of the last quarter of `seconds` at least 5 % below the median of the quarter
 * before), it goes on, up to twice `seconds`. So a fast machine stops at the minimum and a slow
 * one measures its steady state, not its compilers' work.
 *
 * @module
 */

import { median } from "./median.ts";

/** How a warm-up went: its steps, its seconds, and the ms of its first and last step. */
export interface WarmUp {
  steps: number;
  seconds: number;
  firstMs: number;
  lastMs: number;
}

/** A step must be this much faster than the window before it for the warm-up to go on. */
const STILL_IMPROVING = 0.95;

/**
 * Runs `step` for at least `seconds` (not at all for 0) and on while its steps still get faster,
 * up to `2 × seconds`; returns how it went.
 */
export async function warmUp(seconds: number, step: () => Promise<unknown>): Promise<WarmUp> {
  const start = performance.now();
  const minMs = seconds * 1000;
  const windowMs = minMs / 4;
  const ends: number[] = []; // when each step ended, ms since start
  const took: number[] = []; // how long it took, ms
  const improving = (now: number) => {
    const recent: number[] = [];
    const before: number[] = [];
    for (let i = ends.length - 1; i >= 0 && ends[i] > now - 2 * windowMs; i--) {
      (ends[i] > now - windowMs ? recent : before).push(took[i]);
    }
    return recent.length > 0 && before.length > 0 &&
      median(recent) < STILL_IMPROVING * median(before);
  };
  for (;;) {
    const now = performance.now() - start;
    if (now >= 2 * minMs || (now >= minMs && !improving(now))) break;
    const t = performance.now();
    await step();
    took.push(performance.now() - t);
    ends.push(performance.now() - start);
  }
  const n = took.length;
  return {
    steps: n,
    seconds: (performance.now() - start) / 1000,
    firstMs: n ? took[0] : 0,
    lastMs: n ? took[n - 1] : 0,
  };
}
