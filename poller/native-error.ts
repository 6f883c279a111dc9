/**
 * Typed errors for failing libc calls made by the poller.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import { NativeError } from "../types/errors.ts";

/** The NativeError for `operation` from the current errno; call right after the failing call. */
export function errnoError(operation: string, context?: string): NativeError {
  const n = native();
  const errno = n.errno();
  const buf = n.alloc(256, 8);
  try {
    const text = n.cstring(n.libc.strerror_r(errno, buf, 256)) ?? `errno ${errno}`;
    return new NativeError(operation, errno, text, context);
  } finally {
    n.free(buf);
  }
}
