/**
 * The perftest tools of bench/perftest: each tool against itself in the runtime that runs
 * this test, and against Debian's C perftest (`ib_*`) both ways, over the TCP exchange and
 * with -R (rdma_cm). Both sides must exit 0, print perftest's table header, one row per size
 * with the right byte and iteration counts and sane numbers (finite, positive, ordered like
 * perftest's statistics; never a timing threshold), and each side's remote QP must be the
 * other's local QP. The CLI tests are in
 * tests/cli.test.ts.
 */

import assert from "node:assert/strict";
import { type DeviceEnv, deviceEnv, deviceTest } from "../harness.ts";
import {
  DIRECTIONS,
  directionsFor,
  type Ended,
  INTEROP_FULL,
  killAll,
  oursAt,
  PERFTEST_TOOLS,
  port as nextPort,
  run,
  runtime,
  start,
  waitListening,
} from "./examples-common.ts";

const RUN_TIMEOUT_MS = 90_000;

type Tool = typeof PERFTEST_TOOLS[number];
const TOOLS = PERFTEST_TOOLS;

/** argv of one of our tools in this test's runtime, with the permissions its --help names. */
function ours(tool: Tool, args: string[]): string[] {
  return oursAt(`bench/perftest/${tool}.ts`, args, ["--allow-ffi", "--allow-net"]);
}

function theirs(tool: Tool, args: string[]): string[] {
  return [`ib_${tool}`, ...args];
}

const HEADER_LAT =
  " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
const HEADER_BW =
  " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";

/**
 * Whether a C tool's clock calibration failed: perftest times its cycle counter against
 * gettimeofday and, when the fit is poor (a preempted emulated guest), says so on stderr and
 * reports every time as inf/nan (its CPU frequency came out 0). Its exit code, sizes and counts
 * still stand; its times are void.
 */
const clockFailed = (k: Kind, r: Ended) =>
  k === "C" && (/Correlation coefficient r\^2: \S+ < 0\.9/.test(r.stderr) ||
    /^ *\d+ +\d+ .*\b(inf|-?nan)\b/m.test(r.stdout));

/**
 * The numeric rows under the table header (none when the side prints no table). With `timesVoid`
 * (see `clockFailed`) the columns after #bytes and #iterations may be inf/nan.
 */
function rows(name: string, r: Ended, header: string, timesVoid = false): number[][] {
  const lines = r.stdout.split("\n");
  const at = lines.indexOf(header);
  if (at < 0) return [];
  const out: number[][] = [];
  for (const line of lines.slice(at + 1)) {
    if (/^-+$/.test(line) || line.trim() === "") break;
    const cols = line.trim().split(/\s+/).map(Number);
    assert.ok(
      cols.every((c, i) => Number.isFinite(c) || (timesVoid && i >= 2)),
      `${name}: a row that is not numbers: ${JSON.stringify(line)}`,
    );
    out.push(cols);
  }
  return out;
}

/** `LID QPN PSN` of the address lines with `label`. */
function addresses(r: Ended, label: "local" | "remote"): string[] {
  return [
    ...r.stdout.matchAll(new RegExp(`^ ${label} address: (LID \\S+ QPN \\S+ PSN \\S+)`, "gm")),
  ]
    .map((m) => m[1]);
}

function checkLatRow(name: string, row: number[], size: number, iters: number): void {
  const [bytes, n, tMin, tMax, typical, avg, stdev, p99, p999] = row;
  assert.equal(row.length, 9, `${name}: 9 columns`);
  assert.equal(bytes, size, `${name}: #bytes`);
  assert.equal(n, iters, `${name}: #iterations`);
  assert.ok(tMin > 0 && stdev >= 0, `${name}: positive times ${row}`);
  assert.ok(tMin <= typical && typical <= tMax, `${name}: t_min <= t_typical <= t_max ${row}`);
  assert.ok(tMin <= avg && avg <= tMax, `${name}: t_min <= t_avg <= t_max ${row}`);
  assert.ok(typical <= p99 && p99 <= p999, `${name}: median <= 99% <= 99.9% ${row}`);
}

function checkBwRow(name: string, row: number[], size: number, iters: number, peak: boolean): void {
  const [bytes, n, bwPeak, bwAvg, rate] = row;
  assert.equal(row.length, 5, `${name}: 5 columns`);
  assert.equal(bytes, size, `${name}: #bytes`);
  assert.equal(n, iters, `${name}: #iterations`);
  assert.ok(bwAvg > 0 && rate > 0, `${name}: positive average and message rate ${row}`);
  if (peak) assert.ok(bwPeak >= 0, `${name}: peak ${row}`);
  else assert.equal(bwPeak, 0, `${name}: a send_bw receiver reports no peak`);
  // the message rate and the average agree (MB = MiB, rate in Mpps)
  const expect = (rate * 1e6 * size) / 0x100000;
  assert.ok(Math.abs(expect - bwAvg) <= 0.01 + bwAvg * 0.01, `${name}: average vs rate ${row}`);
}

type Kind = "ours" | "C";

/** Runs one pair and checks both sides. */
async function pair(
  env: DeviceEnv,
  tool: Tool,
  server: Kind,
  client: Kind,
  extra: string[],
): Promise<void> {
  const port = nextPort();
  const iters = tool.endsWith("_lat") ? 100 : 200;
  const size = tool.startsWith("atomic") ? 8 : tool.endsWith("_lat") ? 2 : 65536;
  const args = [
    "-d",
    env.device,
    "-i",
    String(env.port),
    "-x",
    String(env.gidIndex),
    "-F",
    "-p",
    String(port),
    "-n",
    String(iters),
    ...extra,
  ];
  const argv = (k: Kind, a: string[]) => (k === "ours" ? ours(tool, a) : theirs(tool, a));
  const cm = extra.includes("-R");
  const timeoutMs = RUN_TIMEOUT_MS;
  const srv = start(argv(server, args), { timeoutMs });
  try {
    await waitListening(srv, port, cm ? "rdma_cm" : "tcp");
  } catch (e) {
    killAll();
    throw e;
  }
  const cli = await run(argv(client, [...args, env.address]), { timeoutMs });
  if (cli.code !== 0) setTimeout(killAll, 3000);
  const s = await srv.ended;
  const why = (name: string, r: Ended) =>
    `${name} exited ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
  assert.equal(s.code, 0, why(`${server} server`, s));
  assert.equal(cli.code, 0, why(`${client} client`, cli));

  const lat = tool.endsWith("_lat");
  const header = lat ? HEADER_LAT : HEADER_BW;
  // a C side whose clock calibration failed reports void times; the server of a bw tool prints
  // the client's report, so the client's void figures show there too
  const cVoid = clockFailed(client, cli), sVoid = clockFailed(server, s) || (!lat && cVoid);
  const sRows = rows("server", s, header, sVoid), cRows = rows("client", cli, header, cVoid);
  assert.equal(cRows.length, 1, why("client (one table row)", cli));
  /** Runs `check` on a row, or only its #bytes and #iterations when that side's times are void. */
  const checked = (name: string, isVoid: boolean, row: number[], n: number, check: () => void) => {
    if (!isVoid) return check();
    assert.deepEqual(row.slice(0, 2), [size, n], `${name}: #bytes and #iterations`);
    console.log(`perftest: ${tool}: the C tool's clock calibration failed; its times are void`);
  };
  if (lat) {
    checked("client", cVoid, cRows[0], iters, () => checkLatRow("client", cRows[0], size, iters));
    if (tool === "read_lat" || tool === "atomic_lat") assert.equal(sRows.length, 0);
    else {
      const row = sRows[0] ?? [];
      checked("server", sVoid, row, iters, () => checkLatRow("server", row, size, iters));
    }
  } else {
    assert.equal(sRows.length, 1, why("server (one table row)", s));
    // perftest reports the iterations of all QPs together (iterations × -q)
    const q = extra.indexOf("-q");
    const total = iters * (q >= 0 ? Number(extra[q + 1]) : 1);
    if (client === "C" && cm && env.transport === "iwarp" && cRows[0][3] === 0) {
      // the C tool's own figures (as for the C receiver below): with -R on siw it has reported
      // 0 for a run that completed; its exit code and counts are what concerns this library
      assert.deepEqual(cRows[0].slice(0, 2), [size, total], "the C client's bytes and iterations");
      console.log(`perftest: ${tool} -R on iWARP: the C client reported 0 MB/s (${cRows[0]})`);
    } else {
      checked("client", cVoid, cRows[0], total, () => {
        checkBwRow("client", cRows[0], size, total, true);
      });
    }
    if (tool === "send_bw" && server === "ours") checkBwRow("server", sRows[0], size, total, false);
    else if (tool === "send_bw" || sVoid) {
      // the C receiver's own figures are not ours to check (on siw it can report 0 with -R), and
      // void times are no figures
      assert.deepEqual(sRows[0].slice(0, 2), [size, total], "the server's bytes and iterations");
    } else assert.deepEqual(sRows[0], cRows[0], "the server prints the client's report");
  }
  assert.deepEqual(
    addresses(s, "remote"),
    addresses(cli, "local"),
    "the server saw the client's QP",
  );
  assert.deepEqual(
    addresses(cli, "remote"),
    addresses(s, "local"),
    "the client saw the server's QP",
  );
  console.log(
    `  ${tool} ${extra.join(" ")} (${server} server, ${client} client, ${runtime}): ${
      cRows[0].slice(2).join(" ")
    }`,
  );
}

const notIwarpTcp = (env: DeviceEnv) =>
  env.transport === "iwarp"
    ? "iWARP connects only through rdma_cm (the -R tests run there)"
    : false;

const PAIR_TIMEOUT = 2 * RUN_TIMEOUT_MS + 30_000;
const env0 = deviceEnv();
const iwarp = !("skip" in env0) && env0.transport === "iwarp";
const noAtomicsOnIwarp = (tool: Tool) => (env: DeviceEnv) =>
  env.transport === "iwarp" && tool.startsWith("atomic") ? "soft-iWARP has no atomics" : false;

/**
 * The suite (CI) runs every tool against the C tool, over TCP and, on iWARP, with -R: two tools
 * (send_lat, write_bw) both ways, ours against ours, and with -R on IB/RoCE; the others one way
 * per runtime (`directionsFor`: each way once across the two runtimes). Each pair costs two
 * process start-ups in the emulated guest. `RDMA_INTEROP_FULL=1` runs every pair of every tool.
 */
const SAMPLED: readonly Tool[] = ["send_lat", "write_bw"];
const inSuite = (tool: Tool) => INTEROP_FULL || SAMPLED.includes(tool);
const againstC = (tool: Tool): (readonly [Kind, Kind])[] =>
  directionsFor(inSuite(tool)).map((d) => d === DIRECTIONS[0] ? ["ours", "C"] : ["C", "ours"]);

for (const tool of TOOLS) {
  // over TCP: against the C tool both ways, and ours against ours (IB/RoCE)
  const tcp = againstC(tool);
  if (inSuite(tool)) tcp.unshift(["ours", "ours"]);
  for (const [server, client] of tcp) {
    deviceTest(
      `perftest: ${tool}: ${server} server, ${client} client`,
      (env) => pair(env, tool, server, client, []),
      { timeout: PAIR_TIMEOUT, needs: notIwarpTcp },
    );
  }
  // with -R: against the C tool both ways; ours against ours where TCP cannot run (iWARP)
  const cm = iwarp || inSuite(tool) ? againstC(tool) : [];
  if (iwarp && inSuite(tool)) cm.unshift(["ours", "ours"]);
  for (const [server, client] of cm) {
    deviceTest(
      `perftest: ${tool} -R: ${server} server, ${client} client`,
      (env) => pair(env, tool, server, client, ["-R"]),
      { timeout: PAIR_TIMEOUT, needs: noAtomicsOnIwarp(tool) },
    );
  }
}

deviceTest(
  "perftest: send_bw -e over 2 QPs, ours against ours",
  (env) =>
    pair(env, "send_bw", "ours", "ours", [
      "-e",
      "-q",
      "2",
      ...(env.transport === "iwarp" ? ["-R"] : []),
    ]),
  {
    timeout: PAIR_TIMEOUT,
  },
);

deviceTest("perftest: --json prints one object per size with perftest's keys", async (env) => {
  const port = nextPort();
  const args = [
    "-d",
    env.device,
    "-x",
    String(env.gidIndex),
    "-p",
    String(port),
    "-n",
    "50",
    "--json",
  ];
  if (env.transport === "iwarp") args.push("-R");
  const srv = start(ours("read_bw", [...args, "-s", "4096"]), { timeoutMs: RUN_TIMEOUT_MS });
  await waitListening(srv, port, env.transport === "iwarp" ? "rdma_cm" : "tcp");
  const cli = await run(ours("read_bw", [...args, "-s", "4096", env.address]), {
    timeoutMs: RUN_TIMEOUT_MS,
  });
  const s = await srv.ended;
  assert.equal(cli.code, 0, cli.stderr);
  assert.equal(s.code, 0, s.stderr);
  const objs = cli.stdout.trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(objs.length, 1);
  assert.equal(objs[0].tool, "read_bw");
  assert.equal(objs[0].MsgSize, 4096);
  assert.equal(objs[0].n_iterations, 50);
  for (const k of ["BW_peak", "BW_average", "MsgRate"]) assert.equal(typeof objs[0][k], "number");
}, { timeout: 2 * RUN_TIMEOUT_MS });
