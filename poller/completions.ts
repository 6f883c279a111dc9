/**
 * Waiting for completions of a CQ on the JS event loop, with three strategies:
 *
 * - `"event"`: arm the CQ (`requestNotify`), drain it with `poll`, and only if it was empty
 *   wait for the completion channel's event through the poller. The order is always
 *   arm -> drain -> wait, so a completion landing between the drain and the wait still signals
 *   the channel. A CQ already armed and not yet signalled is neither re-armed nor drained again
 *   (the poll just before the wait found it empty, and a later completion raises the event).
 * - `"busy"`: poll in a tight loop for a slice ({@link BUSY_SLICE_MICROS}, or `spinMicros`), and
 *   between slices yield to the event loop (`setImmediate`), so timers and I/O keep running. A
 *   completion that lands within a slice costs no event-loop turn. Needs no channel; costs a
 *   core while waiting.
 * - `"adaptive"` (the default): poll in a tight loop for a spin budget, then arm and wait like
 *   `"event"` (the idea of rsocket's `rpoll`, which spins for a fixed time). The budget is
 *   learnt per CQ from the spins that caught their completions, and while most spins hit at
 *   least a few wake-ups' worth ({@link SpinBudget}), so a ping-pong whose answer comes back
 *   within the budget never pays a wake-up and an idle CQ spins almost nothing; `spinMicros`
 *   fixes the budget instead.
 *
 * Why `"adaptive"` is the default: a completion that lands within the spin saves a whole
 * event-loop wake-up, which costs far more than polling (measurements: poller/README.md and
 * bench/results/). Learning the budget per CQ keeps that gain where answers come back quickly and
 * stops a CQ whose completions come late from spinning in vain, while the ceiling keeps an idle
 * CQ from costing more than {@link AUTO_SPIN_MAX_MICROS} µs of event loop per wait (a probe, for
 * answers that came within a few times that, spins longer now and then). `"busy"` keeps a core busy, so it is never the default.
 *
 * One consumer per CQ: the functions here call `cq.poll()`, which overwrites the CQ's WC array.
 *
 * @module
 */

import { now } from "../ffi/clock.ts";
import { ClosedError, InvalidArgumentError } from "../types/errors.ts";
import { closeWatchesOf, Poller, watchesOf } from "./poller.ts";
import {
  abortedError,
  checkWaitOptions,
  timedOutError,
  WaitList,
  type WaitOptions,
  yieldToLoop,
} from "./wait.ts";
import { describe } from "../types/check.ts";

/** How to wait for completions. */
export type Strategy = "busy" | "event" | "adaptive";

/** The strategy used when none is given. */
export const DEFAULT_STRATEGY: Strategy = "adaptive";

/** The spin budget a CQ's `"adaptive"` waits start from before one is learnt, in microseconds. */
export const DEFAULT_SPIN_MICROS = 20;

/**
 * The largest spin budget accepted, in microseconds: a spin blocks the event loop, so neither
 * a timeout nor an AbortSignal can end it; 10 ms bounds that.
 */
export const MAX_SPIN_MICROS = 10_000;

/** The most the `"adaptive"` strategy spins on its own (no `spinMicros`), in microseconds. */
export const AUTO_SPIN_MAX_MICROS = 200;

/** How long one `"busy"` slice polls before yielding to the event loop, in microseconds. */
export const BUSY_SLICE_MICROS = 1000;

/**
 * The spin budget of one waiter (a CQ's `"adaptive"` waits, a stream): fixed, or learnt.
 *
 * A learnt budget follows the spins that caught their completion (a "hit" after `d` µs): up at
 * once to a later one, down slowly, with a margin, between {@link DEFAULT_SPIN_MICROS} / 4 and
 * its maximum. A spin that missed shrinks the arrival it learnt, so an idle or slow peer stops
 * costing spins; the budget after a miss is 1.5x that arrival, which after a hit beyond the
 * maximum (a probe's, below) stays above the maximum for a few misses, within the probe limit.
 * Capping it at the maximum was measured slower for two slow peers and no faster in bulk
 * (bench/results/2026-11-27-contention.md), and no better with spins ended by the clock
 * (bench/results/2026-11-28-spin-clock.md), so it is not capped.
 *
 * While at least half of its spins hit (a conversation: the peer answers soon), a learnt budget
 * spins at least four times the process's least recent wake-up ({@link WakeCost}), up to its
 * maximum: a miss there costs this side's wake-up and, because its answer then comes late, the
 * peer's too, each typically about twice the least one. This is the classic spin-then-block rule
 * (spin about as long as blocking costs) with the cost that was measured; it keeps two peers from
 * the state in which each one's wake-up makes the other miss, which a budget learnt from the
 * answers' times alone fell into (bench/results/2026-11-27-spin.md). Once most spins miss (bulk
 * transfers, an idle or thinking peer), the floor is off and the budget shrinks as above.
 *
 * Misses whose wait ended within reach of a spin (at most the probe limit, a few times the
 * maximum) count, and every {@link PROBE_EVERY}th such miss spins that long once: if the answer
 * comes within it, the hit brings the budget back. A wait that ended beyond the probe limit (an
 * idle peer) never makes a probe.
 */
export class SpinBudget {
  // Every field that holds a fraction starts as a number, never undefined: V8 then keeps it as a
  // double stored in place, where a field first seen undefined boxes each double stored into it
  // (a heap number per spin that caught its completion; tests/poller-completions.test.ts).
  /** The budget of the next spin, in microseconds. */
  micros = 0;
  #arrival = 0;
  #reachable = 0;
  /** Whether the budget is fixed (`spinMicros`): then hits and misses change nothing. */
  readonly fixed: boolean;
  readonly #max: number;
  readonly #min: number;
  readonly #probeMax: number;
  readonly #wake: WakeCost;
  /** How often spins hit lately (a moving average, 0..1). */
  #hits = 0;
  /** When the last spin that missed started (the library's clock), or -1; how long it took (µs). */
  #missedAt = -1;
  #spun = 0;
  /** Whether its waiter slept until a wake-up since that miss. */
  #slept = false;

  /**
   * A learnt budget (`fixed` undefined: starting at {@link DEFAULT_SPIN_MICROS}, at most `max`,
   * default {@link AUTO_SPIN_MAX_MICROS}; probes at most `probeMax`, default 5 × `max`; weighs
   * misses by `wake`, default the process's) or a fixed one.
   */
  constructor(
    fixed?: number,
    max: number = AUTO_SPIN_MAX_MICROS,
    probeMax = 5 * max,
    wake: WakeCost = WakeCost.process,
  ) {
    this.#wake = wake;
    this.fixed = fixed !== undefined;
    this.#max = max;
    this.#probeMax = Math.max(max, probeMax);
    this.#min = Math.min(max, DEFAULT_SPIN_MICROS / 4);
    this.micros = this.#arrival = fixed ?? DEFAULT_SPIN_MICROS;
  }

  /** A spin caught its completion `delay` µs after it started. */
  hit(delay: number): void {
    if (this.fixed) return;
    this.#reachable = 0;
    this.#hits += (1 - this.#hits) / 16;
    this.#arrival = delay > this.#arrival
      ? Math.min(delay, this.#probeMax)
      : this.#arrival + (delay - this.#arrival) / 8;
    this.micros = this.#floored(Math.min(this.#max, Math.max(this.#min, this.#arrival * 1.5 + 2)));
  }

  /**
   * A spin ran out: the budget shrinks. `start` (the library's clock) and `spun` (µs) say when
   * it started and how long it took, for {@link SpinBudget.waited}.
   */
  miss(start = -1, spun = 0): void {
    if (this.fixed) return;
    this.#missedAt = start;
    this.#spun = spun;
    this.#slept = false;
    this.#hits -= this.#hits / 16;
    this.#arrival = Math.max(this.#min, this.#arrival * 0.75);
    this.micros = this.#floored(
      Math.min(this.#probeMax, Math.max(this.#min, this.#arrival * 1.5 + 2)),
    );
  }

  /** While most spins hit (a conversation), a budget spins at least four wake-ups' worth. */
  #floored(micros: number): number {
    if (this.#hits < 0.5) return micros;
    const floor = Math.min(this.#max, 4 * this.#wake.micros);
    return micros > floor ? micros : floor;
  }

  /**
   * The wait that followed a miss ended `delay` µs after that spin started; the spin took
   * `spun` µs, and `woke` says whether the wait slept until a wake-up (rather than finding the
   * completion when it armed: then it tells nothing of wake-ups). Within the probe limit, every
   * {@link PROBE_EVERY}th such wait makes the next spin last that long (a probe).
   */
  late(delay: number, spun: number, woke: boolean): void {
    if (this.fixed || delay > this.#probeMax) return;
    if (woke) this.#wake.note(delay - spun);
    if (++this.#reachable % PROBE_EVERY === 0) {
      this.micros = Math.min(this.#probeMax, Math.max(this.micros, delay * 1.25));
    }
  }

  /** The waiter slept and the event loop woke it up now (no clock read: a flag). */
  woke(): void {
    this.#slept = true;
  }

  /** The wait after the last missed spin ended now: {@link SpinBudget.late} with its figures. */
  waited(): void {
    const at = this.#missedAt;
    if (at < 0) return;
    this.#missedAt = -1;
    this.late((now() - at) * 1000, this.#spun, this.#slept);
  }
}

/**
 * What a wake-up costs lately, in µs: the least time a missed wait lasted beyond its spin, over
 * the last one or two windows of {@link WakeCost.WINDOW} such waits (a minimum, because each
 * such wait is the answer's lateness plus the wake-up). One per process ({@link WakeCost.process}):
 * the cost is the event loop's.
 */
export class WakeCost {
  /** How many waits one window holds. */
  static readonly WINDOW = 32;
  /** The process's estimate, shared by every spin budget. */
  static readonly process: WakeCost = new WakeCost();
  #least = Infinity;
  #leastBefore = Infinity;
  #seen = 0;

  /** The estimate in µs (Infinity before the first wait). */
  get micros(): number {
    return this.#least < this.#leastBefore ? this.#least : this.#leastBefore;
  }

  /** A missed wait slept `micros` µs beyond its spin. */
  note(micros: number): void {
    if (micros < this.#least) this.#least = micros;
    if (++this.#seen === WakeCost.WINDOW) {
      this.#leastBefore = this.#least;
      this.#least = Infinity;
      this.#seen = 0;
    }
  }
}

/** A learnt spin budget probes once per this many missed waits that ended within reach. */
export const PROBE_EVERY = 4;

/**
 * A spin polls up to this many times between clock reads (one call, `poll(max, tries)`, whose
 * tries loop in native code where the runtime can: an empty poll there costs what C's does, about
 * 0.1 µs in the emulated guest and tens of nanoseconds on hardware, so a spin ends at most that
 * many polls past its budget), reads the clock after its first pass, and ends at the first read
 * past its budget. Spins used to count passes, each worth a moving average of the passes'
 * measured cost; a spin during which the process was preempted raised that average, so in the
 * guest, preempted about once per round trip, spins ended after a fifth to a third of their budget
 * (bench/results/2026-11-27-spin.md). By the clock a spin lasts its budget, whatever preempted it;
 * after a preemption the poll comes before the clock read, so an answer that came meanwhile is
 * still caught (bench/results/2026-11-28-spin-clock.md).
 */
export const SPIN_CLOCK_EVERY = 64;

/** Throws unless `spinMicros` is a valid spin budget. */
export function checkSpinMicros(spinMicros: unknown): void {
  if (
    spinMicros !== undefined &&
    !(typeof spinMicros === "number" && spinMicros >= 0 && spinMicros <= MAX_SPIN_MICROS)
  ) {
    throw new InvalidArgumentError(
      `spinMicros must be 0..${MAX_SPIN_MICROS} (the spin blocks the event loop), got ${
        describe(spinMicros)
      }`,
    );
  }
}

/** A completion channel as the poller sees it (the verbs `CompletionChannel` is one). */
export interface CompletionChannelLike {
  /** The O_NONBLOCK channel fd. */
  readonly fd: number;
  /** Reads one CQ event (the CQ object that fired) or null on EAGAIN; counts it for acking. */
  getEvent(): unknown | null;
  /**
   * Acks every counted event now. The poller never calls it: acks are batched by the channel
   * and flushed by its owner before a CQ or the channel is destroyed.
   */
  flushAcks?(): void;
}

/** A CQ as the poller sees it (structural: the verbs `CompletionQueue`). */
export interface CompletionSource {
  /**
   * Polls up to `max` completions into the CQ's WC array, up to `tries` polls while nothing
   * arrives (a busy poll, in native code where the runtime can); returns how many.
   */
  poll(max?: number, tries?: number): number;
  /** Arms the CQ for one channel event (next completion, or next solicited one). */
  requestNotify(solicitedOnly?: boolean): void;
  /** The completion channel, or null (then only `"busy"` works). */
  readonly channel: CompletionChannelLike | null;
}

/** Options of a completion wait. */
export interface CompletionWaitOptions extends WaitOptions {
  /** Waiting strategy (default {@link DEFAULT_STRATEGY}). */
  strategy?: Strategy;
  /**
   * A fixed spin budget of `"adaptive"` in microseconds, 0..{@link MAX_SPIN_MICROS}. Without it the
   * budget is learnt per CQ (starting at {@link DEFAULT_SPIN_MICROS}, at most
   * {@link AUTO_SPIN_MAX_MICROS}). With `"busy"`: the length of one polling slice (default
   * {@link BUSY_SLICE_MICROS}).
   */
  spinMicros?: number;
  /** Arm for solicited completions only (`"event"`/`"adaptive"`). */
  solicitedOnly?: boolean;
  /** Largest batch one poll may return (passed to `cq.poll`). */
  max?: number;
  /** The poller to wait through (default {@link Poller.default}). */
  poller?: Poller;
}

interface CqState {
  /** The adaptive spin budget learnt from when completions arrived. */
  readonly budget: SpinBudget;
  armed: boolean;
  armedSolicited: boolean;
  waits: WaitList | null;
  poller: Poller | null;
  stopListening: (() => void) | null;
  closed: Error | null;
}

/**
 * The wait state of each CQ that was waited on, until its waits are cancelled; then the CQ's entry
 * moves to `cancelled` with the reason given (null: closed, a fresh ClosedError per wait). No value
 * reaches its CQ once cancelled: V8's young-generation collector keeps a weak map's value - and
 * all it reaches - alive until a full collection (docs/06-lifetimes.md).
 */
const states = new WeakMap<object, CqState>();
const cancelled = new WeakMap<object, Error | null>();

/** Why waits on `cq` fail now, or undefined while they may still wait. */
function cancelReason(cq: CompletionSource): Error | undefined {
  const r = cancelled.get(cq);
  return r === undefined ? undefined : r ?? new ClosedError("CompletionQueue");
}

function stateOf(cq: CompletionSource): CqState {
  let s = states.get(cq);
  if (!s) {
    s = {
      budget: new SpinBudget(),
      armed: false,
      armedSolicited: false,
      waits: null,
      poller: null,
      stopListening: null,
      closed: null,
    };
    states.set(cq, s);
  }
  return s;
}

/** Drains a channel until EAGAIN and wakes the waiters of every CQ that fired. */
function drainChannel(channel: CompletionChannelLike): void {
  // an edge reported just as the channel was closed (its owner should have unwatched it)
  if ((channel as { closed?: boolean }).closed === true) return closeWatchesOf(channel);
  for (let cq = channel.getEvent(); cq !== null; cq = channel.getEvent()) {
    const s = typeof cq === "object" ? states.get(cq as object) : undefined;
    if (!s) continue;
    s.armed = false;
    if (s.waits && s.waits.size > 0) s.waits.resolveAll();
  }
}

/**
 * Watches a completion channel's fd (once per channel). The channel owns the watch: its owner
 * calls `closeWatchesOf(channel)` before the channel is destroyed (the verbs layer does).
 */
function watchChannel(channel: CompletionChannelLike, poller: Poller): void {
  for (const w of watchesOf(channel)) {
    if (w.poller !== poller) {
      throw new InvalidArgumentError(
        "this completion channel is already watched by another poller",
      );
    }
    return;
  }
  poller.registerOwned(channel, channel.fd, () => drainChannel(channel));
}

/**
 * Settles every pending completion wait on `cq` with `reason` (default ClosedError) and makes
 * later waits fail the same way. Call it when the CQ closes (the verbs layer does).
 */
export function cancelCompletionWaits(cq: CompletionSource, reason?: Error): void {
  cancelled.set(cq, reason ?? null);
  const s = states.get(cq);
  if (!s) return;
  states.delete(cq);
  // waits in flight hold `s` and see this when they resume
  s.closed = reason ?? new ClosedError("CompletionQueue");
  s.waits?.rejectAll(s.closed);
  s.waits = null;
  s.poller = null;
  s.stopListening?.();
  s.stopListening = null;
}

function checkStrategy(strategy: Strategy, cq: CompletionSource): void {
  if (strategy !== "busy" && strategy !== "event" && strategy !== "adaptive") {
    throw new InvalidArgumentError(
      `unknown strategy ${describe(strategy)} (busy, event or adaptive)`,
    );
  }
  if (strategy !== "busy" && !cq.channel) {
    throw new InvalidArgumentError(
      `strategy "${strategy}" needs a CQ created with a completion channel (or use "busy")`,
    );
  }
}

/**
 * Waits until `cq` has completions and polls them: resolves with how many were polled into the
 * CQ's WC array (read them with the CQ's accessor, e.g. `cq.completion(i)`, before the next
 * poll). Rejects with AbortedError on abort/timeout, ClosedError when the CQ is closed.
 */
export function awaitCompletions(
  cq: CompletionSource,
  options: CompletionWaitOptions = {},
): Promise<number> {
  if (typeof options !== "object" || options === null) {
    return Promise.reject(new InvalidArgumentError("wait options must be an object"));
  }
  const strategy = options.strategy ?? DEFAULT_STRATEGY;
  const closed = cancelReason(cq);
  if (closed) return Promise.reject(closed);
  const s = stateOf(cq);
  try {
    checkWaitOptions(options);
    if (options.poller !== undefined && !(options.poller instanceof Poller)) {
      throw new InvalidArgumentError("poller must be a Poller");
    }
    checkStrategy(strategy, cq);
    // fast path: completions are already there
    const got = cq.poll(options.max);
    if (got > 0) return Promise.resolve(got);
    const fixed = options.spinMicros;
    checkSpinMicros(fixed);
    if (strategy === "adaptive") {
      const learn = fixed === undefined ? s.budget : null;
      const n = spinPoll(cq, options.max, fixed ?? s.budget.micros, learn);
      if (n > 0) return Promise.resolve(n);
      return eventWait(cq, s, options);
    }
    if (strategy === "busy") {
      const slice = fixed ?? BUSY_SLICE_MICROS;
      const n = spinPoll(cq, options.max, slice, null);
      return n > 0 ? Promise.resolve(n) : busyWait(cq, s, options, slice);
    }
  } catch (e) {
    return Promise.reject(e);
  }
  return eventWait(cq, s, options);
}

/**
 * Polls until completions arrive or `micros` µs have passed; how many. It starts with a pass of
 * {@link SPIN_CLOCK_EVERY} polls (its callers have just polled once, or yielded) and reads the clock
 * only after a pass that found nothing: a spin its first pass satisfies reads no clock. `learn`, when
 * given, hears how long the spin took (0 when the first pass ended it).
 */
function spinPoll(
  cq: CompletionSource,
  max: number | undefined,
  micros: number,
  learn: SpinBudget | null,
): number {
  let n = cq.poll(max, SPIN_CLOCK_EVERY);
  if (n > 0) {
    learn?.hit(0);
    return n;
  }
  const start = now();
  const end = start + micros / 1000;
  for (let t = start; t < end; t = now()) {
    n = cq.poll(max, SPIN_CLOCK_EVERY);
    if (n > 0) break;
  }
  if (learn) {
    const spun = (now() - start) * 1000;
    if (n > 0) learn.hit(spun);
    else learn.miss(start, spun);
  }
  return n;
}

/** Busy slices: poll for `slice` µs, then yield one event-loop turn, until completions arrive. */
async function busyWait(
  cq: CompletionSource,
  s: CqState,
  options: CompletionWaitOptions,
  slice: number,
): Promise<number> {
  const { signal, timeout, max } = options;
  const deadline = timeout === undefined ? Infinity : now() + timeout;
  for (;;) {
    await yieldToLoop();
    if (s.closed) throw s.closed;
    if (signal?.aborted) throw abortedError(signal);
    const n = spinPoll(cq, max, slice, null);
    if (n > 0) return n;
    // a wait without a timeout reads no clock between slices
    if (timeout !== undefined && now() >= deadline) {
      throw timedOutError("completion wait", timeout);
    }
  }
}

/**
 * Arms, drains, waits (telling the CQ's spin budget how the wait after a missed spin went). Its
 * callers have just polled the CQ empty: while the CQ is still armed from an earlier wait, a
 * completion after that poll raises the channel's event, so only a fresh arm needs the drain.
 */
async function eventWait(
  cq: CompletionSource,
  s: CqState,
  options: CompletionWaitOptions,
): Promise<number> {
  const poller = options.poller ?? s.poller ?? Poller.default();
  if (poller.closed) throw new ClosedError("Poller");
  if (s.poller !== poller || !s.waits) {
    s.stopListening?.();
    s.poller = poller;
    const waits = s.waits = new WaitList(poller);
    s.stopListening = poller.onClose((e) => waits.rejectAll(e));
  }
  watchChannel(cq.channel!, poller);
  const solicited = options.solicitedOnly ?? false;
  const max = options.max;
  // a wait's timeout counts from here, over empty wake-ups; without one no clock is read
  const since = options.timeout === undefined ? 0 : now();
  for (let drained = true;; drained = false) {
    // arm -> drain -> wait
    if (!s.armed || (s.armedSolicited && !solicited)) {
      cq.requestNotify(solicited);
      s.armed = true;
      s.armedSolicited = solicited;
      drained = false;
    }
    if (!drained) {
      const n = cq.poll(max);
      if (n > 0) {
        s.budget.waited();
        return n;
      }
    }
    // every round of the loop keeps the first round's deadline
    await s.waits.add(options, undefined, "completion wait", since);
    s.budget.woke();
    if (s.closed) throw s.closed;
  }
}

/**
 * Completions of `cq` as an async iterable of batch sizes: each step polled `n > 0` completions
 * into the CQ's WC array; read them before the next step. Ends when the CQ is closed; an
 * abort or timeout (per wait) throws AbortedError out of the loop.
 */
export async function* completions(
  cq: CompletionSource,
  options: CompletionWaitOptions = {},
): AsyncGenerator<number, void, undefined> {
  for (;;) {
    let n: number;
    try {
      n = await awaitCompletions(cq, options);
    } catch (e) {
      if (e instanceof ClosedError) return;
      throw e;
    }
    yield n;
  }
}
