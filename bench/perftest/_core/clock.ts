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

// the slots of Phases' times
const SAMPLE_START = 0, SAMPLE_END = 1, TO_SAMPLE = 2, TO_STOP = 3, TO_END = 4;

/**
 * The phase clock of one duration run. The loops count their samples with an add that runs on
 * every pass (`counted += state === SAMPLE ? n : 0`): an increment reached only in the window
 * has no type feedback before it and deoptimizes the loop when the window opens.
 */
export class Phases {
  /** Current phase. */
  state = START;
  /**
   * The times (ms): when sampling began and ended, and when the phases change. A typed array: a
   * double stored into a field first seen holding a small integer changes the object's shape,
   * and a shape changed at the window's start deoptimizes the loops compiled against it.
   */
  readonly #t = new Float64Array(5);
  #started = false;
  #calls = 0;
  readonly #durationMs: number;
  readonly #marginMs: number;

  constructor(durationS: number, marginS: number) {
    this.#durationMs = durationS * 1000;
    this.#marginMs = marginS * 1000;
  }

  /** When sampling began (ms; 0 before). */
  get sampleStart(): number {
    return this.#t[SAMPLE_START];
  }

  /** When sampling ended (ms; 0 before). */
  get sampleEnd(): number {
    return this.#t[SAMPLE_END];
  }

  /** Starts the clock at `now`. */
  start(now: number): void {
    const t = this.#t;
    this.#started = true;
    this.state = START;
    t[SAMPLE_START] = t[SAMPLE_END] = 0;
    t[TO_SAMPLE] = now + this.#marginMs;
    t[TO_STOP] = now + this.#durationMs - this.#marginMs;
    t[TO_END] = now + this.#durationMs;
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
    const t = this.#t;
    if (this.state === START && now >= t[TO_SAMPLE]) {
      this.state = SAMPLE;
      t[SAMPLE_START] = now;
    }
    if (this.state === SAMPLE && now >= t[TO_STOP]) {
      this.state = STOP_SAMPLE;
      t[SAMPLE_END] = now;
    }
    if (this.state === STOP_SAMPLE && now >= t[TO_END]) this.state = END;
    return this.state;
  }

  static {
    // Every branch of `tick` runs at load, so the compiled loops find type feedback on each and
    // do not deoptimize when the sampled window opens or closes (V8's trace showed the loops
    // deoptimized at both edges of the window and compiled again inside it). V8 keeps feedback
    // only for a function called a few times already: hence the repetitions.
    for (let i = 0; i < 32; i++) {
      const warm = new Phases(3, 1);
      warm.start(0);
      for (let now = 500; now < 4000; now += 1000) warm.tick(now);
    }
  }
}
