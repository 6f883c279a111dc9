/**
 * Errors of posting work requests: a request rejected by validation before the
 * provider saw it, a QP in a state that cannot post, and a provider failure with
 * the index of the first failing request.
 *
 * @module
 */

import { InvalidArgumentError, NativeError } from "../types/errors.ts";
import { strerror } from "../ffi/errors.ts";

/**
 * A work request of a list was invalid. The requests before it (`posted` of them)
 * were posted, as `ibv_post_send` does with `bad_wr`; this one and the rest were not.
 */
export class InvalidWorkRequestError extends InvalidArgumentError {
  /** Index of the invalid work request in the list. */
  readonly index: number;
  /** How many requests of the list were posted (equal to `index`). */
  readonly posted: number;
  /** Creates the error. */
  constructor(what: string, index: number, reason: string) {
    super(`${what}: work request ${index} is invalid: ${reason}`);
    this.index = index;
    this.posted = index;
  }
}

/** Posting on a QP whose state does not allow it (send in RESET/INIT/RTR, receive in RESET). */
export class QpStateError extends InvalidArgumentError {
  /** The QP state's C name. */
  readonly state: string;
  /** Creates the error. */
  constructor(what: string, state: string) {
    super(`${what}: the QP is in ${state}; it cannot post here`);
    this.state = state;
  }
}

/** The provider rejected a work request; those before `index` were posted. */
export class PostError extends NativeError {
  /** Index of the first failing work request (`bad_wr`). */
  readonly index: number;
  /** Creates the error for `operation` failing with `errno` at `index`. */
  constructor(operation: string, errno: number, index: number) {
    super(operation, errno, strerror(errno), `work request ${index}`);
    this.index = index;
  }
}
