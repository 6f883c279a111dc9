/**
 * udaddy and mckey against the C tools of rdma-core, on the wire (IB/RoCE only: UD and
 * multicast have no iWARP form). udaddy: our server with the C client, the C server
 * with our client, and ours against ours with two connections; both sides must
 * print the C tool's progress lines through "data transfers complete" and "return
 * status 0". mckey: a receiver joins first (its "joined" line is awaited), then a
 * sender of the other kind joins and sends; the receiver must count every datagram.
 * The CLI tests (`--help`, bad arguments) are host tests: tests/cli.test.ts.
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";
import { deviceTest, notOnIwarp } from "../harness.ts";
import { assertLines } from "./examples-common.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const isBun = "Bun" in globalThis;
const RUN_TIMEOUT_MS = 60_000;

/** argv that runs an example in this test's own runtime. */
function ours(tool: string, args: string[]): string[] {
  const file = `${ROOT}examples/${tool}.ts`;
  return isBun
    ? [process.execPath, file, ...args]
    : [process.execPath, "run", "--allow-ffi", file, ...args];
}

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A started process: its output so far and its end. */
interface Running {
  child: ChildProcess;
  out: { stdout: string; stderr: string };
  done: Promise<Result>;
}

const running = new Set<ChildProcess>();

function killAll(): void {
  for (const c of running) c.kill("SIGKILL");
}

/** Starts argv, killed after `timeoutMs`. */
function start(argv: string[], timeoutMs = RUN_TIMEOUT_MS): Running {
  const child = spawn(argv[0], argv.slice(1), { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  const out = { stdout: "", stderr: "" };
  child.stdout!.on("data", (d) => (out.stdout += d));
  child.stderr!.on("data", (d) => (out.stderr += d));
  const done = new Promise<Result>((resolve) => {
    const timer = setTimeout(() => {
      out.stderr += `\n[killed after ${timeoutMs} ms]`;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.on("close", (code) => {
      running.delete(child);
      clearTimeout(timer);
      resolve({ code, ...out });
    });
    child.on("error", (e) => {
      running.delete(child);
      clearTimeout(timer);
      resolve({ code: -1, stdout: out.stdout, stderr: `${out.stderr}${e.message}` });
    });
  });
  return { child, out, done };
}

const run = (argv: string[], timeoutMs?: number) => start(argv, timeoutMs).done;

const UDADDY_SERVER = [
  "udaddy: starting server",
  "receiving data transfers",
  "sending replies",
  "data transfers complete",
  "test complete",
  "return status 0",
];
const UDADDY_CLIENT = [
  "udaddy: starting client",
  "udaddy: connecting",
  "initiating data transfers",
  "receiving data transfers",
  "data transfers complete",
  "test complete",
  "return status 0",
];

/** Runs a client until it gets through (an rdma_cm UD server is not visible in /proc/net). */
async function clientWithRetry(argv: string[], server: Promise<Result>): Promise<Result> {
  let done = false;
  server.then(() => (done = true));
  const end = Date.now() + 45_000;
  for (;;) {
    const r = await run(argv);
    if (r.code === 0 || done || Date.now() > end) return r;
    await new Promise((res) => setTimeout(res, 500));
  }
}

const IB_ONLY = { needs: notOnIwarp("UD and multicast") };

for (
  const [label, srv, cli, connections] of [
    ["our server, C client", "ours", "c", 1],
    ["C server, our client", "c", "ours", 1],
    ["ours against ours, 2 connections", "ours", "ours", 2],
  ] as const
) {
  deviceTest(`examples: udaddy: ${label}`, async (env) => {
    const common = ["-C", "25", "-S", "256", "-c", String(connections)];
    const srvArgs = ["-b", env.address, ...common];
    const cliArgs = ["-s", env.address, ...common];
    const server = start(srv === "ours" ? ours("udaddy", srvArgs) : ["udaddy", ...srvArgs]);
    try {
      await new Promise((r) => setTimeout(r, 300));
      const c = await clientWithRetry(
        cli === "ours" ? ours("udaddy", cliArgs) : ["udaddy", ...cliArgs],
        server.done,
      );
      const s = await server.done;
      assertLines("client", c, UDADDY_CLIENT);
      assertLines("server", s, UDADDY_SERVER);
      assert.doesNotMatch(s.stdout, /failing connection request/);
    } finally {
      killAll();
    }
  }, { timeout: 150_000, ...IB_ONLY });
}

/** Waits until `p` printed `line` (or ended). */
async function waitLine(p: Running, re: RegExp, ms = 30_000): Promise<void> {
  let ended = false;
  p.done.then(() => (ended = true));
  const end = Date.now() + ms;
  while (!re.test(p.out.stdout)) {
    if (ended) throw new Error(`exited before ${re}:\n${p.out.stdout}\n${p.out.stderr}`);
    if (Date.now() > end) throw new Error(`no ${re} within ${ms} ms:\n${p.out.stdout}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

let group = 10 + Math.floor(Math.random() * 100) + (isBun ? 120 : 0);

for (
  const [label, recv, send] of [
    ["our sender, C receiver", "c", "ours"],
    ["C sender, our receiver", "ours", "c"],
    ["ours against ours", "ours", "ours"],
  ] as const
) {
  deviceTest(`examples: mckey: ${label}`, async (env) => {
    const g = `239.2.${group++}.1`;
    const common = ["-m", g, "-b", env.address, "-C", "10", "-S", "200"];
    const receiver = start(recv === "ours" ? ours("mckey", common) : ["mckey", ...common]);
    try {
      // the C tool's stdout is a pipe here, so fully buffered: its "joined" line only
      // shows at exit; give it time to join instead (the sender pauses 3 s after its join)
      if (recv === "ours") await waitLine(receiver, /^mckey: joined dgid: /m);
      else await new Promise((r) => setTimeout(r, 1500));
      const sArgs = [...common, "-s"];
      const sender = await run(send === "ours" ? ours("mckey", sArgs) : ["mckey", ...sArgs]);
      const r = await receiver.done;
      const joined = /^mckey: joined dgid: (\S+) mlid 0x([0-9a-f]+) sl (\d+)$/m;
      assertLines("sender", sender, [
        "mckey: starting client",
        "mckey: joining",
        "initiating data transfers",
        "data transfers complete",
        "test complete",
        "return status 0",
      ]);
      assertLines("receiver", r, [
        "mckey: starting server",
        "mckey: joining",
        "receiving data transfers",
        "data transfers complete",
        "test complete",
        "return status 0",
      ]);
      // both joined the same group: the same dgid (the group as a GID)
      assert.equal(sender.stdout.match(joined)?.[1], r.stdout.match(joined)?.[1]);
      assert.ok(r.stdout.match(joined)![1].endsWith(g), `dgid of ${g}: ${r.stdout}`);
    } finally {
      killAll();
    }
  }, { timeout: 120_000, ...IB_ONLY });
}
