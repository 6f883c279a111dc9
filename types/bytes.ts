/**
 * Bytes as the library accepts them: any `ArrayBufferView` (a typed array, a `DataView`, a
 * Node `Buffer`) or an `ArrayBuffer`, viewed as a `Uint8Array` over the same memory (no copy).
 *
 * @module
 */

import { InvalidArgumentError } from "./errors.ts";

/** Bytes in any of the shapes Deno, Bun and Node programs hold them in. */
export type Bytes = ArrayBufferView | ArrayBuffer;

/** A `Uint8Array` over the same memory as `data` (no copy); `what` names it in the error. */
export function asBytes(data: Bytes, what: string): Uint8Array {
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) {
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (typeof SharedArrayBuffer !== "undefined" && (data as unknown) instanceof SharedArrayBuffer) {
    return new Uint8Array(data as unknown as SharedArrayBuffer);
  }
  throw new InvalidArgumentError(`${what} must be an ArrayBufferView or an ArrayBuffer`);
}
