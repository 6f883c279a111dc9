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
  /** FFI calls by C symbol (function pointers by their `ops` name, e.g. `poll_cq`). */
  readonly calls: Readonly<Record<string, number>>;
  /**
   * Time spent inside those calls by symbol, in microseconds (measured around each call: it
   * depends on the machine, unlike the counts, and includes the clock's own cost).
   */
  readonly callMicros: Readonly<Record<string, number>>;
  /** All FFI calls. */
  readonly ffiCalls: number;
  /** CQ polls that returned no completion. */
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
  calls: Map<string, number>;
  micros: Map<string, number>;
  emptyPolls: number;
  wakes: number;
  yields: number;
  timers: number;
  waits: number;
} = {
  calls: new Map(),
  micros: new Map(),
  emptyPolls: 0,
  wakes: 0,
  yields: 0,
  timers: 0,
  waits: 0,
};

/** Counts one FFI call of `name` that took `ms` milliseconds. */
export function countCall(name: string, ms: number): void {
  costs.calls.set(name, (costs.calls.get(name) ?? 0) + 1);
  costs.micros.set(name, (costs.micros.get(name) ?? 0) + ms * 1000);
}

/**
 * The cost counters since the start or the last {@link resetCostCounts}. All zero unless the
 * process was started with `RDMA_VERBS_COUNT=1` ({@link COUNTING}).
 */
export function costCounts(): CostCounts {
  const calls: Record<string, number> = {};
  const callMicros: Record<string, number> = {};
  let ffiCalls = 0;
  for (const [k, v] of [...costs.calls].sort((a, b) => a[0] < b[0] ? -1 : 1)) {
    calls[k] = v;
    callMicros[k] = Math.round(costs.micros.get(k) ?? 0);
    ffiCalls += v;
  }
  const { emptyPolls, wakes, yields, timers, waits } = costs;
  return { calls, callMicros, ffiCalls, emptyPolls, wakes, yields, timers, waits };
}

/** Sets every cost counter to zero. */
export function resetCostCounts(): void {
  costs.calls.clear();
  costs.micros.clear();
  costs.emptyPolls =
    costs.wakes =
    costs.yields =
    costs.timers =
    costs.waits =
      0;
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
        const v = typeof f === "function"
          ? (...args: unknown[]) => {
            const t = performance.now();
            const r = (f as (...a: unknown[]) => unknown)(...args);
            countCall(name, performance.now() - t);
            return r;
          }
          : f;
        Object.defineProperty(out, name, { value: v, enumerable: true });
        return v;
      },
    });
  }
  return out as L;
}
