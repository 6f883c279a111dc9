/**
 * RC ping-pong (the path of `ibv_rc_pingpong`) through the poller, against the C tool in the
 * same run. Run it where there is an RDMA device, e.g. in the soft-RoCE VM:
 *
 *   scripts/softroce-vm -- node_modules/.bin/deno run -A bench/pingpong-event.ts
 *   scripts/softroce-vm -- node_modules/.bin/bun bench/pingpong-event.ts
 *
 * It runs `ibv_rc_pingpong -e` (event mode) and `ibv_rc_pingpong` (busy polling), then two
 * processes of this runtime ping-ponging with each poller strategy (`event`, `adaptive`,
 * `busy`), in interleaved rounds, and prints the median µs per round trip and the ratios to C.
 * `sync` is the floor of the `busy` row: the same loop calling `cq.poll()` until it finds
 * completions, with no poller, awaiting the count as `busy`'s caller awaits its promise (what the
 * runtime itself costs per round trip). Without that await the whole run is one frame that never
 * suspends, and Deno compiles it about 30 % slower than the same loop with a microtask per round
 * trip (bench/results/2026-11-29-pingpong-inline.md).
 * Sends go inline when the QP takes the size, as the C tool's do.
 *
 * Options: --iters N (default 1000), --size BYTES (default 4096), --spin MICROS (the adaptive
 * strategy's fixed budget, default DEFAULT_SPIN_MICROS; `busy` polls in the library's default
 * slices), --strategies event,adaptive,busy[,sync], --rounds N (default 3),
 * --warm N (default 60000: round trips both of our processes make untimed first; in the emulated
 * guest the engines' optimizing tiers replace the first round trips' code only after tens of
 * thousands of them, bench/results/2026-11-28-stream-warm-up.md; the C tool needs none).
 *
 * With `RDMA_VERBS_COUNT=1` each of our processes also prints, on stderr, the cost of one timed
 * iteration (FFI calls by symbol, empty polls, yields to the event loop, wake-ups, waits);
 * `ibv_rc_pingpong` makes one `ibv_post_send`, one `ibv_post_recv` and, polling, one
 * `ibv_poll_cq` per completion plus the empty ones.
 */
import process from "node:process";
import { spawn, spawnSync } from "node:child_process";
import { createInterface } from "node:readline";
import { median } from "./median.ts";
import { type CompletionQueue, openDevice, type QueuePair } from "../verbs/mod.ts";
import { awaitCompletions, DEFAULT_SPIN_MICROS, type Strategy } from "../poller/mod.ts";
import { AccessFlags, QpType, SendFlags, WcStatus } from "../types/enums.ts";
import { COST_COUNTING, resetCostCounts } from "../verbs.ts";
import { costLine, costsPerOperation } from "./cost-per-op.ts";

const RECV_WRID = 1;
const SEND_WRID = 2;
const RX_DEPTH = 100;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const device = process.env.RDMA_DEVICE ?? "rxe0";
const gidIndex = Number(process.env.RDMA_GID_INDEX ?? 1);
const iters = Number(arg("iters", "1000"));
const warm = Number(arg("warm", "60000"));
const size = Number(arg("size", "4096"));
const spin = Number(arg("spin", String(DEFAULT_SPIN_MICROS)));
const isBun = "Bun" in globalThis;
const self = new URL(import.meta.url).pathname;
const runtimeArgs = (extra: string[]) => isBun ? [self, ...extra] : ["run", "-A", self, ...extra];

/** A poller strategy, or `sync`: `cq.poll()` in a loop, no poller (the floor of `busy`). */
type Mode = Strategy | "sync";

interface Info {
  qpNum: number;
  gid: string;
}

/** One side of the ping-pong; returns µs per iteration measured on this side. */
async function side(
  role: "client" | "server",
  strategy: Mode,
  exchange: (mine: Info) => Promise<Info>,
): Promise<number> {
  using ctx = openDevice(device);
  const pd = ctx.allocPd();
  const channel = strategy === "busy" || strategy === "sync" ? undefined : ctx.createCompChannel();
  const cq = ctx.createCq({ cqe: RX_DEPTH + 1, channel });
  const qp: QueuePair = pd.createQp({
    type: QpType.RC,
    sendCq: cq,
    recvCq: cq,
    cap: { maxSendWr: 1, maxRecvWr: RX_DEPTH },
  });
  const mr = pd.allocBuffer(size, { access: AccessFlags.LOCAL_WRITE });
  // inline when the QP takes the size, as ibv_rc_pingpong decides (rxe copies a non-inline
  // payload from the MR in the kernel: 61-86 µs per round trip against 42-43 inline, one boot)
  const inline = qp.cap.maxInlineData >= size ? SendFlags.INLINE : 0;
  const send = qp.prepareSend({
    wrId: SEND_WRID,
    sg: [{ mr, length: size }],
    flags: SendFlags.SIGNALED | inline,
  });
  const recv = qp.prepareRecv({ wrId: RECV_WRID, sg: [{ mr, length: size }] });
  const port = 1;
  const gid = ctx.queryGid(port, gidIndex);
  const o = { port, sgidIndex: gidIndex, pathMtu: ctx.queryPort(port).activeMtu };
  qp.toInit(o);
  for (let i = 0; i < RX_DEPTH; i++) recv.post();
  const peer = await exchange({ qpNum: qp.qpNum, gid });
  qp.toRtr({ qpNum: peer.qpNum, psn: 0, gid: peer.gid }, o);
  qp.toRts(o);
  if (role === "client") await exchange({ qpNum: qp.qpNum, gid }); // the server is at RTS

  // --spin is the adaptive budget; busy polls in the library's own slices (spinMicros would set
  // the slice, and a slice shorter than a round trip yields a macrotask turn per wait)
  const options = strategy === "busy"
    ? { strategy, timeout: 60_000 }
    : strategy === "sync"
    ? undefined
    : { strategy, spinMicros: spin, timeout: 60_000 };
  let pending = RECV_WRID;
  let scnt = 0;
  let rcnt = 0;
  const total = warm + iters;
  let t0 = performance.now();
  if (role === "client") {
    send.post();
    pending = RECV_WRID | SEND_WRID;
  }
  while (rcnt < total || scnt < total) {
    const got = strategy === "sync" ? await spin60s(cq) : await awaitCompletions(cq, options);
    for (let i = 0; i < got; i++) {
      const wc = cq.completion(i);
      if (wc.status !== WcStatus.SUCCESS) throw new Error(`completion failed: ${wc.statusName}`);
      const id = wc.wrIdNumber; // no BigInt per completion
      if (id === SEND_WRID) scnt++;
      else if (id === RECV_WRID) {
        rcnt++;
        if (rcnt === warm) { // the timed round trips start
          t0 = performance.now();
          if (COST_COUNTING) resetCostCounts();
        }
        recv.post();
      }
      pending &= ~id;
      if (scnt < total && pending === 0) {
        send.post();
        pending = RECV_WRID | SEND_WRID;
      }
    }
  }
  const us = (performance.now() - t0) * 1000 / iters;
  if (COST_COUNTING) {
    const line = costLine(costsPerOperation(iters));
    console.error(`cost of one iteration, ${strategy}, ${role}: ${line}`);
  }
  return us;
}

/** `cq.poll()` until it finds completions; throws after 60 s without any (a dead peer). */
function spin60s(cq: CompletionQueue): number {
  let got = cq.poll();
  let start = 0;
  for (let pass = 1; got === 0; pass++) {
    if ((pass & 0xffff) === 0) { // the clock once in 65,536 empty polls
      if (start === 0) start = performance.now();
      else if (performance.now() - start > 60_000) throw new Error("no completion for 60 s");
    }
    got = cq.poll();
  }
  return got;
}

/** The server: a child process talking JSON lines on stdin/stdout. */
async function server(strategy: Mode): Promise<void> {
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const next = async () => JSON.parse((await lines.next()).value as string) as Info;
  const us = await side("server", strategy, async (mine) => {
    const peer = await next();
    process.stdout.write(JSON.stringify(mine) + "\n");
    return peer;
  });
  process.stdout.write(JSON.stringify({ us }) + "\n");
  process.exit(0);
}

/** The client: spawns the server and runs the client side. */
async function client(strategy: Mode): Promise<number> {
  const args = [
    "--serve",
    strategy,
    "--iters",
    `${iters}`,
    "--warm",
    `${warm}`,
    "--size",
    `${size}`,
    "--spin",
    `${spin}`,
  ];
  const child = spawn(process.execPath, runtimeArgs(args), { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const next = async () => JSON.parse((await lines.next()).value as string);
  let step = 0;
  const us = await side("client", strategy, async (mine) => {
    if (step++ === 0) {
      child.stdin!.write(JSON.stringify(mine) + "\n");
      return await next() as Info;
    }
    return mine; // second call: the server answered only after reaching RTS
  });
  await next();
  child.stdin!.end();
  return us;
}

let cPort = 18515;

function cTool(event: boolean): number {
  const base = ["-d", device, "-g", String(gidIndex), "-n", String(iters), "-s", String(size)];
  base.push("-p", String(cPort++));
  if (event) base.push("-e");
  const srv = spawn("ibv_rc_pingpong", base, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  srv.stdout!.on("data", (d) => out += d);
  const addr = process.env.RDMA_GUEST_IP ?? "127.0.0.1";
  try {
    // the server may take a while to listen on a loaded machine: retry the connect
    for (let attempt = 0; attempt < 40; attempt++) {
      spawnSync("sleep", ["0.25"]);
      const cl = spawnSync("ibv_rc_pingpong", [...base, addr], {
        encoding: "utf8",
        timeout: 300_000,
      });
      const m = /([\d.]+) usec\/iter/.exec(cl.stdout);
      if (m) return Number(m[1]);
      if (!/Couldn't connect/.test(cl.stdout + cl.stderr)) {
        throw new Error(`ibv_rc_pingpong failed: ${cl.stdout}${cl.stderr}${out}`);
      }
    }
    throw new Error(`ibv_rc_pingpong: the server never listened: ${out}`);
  } finally {
    srv.kill();
  }
}

async function main(): Promise<void> {
  const strategies = arg("strategies", "event,adaptive,busy").split(",") as Mode[];
  const rounds = Number(arg("rounds", "3"));
  const rt = isBun ? "bun" : "deno";
  // rounds interleave every variant, so that load changes hit them alike; medians are printed
  const samples = new Map<string, number[]>();
  const add = (k: string, us: number) => samples.set(k, [...(samples.get(k) ?? []), us]);
  for (let r = 0; r < rounds; r++) {
    add("C -e", cTool(true));
    add("C busy", cTool(false));
    for (const s of strategies) add(s, await client(s));
  }
  const medianOf = (k: string) => median(samples.get(k)!);
  const cEvent = medianOf("C -e");
  const cBusy = medianOf("C busy");
  const rows: [string, string, number, string][] = [
    ["C ibv_rc_pingpong -e", "C -e", cEvent, ""],
    ["C ibv_rc_pingpong (busy poll)", "C busy", cBusy, ""],
  ];
  for (const s of strategies) {
    const us = medianOf(s);
    const polling = s === "busy" || s === "sync";
    const ref = polling ? cBusy : cEvent;
    rows.push([
      `${rt} ${s}${s === "adaptive" ? ` (spin ${spin} µs)` : ""}`,
      s,
      us,
      `${(us / ref).toFixed(2)}× C${polling ? " busy" : " -e"}`,
    ]);
  }
  console.log(
    `RC ping-pong on ${device}, ${iters} iters (ours after ${warm} untimed), ${size} B, median of ${rounds} interleaved rounds (µs/iter)`,
  );
  for (const [name, key, us, ratio] of rows) {
    const all = samples.get(key)!.map((x) => x.toFixed(0)).join(" ");
    console.log(`${name.padEnd(36)}${us.toFixed(1).padStart(9)}  ${ratio.padEnd(12)} [${all}]`);
  }
}

if (process.argv.includes("--serve")) {
  await server(process.argv[process.argv.indexOf("--serve") + 1] as Mode);
} else {
  await main();
  process.exit(0);
}
