/**
 * Soft-iWARP rarely fails the MPA exchange of a connect (docs/08): the tests that cycle many
 * connections retry one such connect per run, and print it.
 */
import type { DeviceEnv } from "../harness.ts";
import { CmEventError, CmEventType } from "../lib.ts";

/**
 * A connect that soft-iWARP failed in its MPA exchange: `RDMA_CM_EVENT_CONNECT_ERROR` with
 * status -EINVAL, which siw reports for every reply it could not take (docs/08).
 */
export function isSiwMpaFailure(env: DeviceEnv, e: unknown): boolean {
  return env.transport === "iwarp" && e instanceof CmEventError &&
    e.event === CmEventType.CONNECT_ERROR && e.status === -22;
}
