/**
 * Stream throughput and latency: this library's rsocket-compatible streams against C `rstream`
 * (librdmacm's rsockets) in the same run, and TCP in the same runtime (`node:net`) for context.
 * Run it where there is an RDMA device, e.g. in the soft-RoCE VM, once per runtime:
 *
 *   scripts/softroce-vm -- node_modules/.bin/deno run -A bench/stream.ts
 *   scripts/softroce-vm -- node_modules/.bin/bun bench/stream.ts
 *
 * Each measurement is a pair of processes doing what `rstream` does with `-S size -C count -I
 * iters`: a 16-byte sync each way, then per iteration `count` transfers of `size` bytes from
 * client to server and `count` back, timed on the client; throughput is rstream's Gb/sec
 * (bytes both ways), latency its usec/xfer (half a round trip). Ours and TCP first run the same
 * shape untimed for at least `--warm-seconds`, and on while its blocks still get faster, up to
 * twice that (bench/warm-up.ts; in the emulated guest the engines' optimizing tiers need
 * 20,000-40,000 round trips, 5-10 s, before their code replaces the code the first round trips
 * ran; the steady state is what a server sees; C needs no warm-up), and the first and last
 * block of that warm-up are printed beside the timed figures. The C pair is `rstream` itself;
 * ours and TCP are roles of this file in the running runtime. C's default mode polls in a loop,
 * so it is compared with ours spinning; C's blocking mode (`-T b`) with ours on the default
 * strategy. Rounds are interleaved and the medians and the ratios to C are printed. No
 * timing is asserted anywhere.
 *
 * It also reports the heap bytes allocated per write+read pair in the steady state (two
 * connections in one process; in Deno the young generation is enlarged so no collection runs
 * during the measured loop), beside the runtime's floor for two promise-returning calls and
 * the synchronous `tryWrite`+`tryRead` pair.
 *
 * Options: --rounds N (default 3), --bw-count N (64 KiB transfers per direction, default 500),
 * --lat-iters N (64-byte round trips, default 5000), --warm-seconds S (untimed warm-up before
 * each of ours and TCP, default 12), --cost-ops N (round trips counted per cost account, default
 * 2000; 0 skips them; a quarter as many 64 KiB transfers), --cost-warm N (untimed operations
 * before them), --address IP (default $RDMA_GUEST_IP); the allocation role alone
 * (`--role alloc`) takes --alloc-iters N (the `n` rounds of its measurement, default 10000);
 * --kinds "C rstream,ours spin" measures only those rows (comma-separated, as printed; default
 * all five), e.g. for a before/after of the library without TCP's warm-ups; --ours-strategy S
 * runs the "ours" row with strategy S instead of the default (`event`: every wait sleeps on the
 * completion channel), --ours-spin MICROS with a fixed spin budget; --alloc 0 skips the
 * allocation measurement (for a before/after of the timed rows); --busy N runs the rounds with N
 * busy loops beside every pair (CPU contention: more runnable threads than CPUs); --waiter KIND
 * makes ours wait through that epoll waiter (`useWaiter`, e.g. `deno-uring`) instead of the
 * runtime's default.
 */

import process from "node:process";
import { spawn, spawnSync } from "node:child_process";
import net from "node:net";
import { connect, listen, type RdmaConn } from "../stream/mod.ts";
import { COST_COUNTING, resetCostCounts } from "../mod.ts";
import { useWaiter } from "../poller/mod.ts";
import { type CostPerOp, costsPerOperation } from "./cost-per-op.ts";
import { warmUp } from "./warm-up.ts";
import { median } from "./median.ts";
import { runChild } from "./child.ts";
import { socketReader } from "./socket-reader.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const isBun = "Bun" in globalThis;
const runtime = isBun ? "bun" : "deno";
const self = new URL(import.meta.url).pathname;
const address = arg("address", process.env.RDMA_SIW_IP || process.env.RDMA_GUEST_IP || "");

interface Shape {
  size: number;
  count: number;
  iters: number;
  /**
   * The least seconds of untimed iterations before the timed ones (ours and TCP: the JIT's
   * warm-up, bench/warm-up.ts; C needs none). The client decides when the warm-up ends; the
   * server echoes until the end.
   */
  warmSeconds: number;
}

/** rstream's two figures: Gb/s (bytes both ways) and µs per transfer (half a round trip). */
interface Figures {
  gbps: number;
  usecPerXfer: number;
}

/** rstream's figures: `iters` iterations of `s` in `usec` µs. */
function figures(s: Shape, usec: number, iters = s.iters): Figures {
  const bytes = iters * s.count * s.size * 2;
  return { gbps: (bytes * 8) / (1000 * usec), usecPerXfer: usec / iters / (s.count * 2) };
}

/** What the client measured: the timed part, and the first and last block of the warm-up. */
interface Measured extends Figures {
  warm?: { iterations: number; seconds: number; first: Figures; last: Figures };
}

/**
 * The byte stream both our streams and TCP sockets are adapted to. Ours is not wrapped: `write`
 * and `readFull` return the connection's own promises, as a program calling `read`/`write` gets
 * them (an `async` layer here cost about 1.3 µs per round trip and side in the guest,
 * bench/results/2026-11-30-stream-profile-again.md; C `rstream` calls `rsend`/`rrecv` directly).
 */
interface Io {
  /** Writes all of `b`. */
  write(b: Uint8Array): Promise<unknown>;
  /** Fills `b`: resolves with `b.length`, or with fewer (or null) only at the end of the stream. */
  readFull(b: Uint8Array): Promise<number | null>;
  close(): Promise<void>;
}

function rdmaIo(c: RdmaConn): Io {
  let full = { min: 1 }; // rsocket's MSG_WAITALL, one object per length
  return {
    write: (b) => c.write(b),
    readFull(b) {
      if (full.min !== b.length) full = { min: b.length };
      return c.read(b, full);
    },
    close: () => c[Symbol.asyncDispose](),
  };
}

function tcpIo(sock: net.Socket): Io {
  sock.setNoDelay(true);
  const reader = socketReader(sock);
  return {
    write(b) {
      return new Promise<void>((resolve, reject) =>
        sock.write(b, (e) => (e ? reject(e) : resolve()))
      );
    },
    readFull: (b) => reader.readFull(b),
    close() {
      sock.end();
      return Promise.resolve();
    },
  };
}

/**
 * The rstream pattern on one side. The client warms up in blocks (1,000 round trips, or one
 * iteration of a bulk shape) for `warmSeconds` or more (`warmUp`), then times `iters`
 * iterations and closes; the server echoes each iteration until the stream ends, so the two
 * need not agree on a count. Returns the client's figures (null on the server).
 */
async function pattern(io: Io, client: boolean, s: Shape): Promise<Measured | null> {
  const buf = new Uint8Array(Math.max(s.size, 16));
  const sync = buf.subarray(0, 16);
  if (client) {
    await io.write(sync);
    if (await io.readFull(sync) !== 16) throw new Error("end of stream");
  } else {
    if (await io.readFull(sync) !== 16) throw new Error("end of stream");
    await io.write(sync);
  }
  const data = buf.subarray(0, s.size);
  if (!client) {
    for (;;) {
      try {
        for (let t = 0; t < s.count; t++) {
          if (await io.readFull(data) !== s.size) return null; // the client closed: the end
        }
      } catch {
        return null; // the client closed: the end of the run
      }
      for (let t = 0; t < s.count; t++) await io.write(data);
    }
  }
  const iterations = async (n: number) => {
    for (let i = 0; i < n; i++) {
      for (let t = 0; t < s.count; t++) await io.write(data);
      for (let t = 0; t < s.count; t++) {
        if (await io.readFull(data) !== s.size) throw new Error("end of stream");
      }
    }
  };
  const block = s.count === 1 ? 1000 : 1;
  const w = await warmUp(s.warmSeconds, () => iterations(block));
  const t0 = performance.now();
  await iterations(s.iters);
  const timed = figures(s, (performance.now() - t0) * 1000);
  if (w.steps === 0) return timed;
  const warm = {
    iterations: w.steps * block,
    seconds: w.seconds,
    first: figures(s, w.firstMs * 1000, block),
    last: figures(s, w.lastMs * 1000, block),
  };
  return { ...timed, warm };
}

/**
 * Heap bytes allocated per operation in the steady state: two connections in this process, a
 * warm-up of 20,000 rounds, then `n` and `2n` rounds of one loop, each with the heap measured
 * before and after (a collection first; in Deno the young generation is made large enough that no
 * collection runs during the loop); the figure is the difference over the `n` more rounds. The
 * loops allocate nothing of their own:
 *
 * - `write(p)` + `read(q, { min })` (the promise-shaped API) at 64 B and 64 KiB;
 * - the floor of that shape: two awaits of a fresh resolved promise per round (what any API that
 *   returns a promise per call costs the runtime; nothing of this library);
 * - `tryWrite(p)` + `tryRead(q)` at 64 B (the synchronous API: no promise at all).
 */
async function allocRole(): Promise<void> {
  const g = globalThis as { gc?: () => void; Bun?: unknown };
  const l = listen({ hostname: address, port: 0 });
  const [a, b] = await Promise.all([
    l.accept(),
    connect({ hostname: address, port: l.addr.port }),
  ]);
  l.close();
  const n = Number(arg("alloc-iters", "10000"));
  // a long warm-up: in the emulated guest the optimizing compiler needs thousands of rounds to
  // replace the baseline code (which boxes numbers that the optimized code keeps in registers)
  const warm = 20_000;
  // per round as the slope between n and 2n rounds: what a window allocates once (the heap
  // reading, what the engine re-grows after the collection: about 20 KB in Deno) cancels, and
  // what it differs by between windows (up to 18 KB measured) is spread over n rounds
  const perRound = async (loop: (n: number) => Promise<void>): Promise<number> => {
    await loop(warm);
    const once = await bytesDuring(() => loop(n));
    const twice = await bytesDuring(() => loop(2 * n));
    return Math.round((twice - once) / n);
  };
  const out: Record<string, number> = {};
  for (const size of [64, 65536]) {
    const src = new Uint8Array(size);
    const dst = new Uint8Array(size);
    const exact = { min: size };
    out[`bytesPerWriteRead${size}`] = await perRound(async (n) => {
      for (let i = 0; i < n; i++) {
        await a.write(src);
        await b.read(dst, exact);
      }
    });
  }
  const fresh = () => Promise.resolve(64);
  out.floorBytes = await perRound(async (n) => {
    for (let i = 0; i < n; i++) {
      await fresh();
      await fresh();
    }
  });
  const src = new Uint8Array(64);
  const dst = new Uint8Array(64);
  let waited = 0, tries = 0;
  out.bytesPerTryWriteRead64 = await perRound(async (n) => {
    tries += n;
    for (let i = 0; i < n; i++) {
      while (a.tryWrite(src) === 0);
      let got = 0;
      // the device delivers while this spins; a round that takes too long waits once instead
      for (let spins = 0; got < 64 && spins < 1_000_000; spins++) got += b.tryRead(dst) ?? 0;
      if (got < 64) {
        waited++;
        await b.read(dst.subarray(got), { min: 64 - got });
      }
    }
  });
  out.tryRoundsThatWaited = waited;
  out.tryRounds = tries;
  out.gc = g.Bun || g.gc ? 1 : 0;
  console.log(JSON.stringify(out));
  await a[Symbol.asyncDispose]();
  await b[Symbol.asyncDispose]();
}

/** What one operation cost on one side: counters per operation, promises and heap bytes. */
interface SideCost {
  side: "client" | "server";
  what: string;
  usPerOp: number;
  perOp: CostPerOp;
  promises: number;
  bytes: number;
  floor: { promises: number; bytes: number };
}

/** Operations per window of Bun's promise count (few enough that no collection runs within). */
const BUN_PROMISE_WINDOW = 20;

/**
 * Counts the promises created while `f(n)` runs n operations: V8's promise hooks (Deno). Bun has
 * none, and JSC counts live promises only, which a collection lowers: there the operations run in
 * windows of {@link BUN_PROMISE_WINDOW}, each after a full collection, and the live count's growth
 * over each window is summed.
 */
async function promisesDuring(f: (k: number) => Promise<void>, n: number): Promise<number> {
  if (isBun) {
    const { heapStats } = await import("bun:jsc");
    const bun = (globalThis as unknown as { Bun: { gc(force: boolean): void } }).Bun;
    const count = () => heapStats().objectTypeCounts.Promise ?? 0;
    let made = 0;
    for (let done = 0; done < n; done += BUN_PROMISE_WINDOW) {
      bun.gc(true);
      const before = count();
      await f(Math.min(BUN_PROMISE_WINDOW, n - done));
      made += count() - before;
    }
    return made;
  }
  const { promiseHooks } = (await import("node:v8")).default;
  let made = 0;
  const stop = promiseHooks.onInit(() => made++);
  await f(n);
  stop();
  return made;
}

/** Deno's flags for the processes that count heap bytes: collections on demand, a fixed young
 * generation (see {@link bytesDuring}). */
const DENO_HEAP_FLAGS =
  "--v8-flags=--expose-gc,--min-semi-space-size=128,--max-semi-space-size=128";

/**
 * JS heap bytes allocated while `f` runs. No collection may run in between: Deno's young
 * generation is fixed at 128 MiB (`--min-semi-space-size` as well as the maximum: with only the
 * maximum it starts small and scavenges within a few thousand operations, which hides what they
 * allocated). After the forced full collection the engines re-grow some of what it dropped
 * (feedback, compiled code), so `f` runs once after it and the second run is measured; a caller
 * that talks to a peer runs `f` twice on both sides.
 */
async function bytesDuring(f: () => Promise<void>): Promise<number> {
  const g = globalThis as { gc?: () => void; Bun?: { gc(force: boolean): void } };
  if (g.Bun) g.Bun.gc(true);
  else g.gc?.();
  await f();
  const h0 = process.memoryUsage().heapUsed;
  await f();
  return process.memoryUsage().heapUsed - h0;
}

const MIN_64 = { min: 64 };

/**
 * The cost account of one operation on one side, counted with `RDMA_VERBS_COUNT=1`: `lat`, one
 * 64-byte round trip (the client writes then reads, the server reads then writes); `bw`, one
 * 64 KiB transfer (the client writes, the server reads it whole). Windows of `n` operations
 * after `warm` untimed ones (`--cost-warm`; default 40,000 round trips or 4,000 transfers, about
 * the warm-up `pattern` gives ours): the counters and the time, then the promises made, then the
 * heap bytes allocated; and the same windows for the bare awaits of an already-resolved promise per
 * operation (the floor the runtime itself charges for awaiting).
 */
async function costSide(
  conn: RdmaConn,
  client: boolean,
  what: "lat" | "bw",
  n: number,
  warm: number,
) {
  const size = what === "lat" ? 64 : 65536;
  const buf = new Uint8Array(size);
  const minAll = what === "lat" ? MIN_64 : { min: size };
  const ops = async (k: number) => {
    for (let i = 0; i < k; i++) {
      if (what === "lat") {
        if (client) {
          await conn.write(buf);
          await conn.read(buf, minAll);
        } else {
          await conn.read(buf, minAll);
          await conn.write(buf);
        }
      } else if (client) await conn.write(buf);
      else await conn.read(buf, minAll);
    }
  };
  const done = Promise.resolve(size);
  const floorOps = async (k: number) => {
    for (let i = 0; i < k; i++) {
      await done;
      if (what === "lat") await done;
    }
  };
  await ops(warm);
  resetCostCounts();
  const t0 = performance.now();
  await ops(n);
  const us = ((performance.now() - t0) * 1000) / n;
  const perOp = costsPerOperation(n);
  const promises = await promisesDuring(ops, n);
  const bytes = await bytesDuring(() => ops(n));
  const floor = {
    promises: (await promisesDuring(floorOps, n)) / n,
    bytes: Math.max(0, Math.round((await bytesDuring(() => floorOps(n))) / n)),
  };
  const cost: SideCost = {
    side: client ? "client" : "server",
    what,
    usPerOp: Math.round(us * 100) / 100,
    perOp,
    promises: Math.round((promises / n) * 1000) / 1000,
    bytes: Math.max(0, Math.round(bytes / n)),
    floor,
  };
  console.log("cost " + JSON.stringify(cost));
}

/** The roles' strategy options: "ours spin" spins up to 1 ms; "ours" takes `--ours-strategy`. */
function pushStrategy(kind: Kind, common: string[]): void {
  if (kind === "ours spin") common.push("--spin", "1000");
  const strategy = arg("ours-strategy", "");
  if (kind === "ours" && strategy) common.push("--strategy", strategy);
  const spin = arg("ours-spin", "");
  if (kind === "ours" && spin) common.push("--spin", spin);
  const waiter = arg("waiter", "");
  if (kind.startsWith("ours") && waiter) common.push("--waiter", waiter);
}

async function role(name: string): Promise<void> {
  // rstream's socket buffers (2 × 512 KiB each way); "spin": each wait spins up to --spin µs;
  // "strategy": another strategy than the default; "waiter": another epoll waiter
  const spin = arg("spin", "");
  const strategy = arg("strategy", "");
  const waiter = arg("waiter", "");
  if (waiter) useWaiter(waiter);
  const opts = {
    sendBufferSize: 1 << 20,
    receiveBufferSize: 1 << 20,
    ...(spin ? { strategy: "adaptive" as const, spinMicros: Number(spin) } : {}),
    ...(strategy ? { strategy: strategy as "event" | "busy" | "adaptive" } : {}),
  };
  if (name === "alloc") {
    await allocRole();
    process.exit(0);
  }
  if (name === "cost-server" || name === "cost-client") {
    if (!COST_COUNTING) throw new Error("the cost roles need RDMA_VERBS_COUNT=1");
    const what = arg("what", "lat") as "lat" | "bw";
    const n = Number(arg("ops", "2000"));
    const port = Number(arg("port", "0"));
    let conn: RdmaConn;
    if (name === "cost-server") {
      const l = listen({ hostname: address, port, ...opts });
      console.log("listening");
      conn = await l.accept();
      l.close();
    } else conn = await connect({ hostname: address, port, ...opts });
    // both sides make the same untimed operations first (the JIT's warm-up, as in `pattern`)
    const warm = Number(arg("cost-warm", what === "lat" ? "40000" : "4000"));
    await costSide(conn, name === "cost-client", what, n, warm);
    await conn[Symbol.asyncDispose]();
    process.exit(0);
  }
  const port = Number(arg("port", "0"));
  const s = {
    size: Number(arg("size", "0")),
    count: Number(arg("count", "1")),
    iters: Number(arg("iters", "1")),
    warmSeconds: Number(arg("warm-seconds", "0")),
  };
  let io: Io;
  const client = name.endsWith("client");
  if (name === "rdma-server") {
    const l = listen({ hostname: address, port, ...opts });
    console.log("listening");
    io = rdmaIo(await l.accept());
    l.close();
  } else if (name === "rdma-client") {
    io = rdmaIo(await connect({ hostname: address, port, ...opts }));
  } else if (name === "tcp-server") {
    const server = net.createServer();
    await new Promise<void>((r) => server.listen(port, address, r));
    console.log("listening");
    const sock = await new Promise<net.Socket>((r) => server.once("connection", r));
    server.close();
    io = tcpIo(sock);
  } else {
    const sock = net.connect(port, address);
    await new Promise<void>((r, j) => {
      sock.once("connect", r);
      sock.once("error", j);
    });
    io = tcpIo(sock);
  }
  const measured = await pattern(io, client, s);
  await io.close();
  if (measured) console.log(JSON.stringify(measured));
  process.exit(0);
}

// ------------------------------------------------------------------------------- the driver

/** Children of this bench are killed after 10 minutes. */
const LONG = { timeoutMs: 600_000 };

async function cmListening(port: number): Promise<void> {
  for (let i = 0; i < 300; i++) {
    const r = spawnSync("rdma", ["res", "show", "cm_id"], { encoding: "utf8" });
    if (new RegExp(`state LISTEN .*:${port}\\b`).test(r.stdout ?? "")) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`nothing listens on ${port}`);
}

const me = (extra: string[]) =>
  isBun ? [process.execPath, self, ...extra] : [process.execPath, "run", "-A", self, ...extra];

/** This file in a counting process that may force collections (the cost roles). */
const meCounting = (extra: string[]) =>
  isBun ? [process.execPath, self, ...extra] : [
    process.execPath,
    "run",
    "-A",
    DENO_HEAP_FLAGS,
    self,
    ...extra,
  ];

/** Runs one cost measurement pair; returns the server's and the client's accounts. */
async function measureCost(kind: Kind, what: "lat" | "bw", ops: number): Promise<SideCost[]> {
  const port = nextPort++;
  const common = ["--address", address, "--port", String(port), "--what", what];
  common.push("--ops", String(ops));
  const costWarm = arg("cost-warm", "");
  if (costWarm) common.push("--cost-warm", costWarm);
  pushStrategy(kind, common);
  const env = { RDMA_VERBS_COUNT: "1" };
  let ready!: () => void;
  const listening = new Promise<void>((r) => (ready = r));
  const server = runChild(meCounting(["--role", "cost-server", ...common]), {
    timeoutMs: 600_000,
    env,
    onLine: (l) => {
      if (l === "listening") ready();
    },
  });
  await Promise.race([
    listening,
    server.done.then((r) => {
      throw new Error(`cost server ended: ${r.stderr}`);
    }),
  ]);
  await cmListening(port);
  const client = await runChild(meCounting(["--role", "cost-client", ...common]), {
    timeoutMs: 600_000,
    env,
  }).done;
  const s = await server.done;
  const lines = [s, client].map((r) => r.stdout.split("\n").find((l) => l.startsWith("cost ")));
  if (client.code !== 0 || lines.some((l) => !l)) {
    throw new Error(`cost run failed: ${client.stdout}${client.stderr}${s.stderr}`);
  }
  return lines.map((l) => JSON.parse(l!.slice(5)) as SideCost);
}

/**
 * rsocket's cost of one 64 B round trip on one side, read from librdmacm/rsocket.c (rdma-core 44):
 * `rsend` posts one inline RDMA WRITE WITH IMM (an SGL credit message every `rq_size / 2` = 192
 * messages received); `rrecv` → `rs_get_comp` → `rs_process_cq` → `rs_poll_cq`, which polls
 * one completion per `ibv_poll_cq` until the CQ is empty (the data receive and the send's own
 * completion: two calls that return one, and one that returns none per pass) and re-posts one
 * receive per receive completion. While nothing has arrived it repeats the pass (one empty poll
 * each) for `polling_time` (10 µs), then arms the CQ and sleeps in `poll()` on the channel fd
 * (`rpoll`; blocking mode, `-T b`). A C thread: no event loop, no promises, no heap.
 */
const RSOCKET_LAT: Record<string, string> = {
  post_send: "1 (+1/192 credits)",
  post_recv: "1",
  poll_cq: "≥ 3 (+1 per spin pass)",
  req_notify_cq: "0 (1 when it sleeps)",
  ibv_get_cq_event: "0 (1 when it sleeps)",
  emptyPolls: "≥ 1 (+1 per spin pass)",
  wakes: "0 (1 poll() when it sleeps)",
  yields: "—",
  timers: "0",
  waits: "—",
  promises: "—",
  "heap bytes": "0",
};

/**
 * rsocket's cost of one 64 KiB transfer on one side: `rsend` starts with a 2 KiB chunk and
 * doubles it per chunk (`RS_OLAP_START_SIZE`), so 64 KiB leave as 2+4+8+16+32+2 KiB: six
 * RDMA WRITE WITH IMM, six send completions; the receiver gets six receive completions (six
 * re-posted receives) and advertises ring space (one RDMA WRITE of an SGE) per half ring read.
 */
const RSOCKET_BW: Record<string, string> = {
  post_send: "6 (sender)",
  post_recv: "6 (receiver)",
  poll_cq: "≥ 7 (one per completion, one empty per pass)",
  timers: "0",
  "heap bytes": "0",
};

/** One row per counter: ours per side, and rsocket's, read from its source (`RSOCKET`). */
function printCosts(title: string, sides: SideCost[], reference: Record<string, string>): void {
  const names = new Set<string>();
  for (const c of sides) for (const k of Object.keys(c.perOp.calls)) names.add(k);
  const rows: [string, ...string[]][] = [];
  for (const k of [...names].sort()) {
    rows.push([
      `FFI ${k}`,
      ...sides.map((c) => String(c.perOp.calls[k] ?? 0)),
    ]);
  }
  for (const k of [...names].sort()) {
    const us = (c: SideCost) => c.perOp.callMicros[k] ?? 0;
    rows.push([`µs in ${k}`, ...sides.map((c) => String(us(c)))]);
  }
  const counts = ["ffiCalls", "emptyPolls", "wakes", "yields", "timers", "waits"] as const;
  for (const k of counts) {
    rows.push([k, ...sides.map((c) => String(c.perOp[k]))]);
  }
  rows.push(["promises", ...sides.map((c) => `${c.promises} (floor ${c.floor.promises})`)]);
  rows.push(["heap bytes", ...sides.map((c) => `${c.bytes} (floor ${c.floor.bytes})`)]);
  rows.push(["µs per op (counting on)", ...sides.map((c) => String(c.usPerOp))]);
  console.log(`\n${title}`);
  const head = ["per operation", ...sides.map((c) => c.side), "rsocket (from source)"];
  console.log(`| ${head.join(" | ")} |`);
  console.log(`|${head.map(() => "---").join("|")}|`);
  for (const r of rows) {
    const key = r[0].replace(/^FFI /, "");
    console.log(`| ${[...r, reference[key] ?? reference[r[0]] ?? ""].join(" | ")} |`);
  }
}

let nextPort = 19000 + Math.floor(Math.random() * 5000);

/**
 * What is measured: C `rstream` in its default nonblocking mode (a polling loop) and with `-T b`
 * (blocking: rsocket spins 10 µs, then sleeps on the completion channel); ours spinning on the
 * CQ for up to 1 ms per wait (`adaptive` with `spinMicros: 1000`, what `examples/rstream.ts`
 * does by default) and with the default strategy (spin briefly, then sleep through the poller);
 * TCP through `node:net`. Ours use rstream's buffer sizes (1 MiB rings).
 */
type Kind = "C rstream" | "C rstream -T b" | "ours spin" | "ours" | "TCP";

/** Which C mode each of ours compares with. */
const PAIRS: readonly [Kind, Kind][] = [["ours spin", "C rstream"], ["ours", "C rstream -T b"]];

/** One measurement: a server and a client; returns the client's figures. */
async function measure(kind: Kind, s: Shape): Promise<Measured> {
  const port = nextPort++;
  const common = [
    "--address",
    address,
    "--port",
    String(port),
    "--size",
    String(s.size),
    "--count",
    String(s.count),
    "--iters",
    String(s.iters),
    "--warm-seconds",
    String(s.warmSeconds),
  ];
  if (kind.startsWith("C rstream")) {
    const shape = [
      "-p",
      String(port),
      "-S",
      String(s.size),
      "-C",
      String(s.count),
      "-I",
      String(s.iters),
    ];
    if (kind.endsWith("-T b")) shape.push("-T", "b");
    const server = runChild(["rstream", "-b", address, ...shape], LONG);
    await cmListening(port);
    const client = await runChild(["rstream", "-s", address, ...shape], LONG).done;
    await server.done;
    const line = client.stdout.split("\n").find((l) => l.startsWith("custom"));
    if (client.code !== 0 || !line) {
      throw new Error(`C rstream failed: ${client.stdout}${client.stderr}`);
    }
    const f = line.trim().split(/\s+/);
    return { gbps: Number(f[6]), usecPerXfer: Number(f[7]) };
  }
  const roles = kind === "TCP" ? ["tcp-server", "tcp-client"] : ["rdma-server", "rdma-client"];
  pushStrategy(kind, common);
  let ready!: () => void;
  const listening = new Promise<void>((r) => (ready = r));
  const server = runChild(me(["--role", roles[0], ...common]), {
    ...LONG,
    onLine: (l) => l === "listening" && ready(),
  });
  await Promise.race([
    listening,
    server.done.then((r) => {
      throw new Error(`${kind} server ended: ${r.stderr}`);
    }),
  ]);
  if (kind !== "TCP") await cmListening(port);
  const client = await runChild(me(["--role", roles[1], ...common]), LONG).done;
  server.kill();
  await server.done;
  const json = client.stdout.split("\n").find((l) => l.startsWith("{"));
  if (client.code !== 0 || !json) {
    throw new Error(`${kind} client failed: ${client.stdout}${client.stderr}`);
  }
  return JSON.parse(json);
}

async function main(): Promise<void> {
  if (!address) throw new Error("no address: run inside the VM or pass --address");
  const rounds = Number(arg("rounds", "3"));
  const latIters = Number(arg("lat-iters", "5000"));
  // in the guest Deno's and Bun's optimizing tiers take 20,000-40,000 round trips, 5-10 s, to
  // replace the code the first ones ran (bench/results/2026-11-28-stream-warm-up.md); the
  // warm-up goes on past this while its blocks still get faster
  const warmSeconds = Number(arg("warm-seconds", "12"));
  const bw: Shape = { size: 65536, count: Number(arg("bw-count", "500")), iters: 1, warmSeconds };
  const lat: Shape = { size: 64, count: 1, iters: latIters, warmSeconds };
  const warmRange = `${warmSeconds}-${2 * warmSeconds}`;
  const all: Kind[] = ["C rstream", "ours spin", "C rstream -T b", "ours", "TCP"];
  const only = arg("kinds", "");
  const kinds = only ? all.filter((k) => only.split(",").includes(k)) : all;
  const tput = Object.fromEntries(kinds.map((k) => [k, [] as number[]])) as Record<Kind, number[]>;
  const usec = Object.fromEntries(kinds.map((k) => [k, [] as number[]])) as Record<Kind, number[]>;
  console.log(
    `bench/stream (${runtime}, ${process.env.RDMA_DEVICE ?? "?"} at ${address}): ` +
      `${rounds} interleaved rounds; throughput: ${bw.count} × 64 KiB each way; ` +
      `latency: ${lat.iters} × 64 B round trips; ours and TCP first run the same shape untimed ` +
      `for ${warmRange} s (the JIT's warm-up, on past ${warmSeconds} s while its blocks still ` +
      `get 5 % faster: blocks of 1,000 round trips or one ` +
      `${bw.count} × 64 KiB iteration; "warm-up" shows its first and last block; C needs none)`,
  );
  // CPU contention: more runnable threads than the machine's CPUs, as on a busy server
  const busy = Number(arg("busy", "0"));
  const loops = Array.from(
    { length: busy },
    () => spawn("sh", ["-c", "while :; do :; done"], { stdio: "ignore" }),
  );
  process.on("exit", () => loops.forEach((l) => l.kill()));
  if (busy > 0) {
    console.log(`with ${busy} busy loop(s) beside every pair (shell processes that never sleep)`);
  }
  const warmNote = (m: Measured, lat: boolean) => {
    if (!m.warm) return "";
    const f = (x: Figures) => lat ? `${x.usecPerXfer.toFixed(1)}` : `${x.gbps.toFixed(3)}`;
    return ` (warm-up: ${m.warm.iterations} in ${m.warm.seconds.toFixed(1)} s, ${
      f(m.warm.first)
    } → ${f(m.warm.last)})`;
  };
  for (let r = 0; r < rounds; r++) {
    for (const k of kinds) {
      const t = await measure(k, bw);
      tput[k].push(t.gbps);
      const l = await measure(k, lat);
      usec[k].push(l.usecPerXfer);
      console.log(
        `round ${r + 1} ${k.padEnd(14)} ${t.gbps.toFixed(3)} Gb/s${warmNote(t, false)}  ${
          l.usecPerXfer.toFixed(2)
        } usec/xfer${warmNote(l, true)}`,
      );
    }
  }
  // the cost accounts and the allocation run unloaded (the exit handler covers a failed round)
  for (const l of loops) l.kill();
  // the cost accounts: what one operation costs each side, beside what rsocket's source does
  const costOps = Number(arg("cost-ops", "2000"));
  if (costOps > 0) {
    for (const kind of ["ours", "ours spin"] as const) {
      printCosts(
        `cost account, ${kind}, one 64 B round trip (${runtime}, ${costOps} round trips)`,
        await measureCost(kind, "lat", costOps),
        RSOCKET_LAT,
      );
      printCosts(
        `cost account, ${kind}, one 64 KiB transfer (${runtime}, ${costOps / 4} transfers)`,
        await measureCost(kind, "bw", costOps / 4),
        RSOCKET_BW,
      );
    }
  }
  const allocArgv = isBun ? [process.execPath, self, "--role", "alloc", "--address", address] : [
    process.execPath,
    "run",
    "-A",
    DENO_HEAP_FLAGS,
    self,
    "--role",
    "alloc",
    "--address",
    address,
  ];
  const alloc = arg("alloc", "1") === "0" ? null : await runChild(allocArgv, LONG).done;
  const allocJson = alloc?.stdout.split("\n").find((l) => l.startsWith("{"));
  console.log("\nmedians:");
  for (const k of kinds) {
    console.log(
      `${k.padEnd(14)} 64 KiB stream ${median(tput[k]).toFixed(3)} Gb/s   ` +
        `64 B ping-pong ${median(usec[k]).toFixed(2)} usec/xfer`,
    );
  }
  console.log("\nratios (throughput ours/C: higher is better; latency ours/C: lower is better):");
  for (const [o, c] of PAIRS) {
    if (!kinds.includes(o) || !kinds.includes(c)) continue;
    console.log(
      `${o} vs ${c}: throughput ${(median(tput[o]) / median(tput[c])).toFixed(2)}×, ` +
        `latency ${(median(usec[o]) / median(usec[c])).toFixed(2)}×`,
    );
  }
  if (kinds.includes("TCP") && kinds.includes("C rstream")) {
    const tcp = median(tput.TCP) / median(tput["C rstream"]);
    console.log(`TCP (${runtime}, node:net) vs C rstream: throughput ${tcp.toFixed(2)}×`);
  }
  for (const o of ["ours spin", "ours"] as const) {
    if (!kinds.includes(o) || !kinds.includes("TCP")) continue;
    console.log(
      `${o} vs TCP (${runtime}, node:net): throughput ${
        (median(tput[o]) / median(tput.TCP)).toFixed(2)
      }×, latency ${(median(usec[o]) / median(usec.TCP)).toFixed(2)}×`,
    );
  }
  if (allocJson) {
    const a = JSON.parse(allocJson);
    console.log(
      `\nheap allocated per write+read pair in the steady state (both ends in one process): ` +
        `64 B: ${a.bytesPerWriteRead64} bytes, 64 KiB: ${a.bytesPerWriteRead65536} bytes ` +
        `(the runtime's floor for two promise-returning calls: ${a.floorBytes} bytes); ` +
        `tryWrite+tryRead 64 B: ${a.bytesPerTryWriteRead64} bytes ` +
        `(${a.tryRoundsThatWaited} of ${a.tryRounds} rounds waited once)` +
        (a.gc ? "" : " (no gc() available: an upper bound)"),
    );
  } else if (alloc) console.log(`allocation measurement failed: ${alloc.stderr}`);
}

const r = arg("role", "");
if (r) await role(r);
else await main();
process.exit(0);
