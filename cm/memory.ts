/**
 * Small helpers for the native buffers the connection manager passes to
 * librdmacm (addresses, connection parameters, strings). None of these is on a
 * hot path.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer, Pointer } from "../types/ctypes.ts";

/** A native copy of `bytes` (at least 1 byte); free it with `native().free`. */
export function toNative(bytes: Uint8Array, minSize = 0): NativePointer {
  const n = native();
  const size = Math.max(bytes.length, minSize, 1);
  const p = n.alloc(size, 8);
  new Uint8Array(n.arrayBuffer(p, size)).set(bytes);
  return p;
}

/** A JS copy of `length` bytes at `p` (an empty array for NULL or 0). */
export function copyFromNative(p: Pointer, length: number): Uint8Array {
  if (p === null || length <= 0) return new Uint8Array(0);
  return new Uint8Array(native().arrayBuffer(p, length)).slice();
}

/** Runs `fn` with native copies of `buffers` (null stays NULL) and frees them afterwards. */
export function withNative<T>(
  buffers: readonly (Uint8Array | null | undefined)[],
  fn: (...ptrs: Pointer[]) => T,
): T {
  const ptrs: Pointer[] = buffers.map((b) => (b ? toNative(b) : null));
  try {
    return fn(...ptrs);
  } finally {
    for (const p of ptrs) if (p) native().free(p);
  }
}
