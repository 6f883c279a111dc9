/**
 * The cost account of one measured loop: with `RDMA_VERBS_COUNT=1` in the environment, each run
 * prints on stderr what one iteration cost (FFI calls by symbol, polls that found nothing,
 * poller wake-ups, yields, timers, waits) as one `cost` JSON line that bench/compare.ts reads.
 *
 * @module
 */

import { COST_COUNTING, resetCostCounts } from "../../../mod.ts";
import { costsPerOperation } from "../../cost-per-op.ts";
import type { Settings } from "./cli.ts";

/** Runs one measured loop; with counting on, prints its cost per iteration. */
export async function counted<T>(s: Settings, size: number, run: () => Promise<T>): Promise<T> {
  if (!COST_COUNTING) return run();
  resetCostCounts();
  const r = await run();
  const { callMicros: _, ...perIteration } = costsPerOperation(s.iters);
  console.error(
    "cost " + JSON.stringify({ tool: s.tool.name, size, iters: s.iters, perIteration }),
  );
  return r;
}
