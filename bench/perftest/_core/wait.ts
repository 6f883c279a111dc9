/**
 * Completion handling shared by the measured loops: a busy poll that allocates nothing (and
 * gives up when a duration run ends), the completion-channel wait of -e, and the status
 * check with perftest's kind of message.
 *
 * @module
 */

import { type CompletionQueue, type CompletionWaitOptions, WcStatus } from "../../../mod.ts";
import { END, type Phases } from "./clock.ts";

/** A work completion that did not succeed. */
export class CompletionFailure extends Error {}

/**
 * Polls a busy loop makes per call (`cq.poll(max, tries)`): its empty polls loop in native code
 * as perftest's do, and the loop's own checks (the duration run's clock) come once per call.
 */
export const SPIN_TRIES = 64;

/**
 * Polls `cq` until something completes; returns how many. With `ph`, returns 0 once the
 * duration run has ended.
 */
export function spin(cq: CompletionQueue, ph: Phases | null): number {
  let n = cq.poll(undefined, SPIN_TRIES);
  if (ph === null) {
    while (n === 0) n = cq.poll(undefined, SPIN_TRIES);
    return n;
  }
  while (n === 0) {
    if (ph.poll() === END) return 0;
    n = cq.poll(undefined, SPIN_TRIES);
  }
  return n;
}

/** The options of a completion-channel wait (-e): created once per CQ user. */
export function eventWait(max: number): CompletionWaitOptions {
  return { strategy: "event", max };
}

/** Throws {@link CompletionFailure} unless the `n` polled completions succeeded. */
export function check(cq: CompletionQueue, n: number, what: string): void {
  for (let i = 0; i < n; i++) {
    const wc = cq.completion(i);
    if (wc.status !== WcStatus.SUCCESS) {
      throw new CompletionFailure(
        `Completion with error at ${what}: ${wc.statusName} (status ${wc.status}, vendor error 0x${
          wc.vendorErr.toString(16)
        }, wr_id ${wc.wrIdNumber})`,
      );
    }
  }
}
