/**
 * This process through its runtime's own calls, with no `node:` module: for the benches whose
 * processes measure their own memory (in Deno the first `node:` module sets up Node's
 * compatibility layer, several MiB a measured RDMA process would not otherwise hold).
 *
 * @module
 */

const isBun = "Bun" in globalThis;

/** What a measuring process reads of its runtime. */
export interface NativeProcess {
  readonly runtime: "deno" | "bun";
  /** The script's arguments. */
  readonly argv: string[];
  env(name: string): string | undefined;
  /** Writes `line` to stdout, whole. */
  write(line: string): void;
  memory(): { rss: number; heapTotal: number; heapUsed: number; external: number };
  /** A full collection, if the runtime lets one be forced (Deno: `--expose-gc`). */
  gc(): boolean;
  /** The text of a file (e.g. under /proc). */
  readText(path: string): string;
  exit(code: number): never;
}

interface BunProcess {
  argv: string[];
  env: Record<string, string | undefined>;
  stdout: { write(s: string): void };
  memoryUsage(): { rss: number; heapTotal: number; heapUsed: number; external: number };
  exit(code: number): never;
}

function bunProcess(): NativeProcess {
  const g = globalThis as unknown as { process: BunProcess; Bun: { gc(full: boolean): void } };
  const p = g.process;
  // Bun's fs is native: requiring it costs Bun about nothing
  const fs = (import.meta as unknown as { require(m: string): typeof import("node:fs") })
    .require("fs");
  return {
    runtime: "bun",
    argv: p.argv.slice(2),
    env: (name) => p.env[name],
    write: (line) => p.stdout.write(line),
    memory: () => p.memoryUsage(),
    gc: () => (g.Bun.gc(true), true),
    readText: (path) => fs.readFileSync(path, "utf8"),
    exit: (code) => p.exit(code),
  };
}

function denoProcess(): NativeProcess {
  const enc = new TextEncoder();
  return {
    runtime: "deno",
    argv: Deno.args,
    env: (name) => Deno.env.get(name),
    write(line) {
      const bytes = enc.encode(line);
      for (let at = 0; at < bytes.length;) at += Deno.stdout.writeSync(bytes.subarray(at));
    },
    memory: () => Deno.memoryUsage(),
    gc() {
      const gc = (globalThis as { gc?: () => void }).gc;
      gc?.();
      return gc !== undefined;
    },
    readText: (path) => Deno.readTextFileSync(path),
    exit: (code) => Deno.exit(code),
  };
}

/** This process. */
export const self: NativeProcess = isBun ? bunProcess() : denoProcess();
