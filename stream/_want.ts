/**
 * What a stream operation that cannot go on waits for, and whether the engine's state lets it go
 * on now: the test of a connection's spins and waits.
 *
 * @module
 */

import type { StreamEngine } from "./_engine.ts";

/** Data to read, or the end of the stream. */
export const READ = 0;
/** Room to write: ring space, a send WR and a credit. */
export const WRITE = 1;
/** Room for a control message. */
export const CONTROL = 2;
/** Every posted send completed. */
export const SENDS_DONE = 3;
/** What an operation waits for: one of the above, or its own test. */
export type Want =
  | typeof READ
  | typeof WRITE
  | typeof CONTROL
  | typeof SENDS_DONE
  | (() => boolean);

/** True when an operation waiting for `want` can go on (or never will be able to). */
export function ready(e: StreamEngine, want: Want): boolean {
  if (typeof want === "function") return want();
  switch (want) {
    case READ:
      return e.hasData || !e.readable || !e.connected;
    case WRITE:
      return !e.writable || e.canSend();
    case CONTROL:
      return !e.connected || e.controlAvailable();
    default:
      return e.allSendsDone();
  }
}
