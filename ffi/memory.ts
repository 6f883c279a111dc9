/**
 * The one owner type of native memory: a zeroed native allocation with one cached `DataView`
 * and `Uint8Array` over it. What C keeps (WRs, SGE lists, WC arrays, attribute structs,
 * registered buffers, scratch out-parameters) lives in a {@link NativeBlock}; freeing the block
 * detaches its buffer, so a view kept past `free()` reads nothing instead of freed memory.
 *
 * @module
 */

import { native } from "./native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { checkInteger } from "../types/check.ts";

/** A zeroed native allocation with a cached `DataView` and `Uint8Array` over it. */
export class NativeBlock {
  /** The native address. */
  readonly ptr: NativePointer;
  /** The native address as a number (user-space addresses are below 2^53). */
  readonly addrNumber: number;
  /** Size in bytes. */
  readonly size: number;
  /** A view over the whole block (little-endian fields: pass `true`). */
  readonly view: DataView;
  readonly #buffer: ArrayBuffer;
  #bytes: Uint8Array | null = null;
  readonly #align: number;
  #freed = false;

  /** Allocates `size` zeroed bytes aligned to `align` (a power of two, default 64). */
  constructor(size: number, align = 64) {
    checkInteger("native block size", size, 0, Number.MAX_SAFE_INTEGER);
    const n = native();
    this.size = Math.max(1, size);
    this.ptr = n.alloc(this.size, align);
    this.#align = align;
    this.addrNumber = Number(n.address(this.ptr));
    this.#buffer = n.arrayBuffer(this.ptr, this.size);
    this.view = new DataView(this.#buffer);
  }

  /** The same bytes as a `Uint8Array` (made on first use: most blocks are only read by fields). */
  get bytes(): Uint8Array {
    // after free() the buffer is detached: an empty view, like the views made before it
    return this.#bytes ??= this.#freed ? new Uint8Array(0) : new Uint8Array(this.#buffer);
  }

  /** A native copy of `bytes` (at least `minSize` bytes, zero-padded). */
  static from(bytes: Uint8Array, minSize = 0): NativeBlock {
    const b = new NativeBlock(Math.max(bytes.length, minSize), 8);
    b.bytes.set(bytes);
    return b;
  }

  /** Runs `fn` with a zeroed scratch block of `size` bytes and frees it afterwards. */
  static with<T>(size: number, fn: (block: NativeBlock) => T): T {
    const b = new NativeBlock(size, 8);
    try {
      return fn(b);
    } finally {
      b.free();
    }
  }

  /** True once freed. */
  get freed(): boolean {
    return this.#freed;
  }

  /** The address `bytes` into the block. */
  at(bytes: number): NativePointer {
    return native().offset(this.ptr, bytes);
  }

  /** Zeroes the block. */
  clear(): void {
    this.bytes.fill(0);
  }

  /** Reads the pointer stored at `offset`. */
  pointerAt(offset: number): NativePointer | null {
    return native().readPointer(this.ptr, offset);
  }

  /** Stores a pointer at `offset`. */
  setPointer(offset: number, value: NativePointer | null): void {
    native().writePointer(this.ptr, offset, value);
  }

  /** Stores the address `inner` bytes into this block (`null`: NULL) at `offset`; allocates nothing. */
  setInnerPointer(offset: number, inner: number | null): void {
    setU64(this.view, offset, inner === null ? 0 : this.addrNumber + inner);
  }

  /**
   * Frees the native memory (idempotent). The block's buffer is detached first: every view
   * over it (`view`, `bytes`, and any array made from them) has length 0 afterwards.
   */
  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    detach(this.#buffer);
    native().free(this.ptr, this.size, this.#align);
  }
}

/** Detaches an ArrayBuffer over native memory that is about to be freed. */
export function detach(buffer: ArrayBufferLike): void {
  const b = buffer as ArrayBuffer & { transfer?: (n: number) => ArrayBuffer; detached?: boolean };
  if (b.detached || typeof b.transfer !== "function") return;
  b.transfer(0);
}

/** Writes a 64-bit value given as number or bigint without allocating for numbers. */
export function setU64(view: DataView, offset: number, value: number | bigint): void {
  if (typeof value === "bigint") view.setBigUint64(offset, BigInt.asUintN(64, value), true);
  else {
    view.setUint32(offset, value >>> 0, true);
    view.setUint32(offset + 4, Math.floor(value / 0x1_0000_0000) >>> 0, true);
  }
}

/** Reads a 64-bit value as a number (exact below 2^53). */
export function getU64Number(view: DataView, offset: number): number {
  return view.getUint32(offset + 4, true) * 0x1_0000_0000 + view.getUint32(offset, true);
}

/** A JS copy of `length` bytes at `p` (an empty array for NULL or 0). */
export function copyBytes(p: NativePointer | null, length: number): Uint8Array {
  if (p === null || length <= 0) return new Uint8Array(0);
  return new Uint8Array(native().arrayBuffer(p, length)).slice();
}
