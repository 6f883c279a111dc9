/**
 * How the `node:net` layer reports failures: the library's own error classes, each carrying the
 * `code` a `node:net` program tests for.
 *
 * - Caller mistakes throw {@link NetArgumentError} (an `InvalidArgumentError`) with Node's code:
 *   `ERR_SOCKET_BAD_PORT`, `ERR_INVALID_ARG_TYPE`, `ERR_INVALID_ARG_VALUE`, `ERR_MISSING_ARGS`,
 *   `ERR_SERVER_ALREADY_LISTEN`, `ERR_SOCKET_CONNECTING`.
 * - Connection failures are the stream layer's errors, given Node's code:
 *   `ConnectionRefusedError` -> `ECONNREFUSED`, `ConnectionResetError` -> `ECONNRESET`, an
 *   `AbortedError` from a connect timeout -> `ETIMEDOUT`, from an `AbortSignal` -> `ABORT_ERR`.
 * - Operations on a socket that is not connected or already closed: `ClosedError` with
 *   `ERR_SOCKET_CLOSED`; `Server.close()` on a server that is not listening: `ClosedError` with
 *   `ERR_SERVER_NOT_RUNNING`.
 *
 * @module
 */

import { ConnectionRefusedError, ConnectionResetError } from "../stream/mod.ts";
import { AbortedError, ClosedError, InvalidArgumentError } from "../types/errors.ts";
import { describe } from "../types/check.ts";

/** A caller mistake in the `node:net` layer: an `InvalidArgumentError` with Node's `code`. */
export class NetArgumentError extends InvalidArgumentError {
  /** Node's code for the mistake, e.g. `ERR_SOCKET_BAD_PORT`. */
  readonly code: string;
  /** Creates the error. */
  constructor(code: string, message: string) {
    super(`${message} (${code})`);
    this.code = code;
  }
}

/** An error of this layer with a Node-style `code` (and, for connect, where it was going). */
export type CodedError = Error & {
  code?: string;
  syscall?: string;
  address?: string;
  port?: number;
};

/** `ClosedError` with Node's `code`: the socket or server is not connected/running. */
export function closedError(what: string, code: string): ClosedError {
  const e = new ClosedError(what) as ClosedError & { code: string };
  e.code = code;
  return e;
}

/**
 * Gives `err` the `code` a `node:net` user tests for (when it has none) and, for a connect,
 * the `syscall`, `address` and `port`. Returns the same error object.
 */
export function withCode(
  err: unknown,
  connect?: { address: string; port: number; timedOut?: boolean },
): CodedError {
  const e = (err instanceof Error ? err : new Error(String(err))) as CodedError;
  if (e.code === undefined) {
    const code = e instanceof ConnectionResetError
      ? "ECONNRESET"
      : e instanceof ConnectionRefusedError
      ? "ECONNREFUSED"
      : e instanceof AbortedError
      ? (connect?.timedOut ? "ETIMEDOUT" : "ABORT_ERR")
      : undefined;
    if (code) e.code = code;
  }
  if (connect && e.syscall === undefined) {
    e.syscall = "connect";
    e.address = connect.address;
    e.port = connect.port;
  }
  return e;
}

/**
 * The port as a number, checked like Node's `validatePort`: an integer (or a string of digits)
 * in 0..65535; `ERR_SOCKET_BAD_PORT` otherwise.
 */
export function checkPort(port: unknown, name = "port"): number {
  const n = typeof port === "number"
    ? port
    : typeof port === "string" && /^\s*\d+\s*$/.test(port)
    ? Number(port)
    : NaN;
  if (!Number.isInteger(n) || n < 0 || n > 65535) {
    throw new NetArgumentError(
      "ERR_SOCKET_BAD_PORT",
      `${name} should be >= 0 and < 65536, got ${describe(port)}`,
    );
  }
  return n;
}

/** A host name or address: a non-empty string, or `ERR_INVALID_ARG_TYPE`. */
export function checkHost(host: unknown, name = "host"): string {
  if (typeof host !== "string" || host === "") {
    throw new NetArgumentError(
      "ERR_INVALID_ARG_TYPE",
      `${name} must be a non-empty string, got ${describe(host)}`,
    );
  }
  return host;
}
