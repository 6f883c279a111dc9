/**
 * Wake-up latency through the poller vs a C thread blocked in `epoll_wait`, on the host.
 * A C writer thread writes an eventfd at random gaps (200–600 µs); the waiter stamps the time
 * it woke. Prints median and p99 for C and for this runtime, and their ratios.
 *
 *   deno run -A bench/wakeup.ts [iterations]    bun bench/wakeup.ts [iterations]
 */
import process from "node:process";
import { execFileSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { native } from "../ffi/native.ts";
import { Poller } from "../poller/mod.ts";

const iters = Number(process.argv[process.argv[0].endsWith("ts") ? 1 : 2] ?? 2000) || 2000;
const isBun = "Bun" in globalThis;

const src = fileURLToPath(new URL("./c/wakeup.c", import.meta.url).href);
const so = join(mkdtempSync(join(tmpdir(), "wakeup-")), "libwakeup.so");
execFileSync("cc", ["-O2", "-shared", "-fPIC", "-pthread", "-o", so, src]);

interface Lib {
  wk_start(fd: number, iters: number, min: number, max: number): number;
  wk_woken(i: number): void;
  wk_join(): number;
  wk_latency(i: number): number;
  wk_c_baseline(iters: number, min: number, max: number): number;
}
const defs = {
  wk_start: { args: ["i32", "i32", "i32", "i32"], result: "i32" },
  wk_woken: { args: ["i32"], result: "void" },
  wk_join: { args: [], result: "i32" },
  wk_latency: { args: ["i32"], result: "f64" },
  wk_c_baseline: { args: ["i32", "i32", "i32"], result: "i32" },
} as const;

async function open(): Promise<Lib> {
  if (isBun) {
    const ffi = await import("bun:ffi");
    const bunDefs: Record<string, { args: string[]; returns: string }> = {};
    for (const [k, v] of Object.entries(defs)) {
      bunDefs[k] = { args: [...v.args], returns: v.result };
    }
    return ffi.dlopen(so, bunDefs as never).symbols as unknown as Lib;
  }
  const denoDefs: Record<string, Deno.ForeignFunction> = {};
  for (const [k, v] of Object.entries(defs)) {
    denoDefs[k] = { parameters: [...v.args], result: v.result } as Deno.ForeignFunction;
  }
  return Deno.dlopen(so, denoDefs).symbols as unknown as Lib;
}

function stats(lib: Lib, n: number) {
  const xs = Array.from({ length: n }, (_, i) => lib.wk_latency(i) / 1000).sort((a, b) => a - b);
  return { median: xs[Math.floor(n / 2)], p99: xs[Math.floor(n * 0.99)] };
}

const lib = await open();
const MIN = 200, MAX = 600;

lib.wk_c_baseline(iters, MIN, MAX);
const c = stats(lib, iters);

const n = native();
const efd = n.libc.eventfd(0, 0x800);
const cell = n.alloc(8, 8);
const poller = Poller.default();
const watch = poller.register(efd);
lib.wk_start(efd, iters, MIN, MAX);
for (let i = 0; i < iters; i++) {
  await watch.readable();
  lib.wk_woken(i);
  while (Number(n.libc.read(efd, cell, 8)) === 8) { /* drain */ }
}
lib.wk_join();
const js = stats(lib, iters);
watch.close();
poller.close();

const rt = isBun ? "bun" : "deno";
const f = (x: number) => x.toFixed(1).padStart(8);
console.log(`wake-up latency, ${iters} wakes, gaps ${MIN}-${MAX} µs (µs)      median      p99`);
console.log(`C epoll_wait thread                                   ${f(c.median)} ${f(c.p99)}`);
console.log(`${rt} poller (${poller.backend})`.padEnd(54) + `${f(js.median)} ${f(js.p99)}`);
console.log(
  `ratio ${rt}/C`.padEnd(54) +
    `${(js.median / c.median).toFixed(2).padStart(8)} ${(js.p99 / c.p99).toFixed(2).padStart(8)}`,
);
