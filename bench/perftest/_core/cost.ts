/**
 * The cost account of one measured loop: with `RDMA_VERBS_COUNT=1` in the environment, each run
 * prints on stderr what one iteration cost (FFI calls by symbol, polls that found nothing,
 * poller wake-ups, yields, timers, waits) as one `cost` JSON line that bench/cost.ts reads.
 *
 * @module
 */

import { COST_COUNTING, costCounts, resetCostCounts } from "../../../mod.ts";
import type { Settings } from "./cli.ts";

/** Runs one measured loop; with counting on, prints its cost per iteration. */
export async function counted<T>(s: Settings, size: number, run: () => Promise<T>): Promise<T> {
  if (!COST_COUNTING) return run();
  resetCostCounts();
  const r = await run();
  const c = costCounts();
  const per = (v: number) => Math.round((v / s.iters) * 1000) / 1000;
  const calls: Record<string, number> = {};
  for (const [k, v] of Object.entries(c.calls)) calls[k] = per(v);
  console.error(
    "cost " + JSON.stringify({
      tool: s.tool.name,
      size,
      iters: s.iters,
      perIteration: {
        calls,
        ffiCalls: per(c.ffiCalls),
        emptyPolls: per(c.emptyPolls),
        wakes: per(c.wakes),
        yields: per(c.yields),
        timers: per(c.timers),
        waits: per(c.waits),
      },
    }),
  );
  return r;
}
