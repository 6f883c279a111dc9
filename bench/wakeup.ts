/**
 * Wake-up latency through the poller's default waiter vs a C thread blocked in `epoll_wait`, on
 * the host. A C writer thread writes an eventfd at random gaps (200–600 µs); the waiter stamps
 * the time it woke. Prints median and p99 for C and for this runtime, and their ratios. One
 * run of each; `waiters.ts` compares every candidate in interleaved rounds.
 *
 *   deno run -A bench/wakeup.ts [iterations] [waiter-kind]
 *   bun bench/wakeup.ts [iterations] [waiter-kind]
 */
import process from "node:process";
import { native } from "../ffi/native.ts";
import { useWaiter } from "../ffi/wait.ts";
import { Poller } from "../poller/mod.ts";
import { isBun, latencies, numberArg, openWakeupLib, quantile, runtimeName } from "./wakeup-lib.ts";

const iters = numberArg(0, 2000);
const kind = (isBun ? process.argv.slice(2) : Deno.args)[1];
const MIN = 200, MAX = 600;
const lib = await openWakeupLib();

function stats() {
  const xs = latencies(lib, iters);
  return { median: quantile(xs, 0.5), p99: quantile(xs, 0.99) };
}

lib.wk_c_baseline(iters, MIN, MAX);
const c = stats();

const n = native();
const efd = n.libc.eventfd(0, 0x800);
const cell = n.alloc(8, 8);
if (kind) useWaiter(kind);
const poller = new Poller();
useWaiter();
const watch = poller.register(efd);
lib.wk_start(efd, iters, MIN, MAX);
for (let i = 0; i < iters; i++) {
  await watch.readable();
  lib.wk_stamp(i);
  // drain, then ack: the next write must not be drained with this one (its edge would be gone)
  while (Number(n.libc.read(efd, cell, 8)) === 8) { /* drain */ }
  lib.wk_ack(i);
}
lib.wk_join();
const js = stats();
watch.close();
poller.close();

const f = (x: number) => x.toFixed(1).padStart(8);
console.log(`wake-up latency, ${iters} wakes, gaps ${MIN}-${MAX} µs (µs)      median      p99`);
console.log(`C epoll_wait thread                                   ${f(c.median)} ${f(c.p99)}`);
console.log(
  `${runtimeName} poller (${poller.backend})`.padEnd(54) + `${f(js.median)} ${f(js.p99)}`,
);
console.log(
  `ratio ${runtimeName}/C`.padEnd(54) +
    `${(js.median / c.median).toFixed(2).padStart(8)} ${(js.p99 / c.p99).toFixed(2).padStart(8)}`,
);
