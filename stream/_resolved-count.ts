/**
 * {@link ResolvedCount}: the resolved promise a read or write that completed without waiting
 * returns.
 *
 * @module
 */

/**
 * An already-resolved `Promise<number>` for a count, kept for the next call with the same count:
 * a loop of same-sized reads or writes that complete without waiting allocates no promise (a
 * resolved promise is immutable, so handing the same one out again is safe).
 */
export class ResolvedCount {
  #n = -1;
  #p: Promise<number> | null = null;

  /** A promise resolved with `n` (the previous one when `n` repeats). */
  of(n: number): Promise<number> {
    if (n !== this.#n) {
      this.#n = n;
      this.#p = Promise.resolve(n);
    }
    return this.#p!;
  }
}
