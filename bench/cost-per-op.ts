/**
 * The cost counters (`RDMA_VERBS_COUNT=1`) per operation, for the benches' cost accounts: every
 * bench divides the counts since its last `resetCostCounts()` by its operations the same way.
 *
 * @module
 */

import { type CostCounts, costCounts } from "../mod.ts";

/** What one operation cost: the library's counters, each divided by the operations. */
export type CostPerOp = CostCounts;

/** The counts since the last reset divided by `ops`, rounded to 0.001. */
export function costsPerOperation(ops: number): CostPerOp {
  const c = costCounts();
  const per = (v: number) => Math.round((v / ops) * 1000) / 1000;
  const each = (r: Record<string, number>) => {
    const out: Record<string, number> = {};
    for (const [k, v] of Object.entries(r)) out[k] = per(v);
    return out;
  };
  return {
    calls: each(c.calls),
    callMicros: each(c.callMicros),
    ffiCalls: per(c.ffiCalls),
    emptyPolls: per(c.emptyPolls),
    wakes: per(c.wakes),
    yields: per(c.yields),
    timers: per(c.timers),
    waits: per(c.waits),
  };
}

/** One line of `name count` pairs: the calls, the µs in them (`withMicros`), then the counts. */
export function costLine(c: CostPerOp, withMicros = false): string {
  const { calls, callMicros, ffiCalls: _, ...counts } = c;
  return [
    ...Object.entries(calls).map(([k, v]) => `${k} ${v}`),
    ...(withMicros ? Object.entries(callMicros).map(([k, v]) => `µs in ${k} ${v}`) : []),
    ...Object.entries(counts).map(([k, v]) => `${k} ${v}`),
  ].join(", ");
}
