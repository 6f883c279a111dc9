/**
 * The bulk path: 64 MiB moved between two processes by `iowrite` (rsocket's iomap), by a remote
 * buffer's `write` and `read` (RDMA WRITE/READ by token), and by plain stream writes, beside C
 * `riostream`, C `rstream` and perftest's `ib_write_bw`/`ib_read_bw`, in interleaved rounds in
 * one run. Run it where there is an RDMA device (the soft-RoCE guest), once per runtime:
 *
 *   scripts/softroce-vm -- node_modules/.bin/deno run -A bench/iomap.ts
 *   scripts/softroce-vm -- node_modules/.bin/bun bench/iomap.ts
 *
 * Rows (each a fresh pair of processes per round; medians over the rounds; no timing is
 * asserted anywhere):
 *
 * - `riostream` / `rstream` with `-S 1048576 -C 64 -I 1` (64 transfers of 1 MiB each way, a
 *   ping-pong: 128 MiB in all), C against this library's ports (examples/riostream.ts,
 *   examples/rstream.ts): their own Gb/sec figure (bytes of both directions), and the ratio.
 *   The ports start cold: their JIT's warm-up (compiler threads taking a vCPU from the kernel's
 *   rxe work) falls inside the timed transfers, about 0.3 s in the guest. So `riostream` runs
 *   once more per round with `--long` times the transfers (default 4: 256 MiB each way), where
 *   that fixed cost weighs a quarter as much.
 * - `ib_write_bw` / `ib_read_bw` with 1 MiB messages, 64 iterations: BW average MiB/s.
 * - ours one way, client → server in one connection (roles of this file): 64 MiB as 64 stream
 *   writes of 1 MiB; as 64 `iowrite`s of 1 MiB into a 64 MiB mapping; as 64 remote `write`s and
 *   64 remote `read`s of 1 MiB of a 64 MiB exposure, zero copy (the local side is exposed
 *   memory) and staged (plain arrays). A write is timed until the server has acknowledged a
 *   stream message sent after it (so the bytes have landed); MiB/s, and the ratio to perftest's
 *   at the same message size (writes to `ib_write_bw`, reads to `ib_read_bw`). The client first
 *   runs passes of all six modes untimed for at least `--warm-seconds`, and on while they still
 *   get faster (bench/warm-up.ts: the JIT's warm-up; in the guest the optimizing tiers take
 *   seconds; C needs none), then times one pass.
 *
 * Each round's figures are printed as it ends; a ratio is the median over the rounds of the ratio
 * within each round (runs next to each other share the guest's drift).
 *
 * After the rounds, one more run of ours one way with `RDMA_VERBS_COUNT=1` prints the cost account
 * of one 1 MiB operation of each mode on the client (FFI calls by symbol and the µs spent in them,
 * empty polls, poller wake-ups, waits), beside what rsocket's `riowrite` and perftest make per
 * 1 MiB, read from their source. Its times are not used: counting slows the calls.
 *
 * Options: --rounds N (default 3), --mib N (default 64; perftest takes 5 or more), --long N
 * (default 4; 0: no long row), --warm-seconds S (default 12), --address IP (default
 * $RDMA_GUEST_IP), --device NAME (default $RDMA_DEVICE or rxe0), --gid N (default
 * $RDMA_GID_INDEX or 1).
 */

import process from "node:process";
import { spawnSync } from "node:child_process";
import { connect, listen, type RdmaConn } from "../stream/mod.ts";
import { COST_COUNTING, resetCostCounts } from "../mod.ts";
import { costLine, costsPerOperation } from "./cost-per-op.ts";
import { warmUp } from "./warm-up.ts";
import { median } from "./median.ts";
import { type Child, type ChildRun, runChild } from "./child.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const isBun = "Bun" in globalThis;
const runtime = isBun ? "bun" : "deno";
const self = new URL(import.meta.url).pathname;
const ROOT = new URL("../", import.meta.url).pathname;
const env = process.env;
/** Children run from the package's root. */
const AT_ROOT = { cwd: ROOT };
const address = arg("address", env.RDMA_GUEST_IP || env.RDMA_ADDR || "");
const device = arg("device", env.RDMA_DEVICE || "rxe0");
const gid = arg("gid", env.RDMA_GID_INDEX || "1");
const ROUNDS = Math.max(1, Number(arg("rounds", "3")));
const MIB = Math.max(1, Number(arg("mib", "64")));
/** Seconds of untimed passes before the timed one (ours; C needs no warm-up). */
const WARM_SECONDS = Math.max(0, Number(arg("warm-seconds", "12")));
/** The long `riostream` row's transfers, as a multiple of `--mib` (0: no long row). */
const LONG = Math.max(0, Math.floor(Number(arg("long", "4"))));
const CHUNK = 1 << 20;
const TOTAL = MIB * CHUNK;

// ------------------------------------------------------------------ the two roles of ours

/** The modes of one connection, in order; the client times each, the server serves it. */
const MODES = [
  "stream write",
  "iowrite",
  "remote write (zero copy)",
  "remote write (staged)",
  "remote read (zero copy)",
  "remote read (staged)",
] as const;

async function readExactly(conn: RdmaConn, buf: Uint8Array): Promise<void> {
  const n = await conn.read(buf, { min: buf.length });
  if (n === null || n < buf.length) throw new Error("end of stream");
}

const one = new Uint8Array(1);

/**
 * The server: a 64 MiB mapping for iowrite and a 64 MiB exposure; serves passes of the modes
 * (each announced by a byte from the client) until the client ends the stream.
 */
async function server(): Promise<void> {
  const listener = listen({ hostname: address, port: 0, iomapSize: 1 });
  console.log(JSON.stringify({ port: listener.addr.port }));
  const conn = await listener.accept({ timeout: 120_000 });
  listener.close();
  const map = conn.iomap(TOTAL, { offset: 0 });
  const mem = conn.expose(TOTAL, { read: true, write: true });
  await conn.write(mem.token); // (the iomap entry goes before it)
  const sink = new Uint8Array(CHUNK);
  // a pass byte, or the end; reads need nothing from this side, so it waits here meanwhile
  while ((await conn.read(one)) !== null) {
    // stream write: read everything, then acknowledge
    for (let got = 0; got < TOTAL;) {
      const n = await conn.read(sink);
      if (n === null) throw new Error("end of stream");
      got += n;
    }
    await conn.write(one);
    // iowrite and the two remote writes: the client's "landed" byte, acknowledged
    for (let i = 0; i < 3; i++) {
      await readExactly(conn, one);
      await conn.write(one);
    }
  }
  void map;
  conn.close();
  await conn.released;
}

/**
 * The client: runs passes of every mode untimed (the JIT's warm-up, bench/warm-up.ts), then
 * one timed pass; prints {mode: MiB/s} of that pass (and with counting, its cost account).
 */
async function client(port: number): Promise<void> {
  const conn = await connect({ hostname: address, port });
  const remote = await conn.readRemote();
  const local = conn.expose(CHUNK, { read: false, write: false });
  const plain = new Uint8Array(CHUNK);
  for (let i = 0; i < CHUNK; i++) plain[i] = local.buffer[i] = i & 0xff;
  const out: Record<string, number> = {};
  const costs: Record<string, string> = {};
  let timed = false;
  const time = async (mode: string, f: () => Promise<unknown>) => {
    if (!timed) return void await f();
    if (COST_COUNTING) resetCostCounts();
    const t0 = performance.now();
    await f();
    out[mode] = TOTAL / CHUNK / ((performance.now() - t0) / 1000);
    if (COST_COUNTING) costs[mode] = costLine(costsPerOperation(TOTAL / CHUNK), true);
  };
  const ack = async () => {
    await conn.write(one);
    await readExactly(conn, one);
  };
  const all = (f: (i: number) => Promise<unknown>) =>
    Promise.all(Array.from({ length: TOTAL / CHUNK }, (_, i) => f(i)));
  const into = Array.from({ length: 4 }, () => new Uint8Array(CHUNK));
  const pass = async () => {
    await conn.write(one); // the server's cue for the next pass
    await time(MODES[0], async () => {
      for (let off = 0; off < TOTAL; off += CHUNK) await conn.write(plain);
      await readExactly(conn, one);
    });
    await time(MODES[1], async () => {
      for (let off = 0; off < TOTAL; off += CHUNK) await conn.iowrite(plain, off);
      await ack();
    });
    await time(MODES[2], async () => {
      await all((i) => remote.write(i * CHUNK, local.buffer));
      await ack();
    });
    await time(MODES[3], async () => {
      await all((i) => remote.write(i * CHUNK, plain));
      await ack();
    });
    await time(MODES[4], () => all((i) => remote.read(i * CHUNK, local.buffer)));
    await time(MODES[5], () => all((i) => remote.read(i * CHUNK, into[i % 4])));
  };
  const warm = await warmUp(WARM_SECONDS, pass);
  timed = true;
  await pass();
  if (COST_COUNTING) console.log("cost " + JSON.stringify(costs));
  console.log(JSON.stringify({ ...out, "untimed warm-up passes": warm.steps }));
  await conn.closeWrite();
  conn.close();
  await conn.released;
}

/**
 * What C makes per 1 MiB, from the source: rsocket's `riowrite` starts at RS_OLAP_START_SIZE
 * (2 KiB) and doubles up to RS_MAX_TRANSFER (64 KiB), so 1 MiB leaves as 2 + 4 + 8 + 16 + 32 KiB
 * and 16 more WRITEs (15 of 64 KiB, one of 2 KiB), each copied into its send buffer and signalled;
 * it polls one completion per `ibv_poll_cq` call. perftest posts one WR per message and polls
 * in batches (up to 16 completions per call, one signalled WR per `cq_mod`).
 */
const C_REFERENCE: Record<string, string> = {
  "stream write": "rsend: 21 post_send (the same 2 KiB start, doubling), 21+ poll_cq",
  "iowrite": "riowrite: 21 post_send, 21+ poll_cq (+1 empty per drain)",
  "remote write (zero copy)": "ib_write_bw: 1 post_send, ≤ 1 poll_cq",
  "remote write (staged)": "ib_write_bw: 1 post_send, ≤ 1 poll_cq",
  "remote read (zero copy)": "ib_read_bw: 1 post_send, ≤ 1 poll_cq",
  "remote read (staged)": "ib_read_bw: 1 post_send, ≤ 1 poll_cq",
};

// ------------------------------------------------------------------ running pairs

function ours(file: string, args: string[]): string[] {
  return isBun
    ? [process.execPath, file, ...args]
    : [process.execPath, "run", "-A", "--no-check", file, ...args];
}

/** True once an rdma_cm id listens on `port`. */
function listening(port: number): boolean {
  const r = spawnSync("rdma", ["res", "show", "cm_id"], { encoding: "utf8" });
  return (r.stdout ?? "").split("\n").some((l) =>
    / state LISTEN /.test(l) && l.includes(`:${port}`)
  );
}

let nextPort = 21000 + Math.floor(Math.random() * 2000) + (isBun ? 3000 : 0);

/** Runs a server and its client; resolves with both outputs (null on failure, reason printed). */
async function pairRun(
  what: string,
  serverArgv: (port: string) => string[],
  clientArgv: (port: string) => string[],
  wait: "cm" | "tcp",
): Promise<{ client: ChildRun; server: ChildRun } | null> {
  const p = String(nextPort++);
  const srv = runChild(serverArgv(p), AT_ROOT);
  let srvEnded = false;
  srv.done.then(() => (srvEnded = true));
  if (wait === "cm") {
    const end = Date.now() + 60_000;
    while (!listening(Number(p)) && !srvEnded && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
    }
  } else await new Promise((r) => setTimeout(r, 500));
  let cl = await runChild(clientArgv(p), AT_ROOT).done;
  // perftest's server listens on TCP first: retry a refused client briefly
  for (let i = 0; wait === "tcp" && cl.code !== 0 && !srvEnded && i < 20; i++) {
    await new Promise((r) => setTimeout(r, 500));
    cl = await runChild(clientArgv(p), AT_ROOT).done;
  }
  const s = await srv.done;
  if (cl.code !== 0 || s.code !== 0) {
    console.error(
      `bench: ${what} failed (client ${cl.code}, server ${s.code}):\n${cl.stderr.slice(-400)}\n${
        s.stderr.slice(-400)
      }`,
    );
    srv.kill();
    return null;
  }
  return { client: cl, server: s };
}

/** The Gb/sec column of an rstream/riostream result line. */
function gbps(stdout: string): number | null {
  const line = stdout.split("\n").find((l) => /^custom\s/.test(l));
  if (!line) return null;
  const cols = line.trim().split(/\s+/);
  return Number(cols[6]);
}

/** BW average (MiB/s) of perftest's first result row. */
function bwAverage(stdout: string): number | null {
  const lines = stdout.split("\n");
  const at = lines.findIndex((l) => /^\s*#bytes/.test(l));
  for (const l of lines.slice(at + 1)) {
    const nums = l.trim().split(/\s+/).map(Number);
    if (nums.length >= 4 && nums.every(Number.isFinite)) return nums[3];
  }
  return null;
}

async function rsocketTool(
  tool: "riostream" | "rstream",
  c: boolean,
  transfers = MIB,
): Promise<number | null> {
  const args = ["-S", String(CHUNK), "-C", String(transfers), "-I", "1"];
  const argv = (a: string[]) => c ? [tool, ...a] : ours(`${ROOT}examples/${tool}.ts`, a);
  const r = await pairRun(
    `${c ? "C" : "our"} ${tool}`,
    (p) => argv(["-b", address, "-p", p, ...args]),
    (p) => argv(["-s", address, "-p", p, ...args]),
    "cm",
  );
  return r ? gbps(r.client.stdout) : null;
}

async function perftest(tool: "write_bw" | "read_bw"): Promise<number | null> {
  const args = ["-d", device, "-x", gid, "-F", "-s", String(CHUNK), "-n", String(MIB)];
  const r = await pairRun(
    `ib_${tool}`,
    (p) => [`ib_${tool}`, ...args, "-p", p],
    (p) => [`ib_${tool}`, ...args, "-p", p, address],
    "tcp",
  );
  return r ? bwAverage(r.client.stdout) : null;
}

/** Ours one way: {mode: MiB/s}, and with `counting` the client's cost account per mode. */
async function oursOneWay(counting = false): Promise<
  { rates: Record<string, number>; costs: Record<string, string> } | null
> {
  const countEnv: Record<string, string> = counting ? { RDMA_VERBS_COUNT: "1" } : {};
  const srv: Child = runChild(
    ours(self, ["--role", "server", "--address", address, "--mib", String(MIB)]),
    { ...AT_ROOT, env: countEnv },
  );
  const end = Date.now() + 60_000;
  let port = 0;
  let ended = false;
  srv.done.then(() => (ended = true));
  while (port === 0 && !ended && Date.now() < end) {
    const m = /\{"port":(\d+)\}/.exec(srv.stdout());
    if (m) port = Number(m[1]);
    else await sleep(100);
  }
  if (port === 0) {
    srv.kill();
    console.error(`bench: our server did not start: ${(await srv.done).stderr.slice(-400)}`);
    return null;
  }
  const cl = await runChild(
    ours(self, [
      "--role",
      "client",
      String(port),
      "--address",
      address,
      "--mib",
      String(MIB),
      "--warm-seconds",
      String(WARM_SECONDS),
    ]),
    { ...AT_ROOT, env: countEnv },
  ).done;
  const s = await srv.done;
  if (cl.code !== 0 || s.code !== 0) {
    console.error(`bench: ours one way failed:\n${cl.stderr.slice(-600)}\n${s.stderr.slice(-600)}`);
    return null;
  }
  const lines = cl.stdout.trim().split("\n");
  const cost = lines.find((l) => l.startsWith("cost "));
  return { rates: JSON.parse(lines.at(-1)!), costs: cost ? JSON.parse(cost.slice(5)) : {} };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const fmt = (x: number) => Number.isFinite(x) ? x.toFixed(x >= 100 ? 0 : x >= 10 ? 1 : 2) : "—";

async function main(): Promise<void> {
  if (!address) throw new Error("no address: set RDMA_GUEST_IP or pass --address");
  // samples by round (a failed run leaves its round empty), so that ratios pair runs of one round
  const samples = new Map<string, (number | undefined)[]>();
  let round = 0;
  const add = (k: string, v: number | null) => {
    if (v === null || !Number.isFinite(v)) return;
    const xs = samples.get(k) ?? [];
    xs[round - 1] = v;
    samples.set(k, xs);
  };
  for (round = 1; round <= ROUNDS; round++) {
    // interleaved: each round runs every row once, C and ours alternating
    add("C riostream", await rsocketTool("riostream", true));
    add("our riostream", await rsocketTool("riostream", false));
    if (LONG > 0) {
      add("C riostream long", await rsocketTool("riostream", true, LONG * MIB));
      add("our riostream long", await rsocketTool("riostream", false, LONG * MIB));
    }
    add("C rstream", await rsocketTool("rstream", true));
    add("our rstream", await rsocketTool("rstream", false));
    add("ib_write_bw", await perftest("write_bw"));
    add("ib_read_bw", await perftest("read_bw"));
    const o = await oursOneWay();
    if (o) { for (const [k, v] of Object.entries(o.rates)) add(k, v); }
    const got = [...samples].filter(([, xs]) => xs[round - 1] !== undefined);
    console.log(
      `round ${round}: ${got.map(([k, xs]) => `${k} ${fmt(xs[round - 1]!)}`).join(", ")}`,
    );
  }
  const values = (k: string) => (samples.get(k) ?? []).filter((x): x is number => x !== undefined);
  const m = (k: string) => median(values(k));
  const n = (k: string) => values(k).length;
  /** The median over the rounds of `a / b` within each round (both ran in it). */
  const ratio = (a: string, b: string) => {
    const xs = samples.get(a) ?? [], ys = samples.get(b) ?? [];
    const r: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      if (xs[i] !== undefined && ys[i] !== undefined) r.push(xs[i]! / ys[i]!);
    }
    return median(r);
  };
  const lines: string[] = [];
  lines.push(
    `${runtime}, ${device}, ${MIB} MiB, medians of ${ROUNDS} interleaved rounds (n = samples); ` +
      "ratios: the median of the ratios within each round",
  );
  lines.push("");
  lines.push("| ping-pong, -S 1 MiB -C " + MIB + " -I 1 | C Gb/s | ours Gb/s | ours / C |");
  lines.push("| --- | ---: | ---: | ---: |");
  const rows = [["riostream", "riostream (iowrite)"], ["rstream", "rstream (stream writes)"]];
  if (LONG > 0) rows.push(["riostream long", `riostream (iowrite), -C ${LONG * MIB}`]);
  for (const [key, label] of rows) {
    const c = m(`C ${key}`), o = m(`our ${key}`);
    lines.push(
      `| ${label} | ${fmt(c)} (n=${n(`C ${key}`)}) | ${fmt(o)} (n=${n(`our ${key}`)}) | ${
        fmt(ratio(`our ${key}`, `C ${key}`))
      } |`,
    );
  }
  lines.push("");
  lines.push(`| one way, ${MIB} × 1 MiB | MiB/s | perftest MiB/s | ours / perftest |`);
  lines.push("| --- | ---: | ---: | ---: |");
  const wb = m("ib_write_bw"), rb = m("ib_read_bw");
  lines.push(`| ib_write_bw 1 MiB | ${fmt(wb)} (n=${n("ib_write_bw")}) | | |`);
  lines.push(`| ib_read_bw 1 MiB | ${fmt(rb)} (n=${n("ib_read_bw")}) | | |`);
  for (const mode of MODES) {
    const v = m(mode);
    const ref = mode.includes("read") ? "ib_read_bw" : "ib_write_bw";
    lines.push(
      `| ${mode} | ${fmt(v)} (n=${n(mode)}) | ${fmt(m(ref))} | ${fmt(ratio(mode, ref))} |`,
    );
  }
  const counted = await oursOneWay(true);
  if (counted) {
    lines.push("");
    lines.push(
      `cost of one 1 MiB operation, client side (${runtime}, one run with RDMA_VERBS_COUNT=1, ` +
        `${MIB} operations per mode)`,
    );
    lines.push("");
    lines.push("| mode | ours | C (from source) |");
    lines.push("| --- | --- | --- |");
    for (const mode of MODES) {
      lines.push(`| ${mode} | ${counted.costs[mode] ?? "—"} | ${C_REFERENCE[mode]} |`);
    }
  }
  console.log(lines.join("\n"));
}

const role = arg("role", "");
if (role === "server") await server();
else if (role === "client") await client(Number(process.argv[process.argv.indexOf("client") + 1]));
else await main();
