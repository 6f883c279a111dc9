/**
 * What the parts of a connection outside `conn.ts` (`iomap.ts`, `remote.ts`, `_keepalive.ts`) use of it: its verbs
 * objects and engine, its progress and waiting, its write lock and its errors. Types only, so
 * those modules do not import `conn.ts` at run time.
 *
 * @module
 */

import type { RdmaError } from "../types/errors.ts";
import type { NativeResource } from "../ffi/resource.ts";
import type { WaitOptions } from "../poller/wait.ts";
import type { StreamEngine } from "./_engine.ts";
import type { VerbsTransport } from "./_transport.ts";

/** A connection's internals for its iomap and remote-buffer parts (module-private). */
export interface ConnCore {
  /** The connection (the owner of mappings and exposed memory: it closes them first). */
  readonly owner: NativeResource;
  /** The verbs objects (PD, CQ, QP, MRs). */
  readonly transport: VerbsTransport;
  /** The protocol state machine. */
  readonly engine: StreamEngine;
  /** True once `close()` started (children then leave their memory to the teardown). */
  readonly closing: boolean;
  /** Polls the CQ once and feeds every completion where it belongs; returns the count. */
  progress(): number;
  /** Runs a step that may post; a failing post fails the stream (returns false then). */
  guard(f: () => boolean | void): boolean;
  /**
   * Returns when `ready()` holds: at once, after spinning on the CQ (the connection's strategy),
   * or after waits for the connection's progress. Rejects with `ClosedError` when the
   * connection is closed and with `AbortedError` for the options' signal or timeout. `ready()`
   * must also hold once the stream can no longer go on (`!engine.connected`).
   */
  waitUntil(ready: () => boolean, options?: WaitOptions): Promise<void> | void;
  /** Waits until a data chunk can be sent (or the stream can no longer send). */
  waitWrite(options?: WaitOptions): Promise<void> | void;
  /** Takes the write lock (writes, `closeWrite` and direct writes are serialized). */
  lock(options?: WaitOptions): Promise<void> | void;
  /** Releases the write lock. */
  unlock(): void;
  /** Fails the stream with `err`: the engine resets, the QP goes to error, waiters wake. */
  fail(err: Error): void;
  /** The error of a send that cannot go on (reset, peer gone, or after `closeWrite`). */
  writeError(): RdmaError;
  /** The error of a connection that ended by a failure (`ConnectionResetError`). */
  resetError(): RdmaError;
  /**
   * Receives the completions of work requests whose wr_id is at least `ONE_SIDED_WR_ID` (the
   * connection's one-sided operations) as the wr_id's low half (the slot: `ONE_SIDED_WR_ID +
   * slot` was posted), with their status and the failure's error.
   */
  onOneSided: ((slot: number, status: number, error: Error | null) => void) | null;
}
