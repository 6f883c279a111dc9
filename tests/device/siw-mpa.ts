/**
 * Soft-iWARP now and then fails the MPA exchange of a connect (docs/08): the tests that cycle many
 * connections retry such connects, each printed, up to a small budget per run.
 */
import type { DeviceEnv } from "../harness.ts";
import { CmEventError, CmEventType } from "../lib.ts";

/**
 * A connect that soft-iWARP failed in its MPA exchange: `RDMA_CM_EVENT_CONNECT_ERROR` with
 * status -EINVAL, which siw reports for every reply it could not take (docs/08).
 */
function isSiwMpaFailure(env: DeviceEnv, e: unknown): boolean {
  return env.transport === "iwarp" && e instanceof CmEventError &&
    e.event === CmEventType.CONNECT_ERROR && e.status === -22;
}

/** How many MPA failures one test run may retry: more than this is a failure of the test. */
export const MPA_RETRY_BUDGET = 3;

/**
 * The MPA retries of one test run: {@link MpaRetries.allow} says whether a failed connect may be
 * retried (an siw MPA failure, within {@link MPA_RETRY_BUDGET}) and prints it when so.
 */
export class MpaRetries {
  #used = 0;

  /** `label` prefixes the printed line (the test's name for its cycles). */
  constructor(readonly env: DeviceEnv, readonly label: string) {}

  /** True (printed) when `e`, cycle `cycle`'s connect failure, may be retried. */
  allow(e: unknown, cycle: number): boolean {
    if (this.#used >= MPA_RETRY_BUDGET || !isSiwMpaFailure(this.env, e)) return false;
    this.#used++;
    console.log(
      `${this.label}: cycle ${cycle}: ${e}; retried (${this.#used} of ${MPA_RETRY_BUDGET} ` +
        "allowed per run, docs/08)",
    );
    return true;
  }
}
