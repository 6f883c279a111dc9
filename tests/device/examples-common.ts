/**
 * Running the example tools and their C originals side by side in the device tests: argv for
 * ours in the test's own runtime, processes with a deadline, the wait until an rdma_cm server
 * listens (`rdma res show cm_id`, not a fixed delay: start-up in the guest takes seconds), and
 * the checks of the C tools' output lines.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
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

/** argv that runs the script `path` (relative to the package root) in this test's own runtime. */
export function oursAt(path: string, args: readonly string[]): string[] {
  const file = `${ROOT}${path}`;
  return isBun
    ? [process.execPath, file, ...args]
    : [process.execPath, "run", "--allow-all", file, ...args];
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
}

const alive = new Set<Proc>();

/**
 * Starts `argv` on this machine, or with `where: "peer"` on the peer guest of a two-guest run
 * (this machine otherwise); it is killed after `timeoutMs`.
 */
export function start(
  argv: string[],
  timeoutMs = 90_000,
  where: "here" | "peer" = "here",
): Started {
  const proc = spawnRemote(argv, { local: where === "here", cwd: ROOT });
  alive.add(proc);
  const timer = setTimeout(() => proc.kill(), timeoutMs);
  const ended = proc.exited.then((code) => {
    clearTimeout(timer);
    alive.delete(proc);
    return { code, stdout: proc.stdout(), stderr: proc.stderr() };
  });
  return { proc, ended };
}

/** Runs `argv` to its end. */
export function run(argv: string[], timeoutMs?: number): Promise<Ended> {
  return start(argv, timeoutMs).ended;
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

/** True once an rdma_cm id listens on `port` (`rdma res show cm_id`: `state LISTEN`). */
function cmListening(port: number): boolean {
  const r = spawnSync("rdma", ["res", "show", "cm_id"], { encoding: "utf8" });
  return r.stdout.split("\n").some((l) => / state LISTEN /.test(l) && l.includes(`:${port} `));
}

/** Waits until `server` listens on `port` through rdma_cm; throws if it ends first. */
export async function waitCmListen(server: Started, port: number, ms = 60_000): Promise<void> {
  let ended = false;
  server.ended.then(() => (ended = true));
  const end = Date.now() + ms;
  while (!cmListening(port)) {
    if (ended) {
      throw new Error(account(`the server ended before listening on ${port}`, await server.ended));
    }
    if (Date.now() > end) {
      throw new Error(`nothing listened on rdma_cm port ${port} within ${ms} ms`);
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
