/**
 * Time in the measured loops (`performance.now()`, milliseconds as a double: nothing is
 * allocated) and perftest's duration mode (-D): a warm-up margin, the sampled window, a
 * closing margin, then the end. The phases are checked by the loops themselves (a busy loop
 * never gives timers a chance to run).
 *
 * @module
 */

/** Phases of a duration run, as perftest names them. */
export const START = 0, SAMPLE = 1, STOP_SAMPLE = 2, END = 3;

/** The phase clock of one duration run. */
export class Phases {
  /** Current phase. */
  state = START;
  /** When sampling began and ended (ms). */
  sampleStart = 0;
  sampleEnd = 0;
  #toSample = 0;
  #toStop = 0;
  #toEnd = 0;
  #started = false;
  readonly #durationMs: number;
  readonly #marginMs: number;

  constructor(durationS: number, marginS: number) {
    this.#durationMs = durationS * 1000;
    this.#marginMs = marginS * 1000;
  }

  /** Starts the clock at `now`. */
  start(now: number): void {
    this.#started = true;
    this.state = START;
    this.#toSample = now + this.#marginMs;
    this.#toStop = now + this.#durationMs - this.#marginMs;
    this.#toEnd = now + this.#durationMs;
    this.tick(now);
  }

  /** True once {@link Phases.start} was called. */
  get started(): boolean {
    return this.#started;
  }

  /** Advances the phase to `now` (nothing before {@link Phases.start}); returns it. */
  tick(now: number): number {
    if (!this.#started) return this.state;
    if (this.state === START && now >= this.#toSample) {
      this.state = SAMPLE;
      this.sampleStart = now;
    }
    if (this.state === SAMPLE && now >= this.#toStop) {
      this.state = STOP_SAMPLE;
      this.sampleEnd = now;
    }
    if (this.state === STOP_SAMPLE && now >= this.#toEnd) this.state = END;
    return this.state;
  }
}
