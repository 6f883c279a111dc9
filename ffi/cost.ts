/**
 * Operation cost counters: what one operation costs in FFI calls (by symbol), polls that found
 * nothing, event-loop wake-ups of the poller, yields to the event loop, timers started and waits
 * (the promises the library makes to wait). The counts do not depend on the machine, so they show
 * where a path differs from C's (rsocket, perftest) whatever the timing noise.
 *
 * Counting is chosen once, when this module loads: with `RDMA_VERBS_COUNT=1` in the environment
 * the loader binds an instrumented copy of every symbol table and prepared call; otherwise the
 * plain ones, and every counting site is behind the constant {@link COUNTING}, which the engines
 * fold away. So counting off costs nothing on the hot paths.
 *
 * @module
 */

/** True when this process counts operation costs (`RDMA_VERBS_COUNT=1` at load). */
export const COUNTING: boolean = countingRequested();

function countingRequested(): boolean {
  const name = "RDMA_VERBS_COUNT";
  try {
    const deno = (globalThis as { Deno?: typeof Deno }).Deno;
    if (deno) {
      if (deno.permissions.querySync({ name: "env", variable: name }).state !== "granted") {
        return false;
      }
      return deno.env.get(name) === "1";
    }
    const proc = (globalThis as { process?: { env: Record<string, string | undefined> } }).process;
    return proc?.env[name] === "1";
  } catch {
    return false;
  }
}

/** A snapshot of the cost counters (see {@link costCounts}). */
export interface CostCounts {
  /**
   * FFI calls by C symbol (function pointers by their `ops` name, e.g. `poll_cq`). A
   * `cq.poll(max, tries)` whose tries loop in native code is one call, however many polls it made.
   */
  readonly calls: Readonly<Record<string, number>>;
  /**
   * Time spent inside those calls by symbol, in microseconds (measured around each call: it
   * depends on the machine, unlike the counts, and includes the clock's own cost).
   */
  readonly callMicros: Readonly<Record<string, number>>;
  /** All FFI calls. */
  readonly ffiCalls: number;
  /** CQ poll calls that returned no completion (a native retry's counts once). */
  readonly emptyPolls: number;
  /** Times the poller woke the JS thread with ready fds (one event-loop turn each). */
  readonly wakes: number;
  /** Yields to the event loop (`setImmediate`) the library made. */
  readonly yields: number;
  /** Timers the library started (`setTimeout`). */
  readonly timers: number;
  /** Waits the library created (each is a promise that settles later). */
  readonly waits: number;
}

/** The live counters (module-private to the library: the counting sites increment them). */
export const costs: {
  emptyPolls: number;
  wakes: number;
  yields: number;
  timers: number;
  waits: number;
} = {
  emptyPolls: 0,
  wakes: 0,
  yields: 0,
  timers: 0,
  waits: 0,
};

// Calls and the µs in them, by slot: one slot per name, taken when a counted function is made.
// Typed arrays, so that a count allocates nothing (a Map holding a fraction would box it on every
// update, which the cost accounts' heap rows would then report as the library's).
const slotOf = new Map<string, number>();
const slotNames: string[] = [];
let slotCalls = new Float64Array(32);
let slotMicros = new Float64Array(32);

/** The counter slot of FFI calls named `name` (made on first use), for {@link countCallAt}. */
export function costSlot(name: string): number {
  let slot = slotOf.get(name);
  if (slot !== undefined) return slot;
  slot = slotNames.length;
  slotNames.push(name);
  slotOf.set(name, slot);
  if (slot === slotCalls.length) {
    const calls = new Float64Array(slot * 2), micros = new Float64Array(slot * 2);
    calls.set(slotCalls);
    micros.set(slotMicros);
    slotCalls = calls;
    slotMicros = micros;
  }
  return slot;
}

/** Counts one FFI call of the slot's name that took `ms` milliseconds (allocates nothing). */
export function countCallAt(slot: number, ms: number): void {
  slotCalls[slot]++;
  slotMicros[slot] += ms * 1000;
}

/**
 * The cost counters since the start or the last {@link resetCostCounts}. All zero unless the
 * process was started with `RDMA_VERBS_COUNT=1` ({@link COUNTING}).
 */
export function costCounts(): CostCounts {
  const calls: Record<string, number> = {};
  const callMicros: Record<string, number> = {};
  let ffiCalls = 0;
  const slots = [...slotNames.keys()].filter((slot) => slotCalls[slot] > 0)
    .sort((a, b) => slotNames[a] < slotNames[b] ? -1 : 1);
  for (const slot of slots) {
    calls[slotNames[slot]] = slotCalls[slot];
    callMicros[slotNames[slot]] = Math.round(slotMicros[slot]);
    ffiCalls += slotCalls[slot];
  }
  const { emptyPolls, wakes, yields, timers, waits } = costs;
  return { calls, callMicros, ffiCalls, emptyPolls, wakes, yields, timers, waits };
}

/** Sets every cost counter to zero. */
export function resetCostCounts(): void {
  slotCalls.fill(0);
  slotMicros.fill(0);
  costs.emptyPolls =
    costs.wakes =
    costs.yields =
    costs.timers =
    costs.waits =
      0;
}

/** `f`, counting each call under `name` (its slot taken once, here). */
export function timedCall(
  f: (...a: never[]) => unknown,
  name: string,
): (...a: unknown[]) => unknown {
  const slot = costSlot(name);
  const g = f as (...a: unknown[]) => unknown;
  // `apply` with `arguments` passes the call's own arguments without making an array of them (a
  // rest parameter does, in every call with arguments) and keeps their count exact
  return function (this: unknown) {
    const t = performance.now();
    const r = g.apply(undefined, arguments as unknown as unknown[]);
    countCallAt(slot, performance.now() - t);
    return r;
  };
}

/**
 * Wraps every function of a bound library so that each call is counted under its name; each
 * function is taken from `lib` on its first use (a loader may bind symbols lazily).
 */
export function countedLibrary<L extends object>(lib: L): L {
  const out = {} as Record<string, unknown>;
  for (const name of Object.keys(lib)) {
    Object.defineProperty(out, name, {
      configurable: true,
      enumerable: true,
      get() {
        const f = (lib as Record<string, unknown>)[name];
        const v = typeof f === "function" ? timedCall(f as (...a: unknown[]) => unknown, name) : f;
        Object.defineProperty(out, name, { value: v, enumerable: true });
        return v;
      },
    });
  }
  return out as L;
}
