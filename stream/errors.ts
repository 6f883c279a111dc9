/**
 * The errors of the stream layer. Each extends the library's `RdmaError`; the lower-level
 * failure that caused one (a `WorkCompletionError`, a `CmEventError`) is its `cause`.
 *
 * @module
 */

import { InvalidArgumentError, RdmaError } from "../types/errors.ts";
import { WcStatus } from "../types/enums.ts";

/** The peer broke rsocket's protocol (connection data that is short, another version, ...). */
export class ProtocolError extends RdmaError {}

/**
 * The connection ended without the peer's orderly goodbye: the peer process died, its device
 * or link went away, or a work request failed. Pending and later reads and writes reject with
 * it (reads first return the bytes that had already arrived). `cause` holds what was observed.
 */
export class ConnectionResetError extends RdmaError {}

/** Nobody accepted the connection: rejected, unreachable, or no listener at that address. */
export class ConnectionRefusedError extends RdmaError {}

/**
 * The {@link ConnectionResetError} of a connection that ended by a failure: the connection
 * manager saw the peer go (`cmGone`), or a work request failed with `status` (0: neither).
 */
export function resetError(cmGone: boolean, status: number, cause: unknown): ConnectionResetError {
  const why = cmGone
    ? "the peer disconnected without rsocket's DISCONNECT (it exited or was killed)"
    : status === WcStatus.WR_FLUSH_ERR
    ? "the queue pair was flushed (the peer went away)"
    : status
    ? `a work request failed (status ${status})`
    : "the connection failed";
  return new ConnectionResetError(`connection reset: ${why}`, { cause });
}

/**
 * `iomap()` found no free entry in the peer's iomap table (rsocket's `riomap` fails with ENOMEM):
 * the peer offers as many entries as its `iomapSize` (a C rsocket: its `RDMA_IOMAPSIZE`, 0 by
 * default), and each of this side's mappings holds one until it is unmapped.
 */
export class NoIomapSlotError extends RdmaError {}

/**
 * Part of an `iowrite()` range is not in any buffer the peer mapped with its `iomap()`. Nothing
 * was sent when `written` is 0 (the range is checked first); a mapping the peer removed while
 * the write was under way stops it after `written` bytes.
 */
export class UnmappedOffsetError extends RdmaError {
  /** The first offset not mapped. */
  readonly offset: number;
  /** Bytes written (posted) before it. */
  readonly written: number;
  /** Creates the error. */
  constructor(message: string, offset: number, written: number) {
    super(message);
    this.offset = offset;
    this.written = written;
  }
}

/**
 * A remote-memory token that cannot be used on this connection: malformed, another version, or
 * made by the peer of another connection (its connection tag or QP number differs).
 */
export class InvalidTokenError extends InvalidArgumentError {}

/**
 * The owner revoked the exposed memory (closed its handle, or its connection): the revocation
 * notice arrived, so the operation was refused before it was posted.
 */
export class RevokedError extends RdmaError {}

/**
 * The peer's device refused a one-sided operation (`IBV_WC_REM_ACCESS_ERR` and kin: the memory
 * was deregistered - revoked before the notice arrived - or the access is not granted), or the
 * token does not grant the access (checked before posting: then the connection is unharmed).
 * A refusal by the device is a failed work request: the QP goes to the error state and the
 * connection is reset (RC semantics). The `cause` is the `WorkCompletionError`.
 */
export class RemoteAccessError extends RdmaError {}
