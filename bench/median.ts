/**
 * The one median the benchmarks use: the middle sample, or the mean of the two middle ones.
 *
 * @module
 */

/** The median of `xs` (NaN when empty); `xs` is not reordered. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
