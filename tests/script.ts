/**
 * Runs a test's probe program in a child process of the running runtime: for what must be
 * chosen at start (V8 flags, the environment the library reads when it loads) or watched from
 * outside (a crash, a warning at exit, CPU use). The source is written to a temporary directory,
 * run (`deno run -A [--v8-flags=...]` or `bun`), and the directory removed.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

/** The `file:` URL of a module of this package, by its path from the package root. */
export function moduleUrl(path: string): string {
  return new URL(`../${path}`, import.meta.url).href;
}

/**
 * V8 flags for a probe that measures allocation: `gc()`, and a young generation large enough that
 * no collection runs inside the measured loop.
 */
export const HEAP_FLAGS: readonly string[] = [
  "--expose-gc",
  "--min-semi-space-size=64",
  "--max-semi-space-size=64",
];

/**
 * Probe source defining `heapBytesPer(loop, k)` (Deno, with {@link HEAP_FLAGS}): the heap bytes
 * each of `k` units of work allocates when `loop(n)` does `n` units in optimized code. A long
 * warm-up, a pause for the compiler's background threads, a full collection and a warm-up again
 * (the collection can send optimized code back to the interpreter: the first rounds after it
 * allocate what the interpreter boxes), then the slope between windows of `k` and `2k` units, so
 * that what a window allocates once (the heap readings) cancels out. The enlarged young
 * generation keeps a collection out of the windows.
 */
export const HEAP_BYTES_PER = `
  async function heapBytesPer(loop, k) {
    loop(100000);
    await new Promise((r) => setTimeout(r, 100));
    globalThis.gc();
    loop(100000);
    const h0 = Deno.memoryUsage().heapUsed;
    loop(k);
    const h1 = Deno.memoryUsage().heapUsed;
    loop(2 * k);
    const h2 = Deno.memoryUsage().heapUsed;
    return (h2 - h1 - (h1 - h0)) / k;
  }
`;

/** How to run a probe. */
export interface ScriptOptions {
  /** V8 flags (Deno only; Bun has its own ways, e.g. `Bun.gc` instead of `--expose-gc`). */
  readonly v8Flags?: readonly string[];
  /** Arguments after the file (`Deno.args`, `process.argv.slice(2)`). */
  readonly args?: readonly string[];
  /** Variables added to this process's environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Milliseconds before the child is killed (default 60,000). */
  readonly timeout?: number;
}

/** What a probe did. */
export interface ScriptResult {
  /** Exit status (null when killed). */
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** The last non-empty line of stdout (where probes print their JSON). */
  readonly lastLine: string;
  /** Wall-clock milliseconds from spawn to exit. */
  readonly ms: number;
}

/** Runs `source` as a module in a child of the running runtime. */
export function runScript(source: string, options: ScriptOptions = {}): ScriptResult {
  const dir = mkdtempSync(join(tmpdir(), "rdma-probe-"));
  const file = join(dir, "probe.ts");
  writeFileSync(file, source);
  const flags = options.v8Flags?.length ? [`--v8-flags=${options.v8Flags.join(",")}`] : [];
  const argv = "Bun" in globalThis ? [file] : ["run", "-A", ...flags, file];
  try {
    const t0 = performance.now();
    const r = spawnSync(process.execPath, [...argv, ...(options.args ?? [])], {
      encoding: "utf8",
      timeout: options.timeout ?? 60_000,
      env: options.env ? { ...process.env, ...options.env } : process.env,
    });
    const ms = performance.now() - t0;
    const lastLine = r.stdout.trimEnd().split("\n").at(-1) ?? "";
    return { status: r.status, stdout: r.stdout, stderr: r.stderr, lastLine, ms };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
