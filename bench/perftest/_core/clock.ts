/**
 * Time in the measured loops (`performance.now()`, milliseconds as a double) and perftest's
 * duration mode (-D): a warm-up margin, the sampled window, a closing margin, then the end. The
 * phases are checked by the loops themselves (a busy loop never gives timers a chance to run),
 * through {@link Phases.poll}, which reads the clock once in {@link CLOCK_EVERY} calls: C's
 * perftest flips its phases from an alarm signal and reads no clock in the loop, while
 * `performance.now()` costs microseconds in the emulated guest (and allocates in Deno).
 *
 * @module
 */

/** Phases of a duration run, as perftest names them. */
export const START = 0, SAMPLE = 1, STOP_SAMPLE = 2, END = 3;

/** {@link Phases.poll} reads the clock once in this many calls. */
export const CLOCK_EVERY = 64;

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
  #calls = 0;
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

  /**
   * The phase, advanced to the clock once in {@link CLOCK_EVERY} calls (a phase change is seen
   * up to that many calls late; the sampled window's ends are the times it was seen).
   */
  poll(): number {
    if (++this.#calls < CLOCK_EVERY) return this.state;
    this.#calls = 0;
    return this.tick(performance.now());
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
