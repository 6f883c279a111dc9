/**
 * Choosing how pollers wait: each runtime offers several waiters (poller/README.md measures
 * them); the default is the one that woke fastest on the project's machines.
 *
 * @module
 */

import { useWaiter as use, waiterKinds as kinds } from "../ffi/wait.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { describe } from "../types/check.ts";

/**
 * The waiter kinds the running runtime offers, the default first (Deno: `deno-nonblocking`,
 * `deno-uring`; Bun: `bun-socket`, `bun-uring`, `bun-worker`).
 */
export function waiterKinds(): string[] {
  return kinds();
}

/**
 * Makes pollers created from now on wait with `kind` (one of {@link waiterKinds}), or with the
 * runtime's default when `kind` is undefined. Existing pollers, `Poller.default()` once created
 * among them, keep their waiter. Throws `InvalidArgumentError` for a kind the runtime lacks.
 */
export function useWaiter(kind?: string): void {
  if (kind !== undefined && typeof kind !== "string") {
    throw new InvalidArgumentError(`useWaiter: kind must be a string, got ${describe(kind)}`);
  }
  use(kind);
}
