/**
 * The errors of the stream layer. Each extends the library's `RdmaError`; the lower-level
 * failure that caused one (a `WorkCompletionError`, a `CmEventError`) is its `cause`.
 *
 * @module
 */

import { RdmaError } from "../types/errors.ts";

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
