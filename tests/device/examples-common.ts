/**
 * Running the example tools and their C originals side by side in the device tests (and any
 * other program a test starts): argv for ours in the test's own runtime, processes with a
 * deadline, the wait until a server listens, and the checks of the C tools' output lines.
 */

import assert from "node:assert/strict";
import process from "node:process";
import { type Proc, spawnRemote } from "./peers/spawn.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/** True under Bun. */
export const isBun = "Bun" in globalThis;

/** The runtime's name, for test names and logs. */
export const runtime = isBun ? "bun" : "deno";

/** The perftest tools of bench/perftest. */
export const PERFTEST_TOOLS = [
  "send_lat",
  "write_lat",
  "read_lat",
  "atomic_lat",
  "send_bw",
  "write_bw",
  "read_bw",
  "atomic_bw",
] as const;

/**
 * argv that runs the script `path` (relative to the package root) in this test's own runtime,
 * in Deno with `permissions` (default all).
 */
export function oursAt(
  path: string,
  args: readonly string[],
  permissions: readonly string[] = ["--allow-all"],
): string[] {
  const file = `${ROOT}${path}`;
  return isBun
    ? [process.execPath, file, ...args]
    : [process.execPath, "run", ...permissions, file, ...args];
}

/** argv that runs example `tool` in this test's own runtime. */
export function ours(tool: string, args: readonly string[]): string[] {
  return oursAt(`examples/${tool}.ts`, args);
}

/** How a tool ended. */
export interface Ended {
  /** Exit status (null after a signal). */
  code: number | null;
  /** Its stdout. */
  stdout: string;
  /** Its stderr. */
  stderr: string;
}

/** A started tool: the process and its end (killed after `timeoutMs`). */
export interface Started {
  /** The process. */
  proc: Proc;
  /** Resolves when it ended. */
  ended: Promise<Ended>;
  /** Where it runs. */
  where: "here" | "peer";
}

const alive = new Set<Proc>();

/** How a tool is started. */
export interface StartOptions {
  /** It is killed after this long (default 90 s). */
  timeoutMs?: number;
  /** `"peer"`: on the peer guest of a two-guest run (on this machine otherwise). */
  where?: "here" | "peer";
  /** Working directory (default: the package root). */
  cwd?: string;
  /** Extra environment. */
  env?: Record<string, string>;
}

/** Starts `argv`; it is killed after `timeoutMs` (its stderr then says so). */
export function start(argv: string[], options: StartOptions = {}): Started {
  const { timeoutMs = 90_000, where = "here" } = options;
  const proc = spawnRemote(argv, {
    local: where === "here",
    cwd: options.cwd ?? ROOT,
    env: options.env,
  });
  alive.add(proc);
  let killed = false;
  const timer = setTimeout(() => {
    killed = true;
    proc.kill();
  }, timeoutMs);
  const ended = proc.exited.then((code) => {
    clearTimeout(timer);
    alive.delete(proc);
    const note = killed ? `\n[killed after ${timeoutMs} ms]` : "";
    return { code, stdout: proc.stdout(), stderr: proc.stderr() + note };
  });
  return { proc, ended, where };
}

/** Runs `argv` to its end. */
export function run(argv: string[], options?: StartOptions): Promise<Ended> {
  return start(argv, options).ended;
}

/** Kills every tool still running (a test's `finally`). */
export function killAll(): void {
  for (const p of alive) p.kill();
}

/** A readable account of how a tool ended, for assertion messages. */
export function account(name: string, r: Ended): string {
  return `${name} exited ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
}

/** Asserts that `r` ended with `code` and printed `lines` in this order (others may come between). */
export function assertLines(name: string, r: Ended, lines: readonly string[], code = 0): void {
  assert.equal(r.code, code, account(name, r));
  const got = r.stdout.split("\n");
  let at = 0;
  for (const l of lines) {
    const i = got.indexOf(l, at);
    assert.ok(i >= 0, `"${l}" missing or out of order: ${account(name, r)}`);
    at = i + 1;
  }
}

/**
 * Runs `argv` where `where` says and returns its stdout, also when it failed (`cat` of two files
 * prints the one that exists).
 */
async function output(argv: string[], where: "here" | "peer"): Promise<string> {
  return (await run(argv, { where, timeoutMs: 30_000 })).stdout;
}

/** True once an rdma_cm id listens on `port` (`rdma res show cm_id`: `state LISTEN`). */
async function cmListening(port: number, where: "here" | "peer"): Promise<boolean> {
  const at = new RegExp(`:${port}(\\s|$)`);
  const lines = (await output(["rdma", "res", "show", "cm_id"], where)).split("\n");
  return lines.some((l) => / state LISTEN /.test(l) && at.test(l));
}

/**
 * True once something listens on TCP `port`, read from /proc/net/tcp{,6} (no connection is used
 * up) through `cat`: Deno's test profile cannot read /proc/net itself.
 */
async function tcpListening(port: number, where: "here" | "peer"): Promise<boolean> {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  const lines = (await output(["cat", "/proc/net/tcp", "/proc/net/tcp6"], where)).split("\n");
  return lines.some((line) => {
    const cols = line.trim().split(/\s+/);
    return cols[1]?.endsWith(hex) && cols[3] === "0A";
  });
}

/**
 * Waits until `server` listens on `port`, through rdma_cm (default) or on TCP (the pingpong and
 * perftest tools' exchange); not a fixed delay: start-up in the guest takes seconds. Throws with
 * the server's output when it ends first, and after `ms` (then the server is killed).
 */
export async function waitListening(
  server: Started,
  port: number,
  via: "rdma_cm" | "tcp" = "rdma_cm",
  ms = 60_000,
): Promise<void> {
  let ended = false;
  server.ended.then(() => (ended = true));
  const end = Date.now() + ms;
  const listening = via === "tcp" ? tcpListening : cmListening;
  while (!(await listening(port, server.where))) {
    if (ended) {
      throw new Error(account(`the server ended before listening on ${port}`, await server.ended));
    }
    if (Date.now() > end) {
      server.proc.kill();
      const why = `nothing listened on ${via} port ${port} within ${ms} ms`;
      throw new Error(account(why, await server.ended));
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A port of its own for each test (Deno and Bun runs apart). */
let nextPort = 20_000 + Math.floor(Math.random() * 400) * 2 + (isBun ? 1000 : 0);

/** The next free-looking port. */
export function port(): number {
  return nextPort++;
}

/** The two directions of an interop pair. */
export const DIRECTIONS = ["our server, C client", "C server, our client"] as const;

/** One direction of an interop pair. */
export type Direction = typeof DIRECTIONS[number];

/** Every interop pair in both runtimes (`RDMA_INTEROP_FULL=1`, bench/reliability.sh). */
export const INTEROP_FULL = process.env.RDMA_INTEROP_FULL === "1";

/**
 * The directions an interop pair runs in within the suite: both for a tool's base case; for its
 * variants one per runtime (Deno: our server, Bun: our client), so that a CI run covers every
 * variant both ways across the two runtimes at half the process starts (each costs seconds in
 * the emulated guest). With {@link INTEROP_FULL} both everywhere.
 */
export function directionsFor(base: boolean): readonly Direction[] {
  return base || INTEROP_FULL ? DIRECTIONS : [DIRECTIONS[isBun ? 1 : 0]];
}

/**
 * argv of the server and the client of a pair in `dir`: ours runs `examples/<tool>.ts`, the C
 * side the installed program of the same name.
 */
export function pair(
  dir: Direction,
  tools: { readonly server: string; readonly client: string },
  server: readonly string[],
  client: readonly string[],
): { server: string[]; client: string[] } {
  return dir === DIRECTIONS[0]
    ? { server: ours(tools.server, server), client: [tools.client, ...client] }
    : { server: [tools.server, ...server], client: ours(tools.client, client) };
}
