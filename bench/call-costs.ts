/**
 * What the calls a spin is made of cost on the running runtime and device: an empty `cq.poll()`
 * (one FFI call into the provider), `cq.poll(max, tries)` with 2 and 64 tries (the polls loop in
 * native code where the runtime can), the library's clock (`now()`, `clock_gettime` through the
 * FFI) and `performance.now()`. Three rounds, each call timed over a loop of many (the first round
 * includes the engines' warm-up); µs per call.
 *
 *   deno run -A bench/call-costs.ts [DEVICE]      bun bench/call-costs.ts [DEVICE]
 *
 * DEVICE defaults to $RDMA_DEVICE or rxe0 (e.g. inside the soft-RoCE guest).
 */

import process from "node:process";
import { openDevice } from "../verbs/mod.ts";
import { now } from "../ffi/clock.ts";

const device = process.argv[2] ?? process.env.RDMA_DEVICE ?? "rxe0";
const N = 100_000;
const runtime = "Bun" in globalThis ? "bun" : "deno";

function time(name: string, f: () => unknown, n = N): void {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) f();
  const us = (performance.now() - t0) * 1000 / n;
  console.log(`${runtime} ${name.padEnd(20)} ${us.toFixed(3).padStart(8)} µs/call`);
}

using ctx = openDevice(device);
using cq = ctx.createCq({ cqe: 128 });
const max = cq.pollBatch;
for (let round = 1; round <= 3; round++) {
  console.log(`round ${round} (${device})`);
  time("poll()", () => cq.poll());
  time("poll(max, 2)", () => cq.poll(max, 2));
  time("poll(max, 64)", () => cq.poll(max, 64), N / 10);
  time("now()", () => now());
  time("performance.now()", () => performance.now());
}
