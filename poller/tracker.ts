/**
 * A promise per signaled work request, keyed by wr_id and settled by its completion: resolved
 * with a copy of the completion when its status is success, rejected with a
 * {@link WorkCompletionError} carrying the status otherwise. A {@link CompletionPump} drives a
 * CQ for the tracker while promises are pending.
 *
 * @module
 */

import { ClosedError, InvalidArgumentError, WorkCompletionError } from "../types/errors.ts";
import { enumName, WcFlags, WcStatus, wcStatusStr } from "../types/enums.ts";
import { WaitList, type WaitOptions } from "./wait.ts";
import {
  awaitCompletions,
  type CompletionSource,
  type CompletionWaitOptions,
} from "./completions.ts";
import { describe } from "../types/check.ts";

/** The fields of a work completion the tracker reads (structural: the verbs WC accessor). */
export interface CompletionView {
  /** The WR id. */
  readonly wrId: bigint;
  /** `enum ibv_wc_status`. */
  readonly status: number;
  /** `enum ibv_wc_opcode`. */
  readonly opcode: number;
  /** Bytes transferred (receives). */
  readonly byteLen: number;
  /** The local QP number. */
  readonly qpNum: number;
  /** Vendor error syndrome. */
  readonly vendorErr: number;
  /** Immediate data in host order (when the WC carries it). */
  readonly immData?: number;
  /** `ibv_wc_flags`. */
  readonly wcFlags?: number;
}

/** A plain copy of a successful completion, as a tracked promise resolves with it. */
export interface CompletionRecord {
  /** The WR id. */
  wrId: bigint;
  /** `IBV_WC_SUCCESS` (0). */
  status: number;
  /** `enum ibv_wc_opcode`. */
  opcode: number;
  /** Bytes transferred. */
  byteLen: number;
  /** The local QP number. */
  qpNum: number;
  /** Immediate data (host order) when the completion carries it (`WcFlags.WITH_IMM`), else undefined. */
  immData: number | undefined;
  /** `ibv_wc_flags`, or 0. */
  wcFlags: number;
}

interface Entry {
  readonly list: WaitList<CompletionRecord>;
  readonly qpNum: number | undefined;
  readonly reportAs: bigint | undefined;
}

/** How a tracked request is matched and reported. */
export interface TrackOptions extends WaitOptions {
  /** Settle only with a completion of this QP (a stray completion with the same wr_id is not it). */
  qpNum?: number;
  /** The wr_id to report in the record or error (when the posted wr_id is a library tag). */
  reportAs?: bigint;
}

/** The typed error for a failed completion (reported with `wrId` when given). */
export function workCompletionError(
  wc: CompletionView,
  wrId: bigint = wc.wrId,
): WorkCompletionError {
  return new WorkCompletionError(
    wc.status,
    enumName(WcStatus, wc.status, "IBV_WC_"),
    wcStatusStr(wc.status),
    wc.vendorErr,
    wrId,
    wc.qpNum,
  );
}

/**
 * Promises for signaled work requests by wr_id. Call {@link WorkRequestTracker.track} before
 * posting, feed every completion to {@link WorkRequestTracker.settle} (a
 * {@link CompletionPump} does), {@link WorkRequestTracker.close} on teardown.
 */
export class WorkRequestTracker {
  #entries = new Map<bigint, Entry>();
  #closed: Error | null = null;
  #onEmpty: (() => void) | null = null;

  /** How many tracked requests have not completed. */
  get pending(): number {
    return this.#entries.size;
  }

  /**
   * A promise for the completion of `wrId`: resolves with its record on success, rejects with
   * WorkCompletionError on an error status, AbortedError on abort/timeout (the WR itself is
   * not cancelled; its completion is then ignored), ClosedError when the tracker closes.
   */
  track(wrId: bigint, options?: TrackOptions): Promise<CompletionRecord> {
    if (this.#closed) return Promise.reject(this.#closed);
    if (typeof wrId !== "bigint") {
      return Promise.reject(
        new InvalidArgumentError(`wr_id must be a bigint, got ${describe(wrId)}`),
      );
    }
    if (this.#entries.has(wrId)) {
      return Promise.reject(new InvalidArgumentError(`wr_id ${wrId} is already tracked`));
    }
    const entry: Entry = {
      list: new WaitList<CompletionRecord>(),
      qpNum: options?.qpNum,
      reportAs: options?.reportAs,
    };
    const done = entry.list.add(options, undefined, `work request ${entry.reportAs ?? wrId}`)
      .catch((e) => {
        if (this.#entries.get(wrId) === entry) this.#forget(wrId);
        throw e;
      });
    this.#entries.set(wrId, entry);
    return done;
  }

  /** True if `wrId` is tracked and pending. */
  has(wrId: bigint): boolean {
    return this.#entries.has(wrId);
  }

  /** Settles the promise of `wc.wrId`, if tracked; returns whether it was. */
  settle(wc: CompletionView): boolean {
    const wrId = wc.wrId;
    const e = this.#entries.get(wrId);
    if (!e || (e.qpNum !== undefined && e.qpNum !== wc.qpNum)) return false;
    this.#forget(wrId);
    if (wc.status === 0) {
      const flags = wc.wcFlags ?? 0;
      e.list.resolveAll({
        wrId: e.reportAs ?? wrId,
        status: 0,
        opcode: wc.opcode,
        byteLen: wc.byteLen,
        qpNum: wc.qpNum,
        immData: (flags & WcFlags.WITH_IMM) !== 0 ? wc.immData : undefined,
        wcFlags: flags,
      });
    } else e.list.rejectAll(workCompletionError(wc, e.reportAs ?? wrId));
    return true;
  }

  /**
   * Rejects the pending promises tracked for QP `qpNum` with `reason` (their QP closed: no
   * completion will come for them). Returns how many.
   */
  rejectQp(qpNum: number, reason: Error): number {
    let n = 0;
    for (const [wrId, e] of [...this.#entries]) {
      if (e.qpNum !== qpNum) continue;
      this.#forget(wrId);
      e.list.rejectAll(reason);
      n++;
    }
    return n;
  }

  /** Rejects every pending promise with `reason` (default ClosedError); later `track` fails too. Idempotent. */
  close(reason?: Error): void {
    if (this.#closed) return;
    this.#closed = reason ?? new ClosedError("WorkRequestTracker");
    const entries = [...this.#entries.values()];
    this.#entries.clear();
    for (const e of entries) e.list.rejectAll(this.#closed);
    this.#onEmpty?.();
  }

  /** @internal Called when the last pending request settles. */
  set onEmpty(fn: (() => void) | null) {
    this.#onEmpty = fn;
  }

  #forget(wrId: bigint): void {
    this.#entries.delete(wrId);
    if (this.#entries.size === 0) this.#onEmpty?.();
  }
}

/** Options of a {@link CompletionPump}. */
export interface PumpOptions extends Omit<CompletionWaitOptions, "timeout"> {
  /** Receives every completion no tracked promise wanted (the accessor is reused). */
  onUntracked?: (wc: CompletionView) => void;
  /** Reads completion `i` of the last poll (default: `cq.completion(i)` or `cq.wc(i)`). */
  at?: (i: number) => CompletionView;
}

/**
 * Drives one CQ for a tracker: while any tracked request is pending it waits for completions
 * (with the chosen strategy) and settles them; it stops when nothing is pending, so an idle
 * process can exit. Untracked completions go to `onUntracked`.
 */
export class CompletionPump {
  /** The tracker it feeds. */
  readonly tracker: WorkRequestTracker;
  #cq: CompletionSource;
  #options: PumpOptions;
  #at: (i: number) => CompletionView;
  #running = false;
  #closed = false;

  /** Creates a pump for `cq` with a new tracker (or the given one). */
  constructor(cq: CompletionSource, options: PumpOptions = {}, tracker = new WorkRequestTracker()) {
    this.#cq = cq;
    this.#options = options;
    this.tracker = tracker;
    const c = cq as unknown as {
      completion?: (i: number) => CompletionView;
      wc?: (i: number) => CompletionView;
    };
    const at = options.at ??
      (typeof c.completion === "function"
        ? (i: number) => c.completion!(i)
        : typeof c.wc === "function"
        ? (i: number) => c.wc!(i)
        : undefined);
    if (!at) {
      throw new InvalidArgumentError(
        "CompletionPump: the CQ has no completion(i)/wc(i); pass `at`",
      );
    }
    this.#at = at;
  }

  /**
   * Tracks `wrId` and makes sure the pump runs; post the WR right after (same tick).
   * See {@link WorkRequestTracker.track}.
   */
  track(wrId: bigint, options?: TrackOptions): Promise<CompletionRecord> {
    if (this.#closed) return Promise.reject(new ClosedError("CompletionPump"));
    const p = this.tracker.track(wrId, options);
    if (!this.#running) this.#run();
    return p;
  }

  /** Stops the pump and closes its tracker (pending promises reject with `reason`). */
  close(reason?: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    this.tracker.close(reason ?? new ClosedError("CompletionPump"));
  }

  /** Alias of {@link CompletionPump.close}. */
  [Symbol.dispose](): void {
    this.close();
  }

  async #run(): Promise<void> {
    this.#running = true;
    const tracker = this.tracker;
    const at = this.#at;
    const onUntracked = this.#options.onUntracked;
    // when nothing is pending any more (e.g. every tracked wait was aborted), stop waiting
    const idle = new AbortController();
    const user = this.#options.signal;
    const options = {
      ...this.#options,
      signal: user ? AbortSignal.any([user, idle.signal]) : idle.signal,
    };
    tracker.onEmpty = () => idle.abort();
    try {
      while (!this.#closed && tracker.pending > 0) {
        const n = await awaitCompletions(this.#cq, options);
        for (let i = 0; i < n; i++) {
          const wc = at(i);
          if (!tracker.settle(wc)) onUntracked?.(wc);
        }
      }
    } catch (e) {
      if (idle.signal.aborted && !user?.aborted && !this.#closed) return;
      // the CQ failed or closed, or the pump's signal fired: every pending request learns why
      tracker.close(e instanceof Error ? e : new ClosedError("CompletionPump"));
      this.#closed = true;
    } finally {
      tracker.onEmpty = null;
      this.#running = false;
    }
  }
}
