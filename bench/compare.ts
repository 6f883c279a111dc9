/**
 * The side-by-side comparison behind `deno task bench`: every workload run by Debian's C perftest
 * (`ib_*`), by this library's perftest tools in Deno and in Bun (bench/perftest), in interleaved
 * rounds (C, Deno, Bun, C, Deno, Bun, …), each pair being server and client of the same
 * implementation on the test device. Prints a markdown table (metric | C | Deno | Bun | Deno/C |
 * Bun/C, medians with the min–max spread) and writes it, with an SVG chart of latency and
 * bandwidth per message size (one line per implementation), under bench/results/.
 *
 * Every workload but the `-e` row runs in perftest's duration mode (`-D`: the tool runs for that
 * many seconds and reports only the middle half, leaving out a quarter at each end), so the
 * figures are the steady state for C and for ours alike: in the emulated guest the JIT needs
 * thousands of iterations before optimized code replaces the baseline code, which a fixed
 * iteration count of a few hundred would measure instead (start-up is bench/startup.sh's). The
 * `-e` row (events; duration mode does not take it) runs a fixed count, long enough that its
 * median iteration comes after the warm-up.
 *
 * Runs inside the soft-RoCE guest (scripts/bench boots it once); also on a real RDMA device:
 *
 *   deno run -A bench/compare.ts [--rounds N] [--quick] [--out DIR] [--only REGEX]
 *
 * `--only` runs the rows whose label matches REGEX (e.g. `--only _lat` for the latency rows), prints
 * their table and writes nothing (no cost accounts): a before/after of a few rows in one boot.
 *
 * Environment: RDMA_DEVICE, RDMA_GID_INDEX, RDMA_GUEST_IP (set by scripts/softroce-vm).
 */
import { spawnSync } from "node:child_process";
import { release } from "node:os";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { type ChildRun, runChild } from "./child.ts";
import { median } from "./median.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const { values: opts } = parseArgs({
  args: process.argv.slice(2),
  options: {
    rounds: { type: "string", default: "3" },
    quick: { type: "boolean", default: false },
    out: { type: "string", default: join(ROOT, "bench", "results") },
    extra: { type: "string", multiple: true, default: [] },
    only: { type: "string" },
  },
});
const ROUNDS = Math.max(1, Number(opts.rounds));
const env = process.env;
const device = env.RDMA_DEVICE ?? "rxe0";
const gid = env.RDMA_GID_INDEX ?? "1";
const host = env.RDMA_GUEST_IP ?? env.RDMA_ADDR ?? "127.0.0.1";
const deno = env.DENO_BIN ?? "deno";
const bun = env.BUN_BIN ?? "bun";

type Impl = "C" | "Deno" | "Bun";
const IMPLS: Impl[] = ["C", "Deno", "Bun"];

/** One measured quantity: a tool run with flags, and what to read from its table row. */
interface Workload {
  /** Row label in the table. */
  readonly label: string;
  /** perftest tool name without `ib_`. */
  readonly tool: string;
  /** Flags for both sides. */
  readonly args: string[];
  /**
   * Which column: latency (t_typical µs; t_avg in duration mode, the only latency it prints),
   * bandwidth (BW average MB/s) or message rate (Mpps).
   */
  readonly metric: "t_typical" | "t_avg" | "bw_average" | "msg_rate";
  /** Lower is better (latency) or higher (bandwidth, rate). */
  readonly lowerIsBetter: boolean;
  /** For the chart: the series it belongs to and its message size. */
  readonly chart?: { series: "latency" | "bandwidth"; size: number };
}

const base = ["-d", device, "-x", gid, "-F"];
/**
 * Seconds of each duration-mode run (the middle half is measured): the first quarter must cover
 * the JIT's warm-up. In the guest the optimizing tiers need seconds, not a count of round trips:
 * Deno's `write_lat` measured 30.6 µs with `-D 8` and 22.5 with `-D 24` in one boot
 * (bench/results/2026-11-28-stream-warm-up.md), and `-D 12` left Bun's `atomic_bw` 8-10 % and
 * Deno's `send_lat` 25-50 % short of `-D 24` (bench/results/2026-11-30-duration.md), so the quick
 * run keeps the full run's duration and only measures fewer sizes.
 */
const DURATION = "20";
/**
 * Iterations of the `-e` row, C and ours alike: its metric is perftest's typical (median) latency,
 * so at least half of them must come after the JIT's warm-up (tens of thousands of round trips in
 * the guest: an RC ping-pong through the poller took Deno 1,265 µs per round trip after 10,000
 * and 551 after 60,000, bench/results/2026-11-28-stream-warm-up.md).
 */
const EVENT_ITERS = opts.quick ? "20000" : "30000";
const lat = (size: number, extra: string[] = [], chart = true): Workload => {
  const events = extra.includes("-e");
  return {
    label: `send_lat ${size} B${events ? " (-e events)" : ""}`,
    tool: "send_lat",
    args: [
      ...base,
      "-s",
      String(size),
      ...(events ? ["-n", EVENT_ITERS] : ["-D", DURATION]),
      ...extra,
    ],
    metric: events ? "t_typical" : "t_avg",
    lowerIsBetter: true,
    chart: chart && !extra.length ? { series: "latency", size } : undefined,
  };
};
const bw = (tool: string, size: number, chart = false): Workload => ({
  label: `${tool} ${size >= 1024 ? `${size / 1024} KiB` : `${size} B`}`,
  tool,
  args: [...base, "-s", String(size), "-D", DURATION],
  metric: "bw_average",
  lowerIsBetter: false,
  chart: chart ? { series: "bandwidth", size } : undefined,
});

/** The workloads of a quick run: the first nine (the others add message sizes). */
const QUICK_WORKLOADS = 9;

const ALL_WORKLOADS: Workload[] = [
  lat(64, []),
  lat(64, ["-e"]),
  { ...lat(64, [], false), label: "write_lat 64 B", tool: "write_lat" },
  { ...lat(64, [], false), label: "read_lat 64 B", tool: "read_lat" },
  { ...lat(8, [], false), label: "atomic_lat 8 B", tool: "atomic_lat" },
  { ...bw("send_bw", 4096), label: "send_bw 4 KiB (message rate)", metric: "msg_rate" },
  bw("write_bw", 65536, true),
  bw("read_bw", 65536),
  { ...bw("atomic_bw", 8), metric: "msg_rate", label: "atomic_bw 8 B (message rate)" },
  ...(opts.quick ? [] : [lat(2), lat(1024), lat(4096), lat(16384)]),
  ...(opts.quick
    ? []
    : [bw("write_bw", 1024, true), bw("write_bw", 4096, true), bw("write_bw", 16384, true)]),
];
const ONLY = opts.only === undefined ? null : new RegExp(opts.only);
const WORKLOADS = ONLY === null ? ALL_WORKLOADS : ALL_WORKLOADS.filter((w) => ONLY.test(w.label));

function argv(impl: Impl, tool: string, args: string[]): string[] {
  const file = join(ROOT, "bench", "perftest", `${tool}.ts`);
  if (impl === "C") return [`ib_${tool}`, ...args];
  if (impl === "Deno") {
    return [
      deno,
      "run",
      "--allow-ffi",
      "--allow-net",
      "--allow-env=RDMA_VERBS_COUNT",
      file,
      ...args,
    ];
  }
  return [bun, file, ...args];
}

let port = 18515 + Math.floor(Math.random() * 2000);

/** The first numeric row under perftest's header, as numbers. */
function row(text: string): number[] | null {
  const lines = text.split("\n");
  const at = lines.findIndex((l) => /^\s*#bytes/.test(l));
  if (at < 0) return null;
  for (const l of lines.slice(at + 1)) {
    const nums = l.trim().split(/\s+/).map(Number);
    if (nums.length >= 4 && nums.every((n) => Number.isFinite(n))) return nums;
  }
  return null;
}

function value(w: Workload, r: number[]): number {
  // lat: #bytes #iters t_min t_max t_typical ...; lat -D: #bytes #iters t_avg tps;
  // bw: #bytes #iters BW_peak BW_average MsgRate
  if (w.metric === "t_typical") return r[4];
  if (w.metric === "t_avg") return r[2];
  if (w.metric === "bw_average") return r[3];
  return r[4];
}

/** What one run of a pair printed. */
interface PairRun {
  client: ChildRun | null;
  server: ChildRun;
}

/** Runs one server/client pair of `impl` (with `extraEnv` in both). */
async function runPair(impl: Impl, w: Workload, extraEnv?: Record<string, string>) {
  const p = String(port++);
  const options = { timeoutMs: 180_000, env: extraEnv, cwd: ROOT };
  const server = runChild(argv(impl, w.tool, [...w.args, "-p", p]), options);
  await new Promise((r) => setTimeout(r, impl === "C" ? 300 : 2500));
  let client: ChildRun | null = null;
  for (let attempt = 0; attempt < 20 && (client === null || client.code !== 0); attempt++) {
    client = await runChild(argv(impl, w.tool, [...w.args, "-p", p, host]), options).done;
    if (client.code === 0) break;
    if (!/connect|refused|Couldn't/i.test(client.stderr + client.stdout)) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  return { client, server: await server.done } satisfies PairRun;
}

/** One server/client pair of `impl`; the client's row value, or null (with the reason printed). */
async function pair(impl: Impl, w: Workload): Promise<number | null> {
  const { client, server: s } = await runPair(impl, w);
  const r = client && row(client.stdout) || row(s.stdout);
  if (!client || client.code !== 0 || !r) {
    console.error(
      `bench: ${impl} ${w.label} failed (client ${client?.code}, server ${s.code}): ${
        (client?.stderr ?? "").slice(-300)
      } ${s.stderr.slice(-300)}`,
    );
    return null;
  }
  return value(w, r);
}

const results = new Map<string, Record<Impl, number[]>>();
for (const w of WORKLOADS) results.set(w.label, { C: [], Deno: [], Bun: [] });

const t0 = performance.now();
for (let round = 0; round < ROUNDS; round++) {
  for (const w of WORKLOADS) {
    for (const impl of IMPLS) {
      const v = await pair(impl, w);
      if (v !== null) results.get(w.label)![impl].push(v);
    }
  }
  console.error(
    `bench: round ${round + 1}/${ROUNDS} done (${((performance.now() - t0) / 1000).toFixed(0)} s)`,
  );
}

const fmt = (v: number) =>
  !Number.isFinite(v)
    ? "–"
    : v >= 100
    ? v.toFixed(0)
    : v >= 10
    ? v.toFixed(1)
    : v >= 1
    ? v.toFixed(2)
    : v.toPrecision(3); // message rates in Mpps: three significant digits
const spread = (xs: number[]) =>
  xs.length ? `${fmt(median(xs))} (${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))})` : "–";
const unit = (w: Workload) =>
  w.metric === "t_typical"
    ? "µs, typical"
    : w.metric === "t_avg"
    ? "µs, average"
    : w.metric === "bw_average"
    ? "MB/s"
    : "Mpps";
const ratio = (x: number[], c: number[]) => {
  const r = median(x) / median(c);
  return Number.isFinite(r) ? `${r.toFixed(2)}×` : "–";
};

const date = new Date().toISOString().slice(0, 10);
/** `cmd --version`'s first version-looking word. */
function versionOf(cmd: string): string {
  const out = spawnSync(cmd, ["--version"], { encoding: "utf8" });
  return `${out.stdout ?? ""}${out.stderr ?? ""}`.match(/\d+\.\d+(\.\d+)?/)?.[0] ?? "?";
}
/** Whether the CPU offers memory protection keys (in the guest: QEMU flushes its TLB on each PKRU write). */
function hasPku(): boolean {
  try {
    return /^flags\s*:.*\bpku\b/m.test(readFileSync("/proc/cpuinfo", "utf8"));
  } catch {
    return false;
  }
}
const lines = [
  `Measured ${date} on ${device} (${
    env.RDMA_VM === "1"
      ? `soft-RoCE guest, QEMU TCG, CPU ${hasPku() ? "with" : "without"} protection keys`
      : "local device"
  }), ` +
  `kernel ${release()}, Deno ${versionOf(deno)}, Bun ${versionOf(bun)}, rdma-core's perftest ${
    versionOf("ib_send_lat")
  }; ` +
  `${ROUNDS} interleaved rounds; medians with min–max. Ratios: ours / C (latency: lower is better; ` +
  `bandwidth and message rate: higher is better). Duration mode (-D ${DURATION}, the middle half ` +
  `measured) for every row but -e: the steady state, after the JIT's warm-up.`,
  "",
  "| metric | C | Deno | Bun | Deno/C | Bun/C |",
  "|---|---|---|---|---|---|",
];
for (const w of WORKLOADS) {
  const r = results.get(w.label)!;
  lines.push(
    `| ${w.label} (${unit(w)}) | ${spread(r.C)} | ${spread(r.Deno)} | ${spread(r.Bun)} | ${
      ratio(r.Deno, r.C)
    } | ${ratio(r.Bun, r.C)} |`,
  );
}

/**
 * perftest's cost of one iteration, read from its source (`src/perftest_resources.c`,
 * `run_iter_lat_send`, `run_iter_lat`, `run_iter_lat_write`, `run_iter_bw`,
 * `run_iter_bw_server`): what the C loop calls per message. "+ empty" counts the polls that find
 * nothing while it spins; a C loop has no event loop, promises or heap.
 */
const PERFTEST: Record<string, string> = {
  send_lat: "post_send 1, post_recv 1, poll_cq 1 + empty (send CQ: 1 per cq_mod)",
  write_lat:
    "post_send 1, poll_cq 1 + empty after the post (every write signalled); the wait spins on memory (no call)",
  read_lat: "post_send 1, poll_cq 1 + empty",
  atomic_lat: "post_send 1, poll_cq 1 + empty",
  send_bw: "client: post_send 1, poll_cq 1 per 16 completions (1 per cq_mod=100 messages) + empty",
  write_bw: "post_send 1, poll_cq 1 per 16 completions (1 per cq_mod=100 messages) + empty",
  read_bw: "post_send 1, poll_cq 1 per 16 completions (1 per cq_mod=100 messages) + empty",
  atomic_bw: "post_send 1, poll_cq 1 per 16 completions (1 per cq_mod=100 messages) + empty",
};

/** One `cost {...}` line a tool printed on stderr (RDMA_VERBS_COUNT=1), or null. */
function costOf(r: ChildRun | null): Record<string, unknown> | null {
  const l = r?.stderr.split("\n").find((x) => x.startsWith("cost "));
  return l ? JSON.parse(l.slice(5)).perIteration : null;
}

/** A cost account as one cell: FFI calls by symbol, then the event-loop counters. */
function costCell(c: Record<string, unknown> | null): string {
  if (!c) return "–";
  const calls = Object.entries(c.calls as Record<string, number>).map(([k, v]) => `${k} ${v}`);
  const loop = ["emptyPolls", "wakes", "yields", "timers", "waits"]
    .map((k) => `${k} ${c[k]}`);
  return `${calls.join(", ")}; ${loop.join(", ")}`;
}

/** `w` with a fixed iteration count instead of a duration: counts are per iteration. */
function counted(w: Workload): Workload {
  const at = w.args.indexOf("-D");
  if (at < 0) return w;
  return { ...w, args: [...w.args.slice(0, at), "-n", "1000", ...w.args.slice(at + 2)] };
}

/**
 * The cost account of one iteration of each loop (ours counted with `RDMA_VERBS_COUNT=1`, one
 * extra run per runtime and workload), beside perftest's read from its source.
 */
async function costAccounts(): Promise<string[]> {
  const out = [
    "Cost of one iteration (client side; send_bw also the receiver), counted with " +
    "RDMA_VERBS_COUNT=1 in one extra run per runtime, beside perftest's from its source:",
    "",
    "| loop | Deno | Bun | perftest (C, from source) |",
    "|---|---|---|---|",
  ];
  for (const w of WORKLOADS.slice(0, QUICK_WORKLOADS)) {
    const cells: string[] = [];
    for (const impl of ["Deno", "Bun"] as const) {
      const { client, server } = await runPair(impl, counted(w), { RDMA_VERBS_COUNT: "1" });
      let cell = costCell(costOf(client));
      if (w.tool === "send_bw") cell += `<br>receiver: ${costCell(costOf(server))}`;
      cells.push(cell);
    }
    out.push(`| ${w.label} | ${cells.join(" | ")} | ${PERFTEST[w.tool] ?? ""} |`);
  }
  return out;
}

/** An SVG with two panels (latency and bandwidth vs message size), one line per implementation. */
function chart(): string {
  const W = 900, H = 360, pad = 50, panel = (W - 3 * pad) / 2;
  const colors: Record<Impl, string> = { C: "#444", Deno: "#1a7f37", Bun: "#c2410c" };
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
  ];
  (["latency", "bandwidth"] as const).forEach((series, k) => {
    const x0 = pad + k * (panel + pad), y0 = H - pad, h = H - 2 * pad;
    const pts = WORKLOADS.filter((w) => w.chart?.series === series);
    const sizes = [...new Set(pts.map((w) => w.chart!.size))].sort((a, b) => a - b);
    const all = pts.flatMap((w) => IMPLS.map((i) => median(results.get(w.label)![i])))
      .filter(Number.isFinite);
    const ymax = Math.max(1, ...all) * 1.1;
    const lx = (s: number) =>
      x0 + (sizes.length < 2 ? panel / 2 : (Math.log2(s) - Math.log2(sizes[0])) /
        (Math.log2(sizes[sizes.length - 1]) - Math.log2(sizes[0])) * panel);
    const ly = (v: number) => y0 - v / ymax * h;
    out.push(
      `<text x="${x0 + panel / 2}" y="${pad - 20}" text-anchor="middle" font-size="13">${
        series === "latency" ? "send latency, average (µs)" : "RDMA write bandwidth (MB/s)"
      }</text>`,
      `<line x1="${x0}" y1="${y0}" x2="${x0 + panel}" y2="${y0}" stroke="#999"/>`,
      `<line x1="${x0}" y1="${y0}" x2="${x0}" y2="${y0 - h}" stroke="#999"/>`,
    );
    for (const s of sizes) {
      out.push(
        `<text x="${lx(s)}" y="${y0 + 14}" text-anchor="middle">${
          s >= 1024 ? `${s / 1024}K` : s
        }</text>`,
      );
    }
    for (let t = 0; t <= 4; t++) {
      const v = ymax * t / 4;
      out.push(`<text x="${x0 - 4}" y="${ly(v) + 4}" text-anchor="end">${fmt(v)}</text>`);
    }
    IMPLS.forEach((impl, n) => {
      const p = sizes.map((s) => {
        const w = pts.find((x) => x.chart!.size === s)!;
        return [lx(s), ly(median(results.get(w.label)![impl]))] as const;
      }).filter(([, y]) => Number.isFinite(y));
      if (p.length) {
        out.push(
          `<polyline fill="none" stroke="${colors[impl]}" stroke-width="2" points="${
            p.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ")
          }"/>`,
        );
      }
      out.push(
        `<text x="${x0 + panel - 60}" y="${y0 - h + 14 * (n + 1)}" fill="${
          colors[impl]
        }">${impl}</text>`,
      );
    });
  });
  out.push("</svg>");
  return out.join("\n");
}

if (ONLY !== null) {
  console.log(lines.join("\n"));
  process.exit(0);
}
const table = [...lines, "", ...await costAccounts()].join("\n");
console.log(table);
mkdirSync(opts.out, { recursive: true });
const md =
  `# Benchmarks: C perftest vs @rdma/verbs in Deno and Bun\n\n${table}\n\n![latency and bandwidth](latest.svg)\n`;
writeFileSync(join(opts.out, `${date}.md`), md);
writeFileSync(join(opts.out, "latest.md"), md);
const svg = chart();
writeFileSync(join(opts.out, `${date}.svg`), svg);
writeFileSync(join(opts.out, "latest.svg"), svg);
console.error(`bench: wrote ${join("bench", "results", "latest.md")} and latest.svg`);
