/**
 * This side's iomap table as the peer writes it (rsocket's `struct rs_iomap` entries after the
 * target SGL in the target memory): which entry covers an offset of the peer's direct writes and
 * where it lands. Pure reads of the memory the peer RDMA-writes; allocates nothing but
 * {@link IomapTable.entry}'s result.
 *
 * @module
 */

import { RS_IOMAP_SIZE } from "./protocol.ts";

/** A u64 field as a number, or -1 when it does not fit in 53 bits. */
export function readU53(view: DataView, offset: number, littleEndian: boolean): number {
  const hi = view.getUint32(offset + (littleEndian ? 4 : 0), littleEndian);
  if (hi >= 0x200000) return -1;
  return hi * 0x1_0000_0000 + view.getUint32(offset + (littleEndian ? 0 : 4), littleEndian);
}

/** One entry of an iomap table. */
export interface IomapEntry {
  /** The first offset of the peer's direct writes it covers. */
  readonly offset: number;
  /** Where that offset lands in this side's memory. */
  readonly addr: number;
  /** The rkey of that memory. */
  readonly key: number;
  /** Bytes covered. */
  readonly length: number;
}

/** The `size` entries at `base` of `view`, in this side's byte order (`little`). */
export class IomapTable {
  readonly #view: DataView;
  readonly #base: number;
  readonly #little: boolean;
  /** Entries in the table. */
  readonly size: number;

  constructor(view: DataView, base: number, size: number, little: boolean) {
    this.#view = view;
    this.#base = base;
    this.size = size;
    this.#little = little;
  }

  /** The first offset entry `i` covers (-1: not in 53 bits). */
  start(i: number): number {
    return readU53(this.#view, this.#base + i * RS_IOMAP_SIZE, this.#little);
  }

  /** Bytes entry `i` covers (0: empty). */
  length(i: number): number {
    return this.#view.getUint32(this.#base + i * RS_IOMAP_SIZE + 20, this.#little);
  }

  /** Where entry `i`'s first byte lands (-1: not in 53 bits). */
  addr(i: number): number {
    return readU53(this.#view, this.#base + i * RS_IOMAP_SIZE + 8, this.#little);
  }

  /** The rkey of entry `i`. */
  key(i: number): number {
    return this.#view.getUint32(this.#base + i * RS_IOMAP_SIZE + 16, this.#little);
  }

  /** The entry that covers `offset`, or -1 (entries whose fields exceed 53 bits are skipped). */
  find(offset: number): number {
    for (let i = 0; i < this.size; i++) {
      const len = this.length(i);
      if (len === 0) continue;
      const start = this.start(i);
      if (start >= 0 && offset >= start && offset < start + len) return i;
    }
    return -1;
  }

  /** Entry `i`, or null when it is empty or does not fit in 53 bits. */
  entry(i: number): IomapEntry | null {
    const length = this.length(i);
    const offset = this.start(i);
    const addr = this.addr(i);
    if (length === 0 || offset < 0 || addr < 0) return null;
    return { offset, addr, key: this.key(i), length };
  }
}
