/**
 * Test data for the stream tests: a reproducible stream of random-size chunks (log-uniform
 * 1 B – 1 MiB, so small and large writes are both common) and a running checksum both ends
 * compute over what they wrote and what they read.
 */

const MAX = 1 << 20;

/** xorshift32. */
export function prng(seed: number): () => number {
  let s = seed >>> 0 || 0x9e3779b9;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 0x1_0000_0000;
  };
}

/** Chunks of random size and content (views into one 2 MiB block of random bytes). */
export class RandomStream {
  readonly #rand: () => number;
  readonly #block = new Uint8Array(2 * MAX);

  /** A stream determined by `seed`. */
  constructor(seed: number) {
    this.#rand = prng(seed);
    const words = new Uint32Array(this.#block.buffer);
    for (let i = 0; i < words.length; i++) words[i] = (this.#rand() * 0x1_0000_0000) >>> 0;
  }

  /** A size between 1 and 1 MiB, log-uniform. */
  size(): number {
    return Math.max(1, Math.min(MAX, Math.floor(Math.exp(this.#rand() * Math.log(MAX + 1)))));
  }

  /** The next chunk (valid until the next call). */
  next(): Uint8Array {
    const len = this.size();
    const at = Math.floor(this.#rand() * MAX);
    return this.#block.subarray(at, at + len);
  }
}

/** A running checksum (Adler-32, order-sensitive) and byte count. */
export class Checksum {
  #a = 1;
  #b = 0;
  /** Bytes seen. */
  bytes = 0;

  /** Adds `n` bytes of `buf`. */
  update(buf: Uint8Array, n: number): void {
    let a = this.#a;
    let b = this.#b;
    // Adler-32: the sums stay below 2^53 for 5552 bytes between reductions
    for (let i = 0; i < n;) {
      const end = Math.min(n, i + 5552);
      for (; i < end; i++) {
        a += buf[i];
        b += a;
      }
      a %= 65521;
      b %= 65521;
    }
    this.#a = a;
    this.#b = b;
    this.bytes += n;
  }

  /** The checksum so far. */
  get value(): number {
    return ((this.#b << 16) | this.#a) >>> 0;
  }
}
