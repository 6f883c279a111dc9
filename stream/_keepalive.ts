/**
 * A stream's keepalive, rsocket's `SO_KEEPALIVE` with its idle time (`TCP_KEEPIDLE`): after
 * every period without a send, a zero-length RDMA WRITE (what rsocket sends; the peer sees
 * nothing). A peer that vanished without disconnecting fails the probe once the queue pair's
 * retries are exhausted; when {@link KEEPALIVE_PROBES} periods in a row pass with sends
 * outstanding and none completing, the connection gives up itself (soft-RoCE retries a retry
 * count of 7 without end, so there nothing else would end it).
 *
 * @module
 */

import { startTimer, stopTimer, type TimerHandle } from "../ffi/timers.ts";
import { costs, COUNTING } from "../ffi/cost.ts";
import type { ConnCore } from "./_core.ts";
import { ConnectionResetError } from "./errors.ts";
import { KEEPALIVE_DEFAULT_MS, KEEPALIVE_PROBES } from "./options.ts";

/** The keepalive timer of one connection (module-private to the stream layer). */
export class Keepalive {
  readonly #core: ConnCore;
  /** The running period in ms; 0 while off. */
  #period = 0;
  /** The period `on()` uses when given none. */
  #idle = KEEPALIVE_DEFAULT_MS;
  #timer: TimerHandle | null = null;
  /** The engine's posted and completed counts at the last tick. */
  #posted = 0;
  #completed = 0;
  /** Periods in a row with sends outstanding and none completing. */
  #misses = 0;

  constructor(core: ConnCore) {
    this.#core = core;
  }

  /** Turns it on (`idleMs` > 0 sets the period, 0 keeps the last) or off. */
  set(on: boolean, idleMs: number): void {
    if (idleMs > 0) this.#idle = idleMs;
    this.stop();
    if (!on) return;
    const e = this.#core.engine;
    this.#period = this.#idle;
    this.#posted = e.postedCount;
    this.#completed = e.completedCount;
    this.#misses = 0;
    this.#arm();
  }

  /** Turns it off (the connection closes). */
  stop(): void {
    if (this.#timer !== null) stopTimer(this.#timer);
    this.#timer = null;
    this.#period = 0;
  }

  #arm(): void {
    if (COUNTING) costs.timers++;
    // the timer never keeps the process alive
    this.#timer = startTimer(this.#tick, this.#period, false);
  }

  readonly #tick = () => {
    this.#timer = null;
    const core = this.#core;
    if (core.closing || this.#period === 0) return;
    const e = core.engine;
    // take what completed (the connection's pump runs only while an operation waits)
    core.progress();
    if (!e.connected) return;
    if (!e.allSendsDone() && e.completedCount === this.#completed) {
      if (++this.#misses >= KEEPALIVE_PROBES) {
        core.fail(
          new ConnectionResetError(
            `connection reset: keepalive: no send completed in ${KEEPALIVE_PROBES} periods ` +
              `of ${this.#period} ms (the peer does not acknowledge)`,
          ),
        );
        return;
      }
    } else this.#misses = 0;
    this.#completed = e.completedCount;
    // rsocket probes every period; probing only a period without sends is enough to find a
    // dead peer (a send to it fails the same way) and costs an idle connection one WR
    if (e.postedCount === this.#posted) core.guard(() => e.postKeepalive());
    this.#posted = e.postedCount;
    this.#arm();
  };
}
