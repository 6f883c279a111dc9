/**
 * Turning errno into typed errors, right after a failing call.
 *
 * @module
 */

import { native } from "./native.ts";
import { NativeBlock } from "./memory.ts";
import { NativeError, UNSUPPORTED_ERRNOS, UnsupportedError } from "../types/errors.ts";

/** The errno's message from the C library (`strerror_r`). */
export function strerror(errno: number): string {
  const n = native();
  return NativeBlock.with(256, (buf) => n.cstring(n.libc.strerror_r(errno, buf.ptr, 256))) ??
    `errno ${errno}`;
}

/** A typed error for `operation` failing with `errno` (UnsupportedError for EOPNOTSUPP and kin). */
export function nativeError(operation: string, errno: number, context?: string): NativeError {
  const Kind = UNSUPPORTED_ERRNOS.has(errno) ? UnsupportedError : NativeError;
  return new Kind(operation, errno, strerror(errno), context);
}

/**
 * Throws the typed error for `operation` from the current errno. Call it
 * immediately after the failing call, before anything else can touch errno.
 */
export function throwErrno(operation: string, context?: string): never {
  throw nativeError(operation, native().errno(), context);
}

/** The typed error for `operation` from the current errno (read it right after the failing call). */
export function errnoError(operation: string, context?: string): NativeError {
  return nativeError(operation, native().errno(), context);
}

/** For calls that return a negative errno (or a positive one) instead of setting errno. */
export function throwReturned(operation: string, rc: number, context?: string): never {
  throw nativeError(operation, Math.abs(rc), context);
}

/**
 * Throws the typed error of a call that returned `rc` != 0: errno when the call set it,
 * otherwise the returned value as an errno. Read right after the call.
 */
export function checkCall(operation: string, rc: number, context?: string): void {
  if (rc !== 0) throw nativeError(operation, native().errno() || Math.abs(rc), context);
}
