/**
 * Untimed work before a measurement of ours: the JIT's warm-up, which in the emulated guest takes
 * seconds, not a count of iterations (bench/results/2026-11-28-stream-warm-up.md). C needs none.
 *
 * @module
 */

/** How a warm-up went: its steps, its seconds, and the ms of its first and last step. */
export interface WarmUp {
  steps: number;
  seconds: number;
  firstMs: number;
  lastMs: number;
}

/** Runs `step` until `seconds` have passed (not at all for 0); returns how it went. */
export async function warmUp(seconds: number, step: () => Promise<unknown>): Promise<WarmUp> {
  const start = performance.now();
  let steps = 0;
  let firstMs = 0;
  let lastMs = 0;
  while (performance.now() - start < seconds * 1000) {
    const t = performance.now();
    await step();
    lastMs = performance.now() - t;
    if (steps++ === 0) firstMs = lastMs;
  }
  return { steps, seconds: (performance.now() - start) / 1000, firstMs, lastMs };
}
