/**
 * Shared parts of the wake-up benches (`wakeup.ts`, `waiters.ts`): builds `c/wakeup.c` (a C
 * writer thread that writes an fd at random gaps and stamps each write, and the C baseline: a
 * thread blocked in `epoll_wait`) with the system compiler and opens it in either runtime.
 */
import process from "node:process";
import { execFileSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The running runtime. */
export const isBun = "Bun" in globalThis;
/** `"bun"` or `"deno"`. */
export const runtimeName: string = isBun ? "bun" : "deno";

/** The helper library's calls. */
export interface WakeupLib {
  /** Starts the writer thread on `fd`: `iters` writes of 8 bytes, gaps in [min, max] µs. */
  wk_start(fd: number, iters: number, min: number, max: number): number;
  /** The waiter woke for write `i` (stamps it; the writer goes on): `wk_stamp` + `wk_ack`. */
  wk_woken(i: number): void;
  /** Stamps the wake for write `i`. */
  wk_stamp(i: number): void;
  /** Lets the writer send write `i + 1` (after its gap). Ack after draining the fd. */
  wk_ack(i: number): void;
  /** Joins the writer thread. */
  wk_join(): number;
  /** Latency of write `i` in ns. */
  wk_latency(i: number): number;
  /** The C baseline: a thread blocked in `epoll_wait` on an eventfd, `iters` wakes. */
  wk_c_baseline(iters: number, min: number, max: number): number;
}

const DEFS = {
  wk_start: { args: ["i32", "i32", "i32", "i32"], result: "i32" },
  wk_woken: { args: ["i32"], result: "void" },
  wk_stamp: { args: ["i32"], result: "void" },
  wk_ack: { args: ["i32"], result: "void" },
  wk_join: { args: [], result: "i32" },
  wk_latency: { args: ["i32"], result: "f64" },
  wk_c_baseline: { args: ["i32", "i32", "i32"], result: "i32" },
} as const;

/** Compiles `c/<name>.c` into a shared library in a fresh temp dir; returns its path. */
export function buildC(name: string): string {
  const src = fileURLToPath(new URL(`./c/${name}.c`, import.meta.url).href);
  const so = join(mkdtempSync(join(tmpdir(), `${name}-`)), `lib${name}.so`);
  execFileSync("cc", ["-O2", "-shared", "-fPIC", "-pthread", "-o", so, src]);
  return so;
}

/** Opens `so` with `defs` (`args`/`result` in the neutral form) in the running runtime. */
export async function openLib<T>(
  so: string,
  defs: Record<string, { readonly args: readonly string[]; readonly result: string }>,
): Promise<T> {
  if (isBun) {
    const ffi = await import("bun:ffi");
    const bunDefs: Record<string, { args: string[]; returns: string }> = {};
    for (const [k, v] of Object.entries(defs)) {
      bunDefs[k] = { args: [...v.args], returns: v.result };
    }
    return ffi.dlopen(so, bunDefs as never).symbols as unknown as T;
  }
  const denoDefs: Record<string, Deno.ForeignFunction> = {};
  for (const [k, v] of Object.entries(defs)) {
    denoDefs[k] = { parameters: [...v.args], result: v.result } as Deno.ForeignFunction;
  }
  return Deno.dlopen(so, denoDefs).symbols as unknown as T;
}

/** Builds and opens the writer/baseline library. */
export function openWakeupLib(): Promise<WakeupLib> {
  return openLib<WakeupLib>(buildC("wakeup"), DEFS);
}

/** Latencies (µs) of the last `n` wakes, sorted. */
export function latencies(lib: WakeupLib, n: number): Float64Array {
  const xs = new Float64Array(n);
  for (let i = 0; i < n; i++) xs[i] = lib.wk_latency(i) / 1000;
  return xs.sort();
}

/** The `q` quantile of sorted `xs`. */
export function quantile(xs: ArrayLike<number>, q: number): number {
  return xs[Math.min(xs.length - 1, Math.floor(xs.length * q))];
}

/** The number argument `index` of the command line (after the script), or `fallback`. */
export function numberArg(index: number, fallback: number): number {
  const args = isBun ? process.argv.slice(2) : Deno.args;
  const v = Number(args[index]);
  return Number.isFinite(v) && v > 0 ? v : fallback;
}
