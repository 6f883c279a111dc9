/**
 * Native memory blocks with one cached view each: what C keeps (WRs, SGE lists,
 * WC arrays, attribute structs) lives in native memory and is read and written
 * through a DataView created once.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";

/** A zeroed native allocation with a cached `DataView` and `Uint8Array` over it. */
export class NativeBlock {
  /** The native address. */
  readonly ptr: NativePointer;
  /** Size in bytes. */
  readonly size: number;
  /** A view over the whole block (little-endian fields: pass `true`). */
  readonly view: DataView;
  /** The same bytes as a `Uint8Array`. */
  readonly bytes: Uint8Array;
  #freed = false;

  /** Allocates `size` zeroed bytes aligned to `align`. */
  constructor(size: number, align = 64) {
    const n = native();
    this.size = Math.max(1, size);
    this.ptr = n.alloc(this.size, align);
    const buf = n.arrayBuffer(this.ptr, this.size);
    this.view = new DataView(buf);
    this.bytes = new Uint8Array(buf);
  }

  /** The address `bytes` into the block. */
  at(bytes: number): NativePointer {
    return native().offset(this.ptr, bytes);
  }

  /** Zeroes the block. */
  clear(): void {
    this.bytes.fill(0);
  }

  /** Frees the native memory (idempotent); the views must not be used afterwards. */
  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    native().free(this.ptr);
  }
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
