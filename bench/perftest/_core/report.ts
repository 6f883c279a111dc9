/**
 * perftest's statistics and its output: the test banner, the address lines, the result
 * tables with perftest's header and column layout (byte for byte, including its tabs), and
 * the `--json` objects (one per message size, with the keys of perftest's JSON report).
 *
 * Latency: the samples are the times between consecutive posts (one round trip each), halved
 * for send/write (a one-way latency); the two largest are dropped; t_typical is the median,
 * t_max the largest kept sample, the percentiles index the sorted kept samples like perftest.
 * t_stdev is the standard deviation of the kept samples (perftest truncates each deviation to
 * whole microseconds before squaring; this one does not).
 * Bandwidth: the average over the whole run; the peak is the best rate over any run of
 * consecutive messages that ends on a signalled completion, as perftest computes it.
 *
 * @module
 */

import { runtimeInfo } from "../../../mod.ts";
import type { Settings } from "./cli.ts";
import type { BwReport, Dest } from "./oob.ts";

/** perftest's separator line. */
export const RESULT_LINE =
  "---------------------------------------------------------------------------------------";
const HEADER_LAT =
  " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
const HEADER_LAT_DUR = " #bytes        #iterations       t_avg[usec]    tps average";
const HEADER_BW =
  " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const HEADER_BW_G =
  " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";

/** `printf("%-W.Pf")`. */
function lf(v: number, width: number, prec: number): string {
  return v.toFixed(prec).padEnd(width);
}

/** `printf("%-Wlu")`. */
function lu(v: number, width: number): string {
  return String(Math.trunc(v)).padEnd(width);
}

/** `printf("%#0Wx")`: zero is printed without the 0x prefix. */
export function altHex(v: number, width: number): string {
  if (v === 0) return "0".repeat(width);
  return "0x" + Math.trunc(v).toString(16).padStart(width - 2, "0");
}

/** The runtime, its version and the FFI call path in use. */
export function runtimeName(): string {
  const g = globalThis as { Bun?: { version: string }; Deno?: { version: { deno: string } } };
  const rt = g.Bun ? `bun ${g.Bun.version}` : `deno ${g.Deno?.version.deno ?? "?"}`;
  return `${rt} (${runtimeInfo().fnPointerPath})`;
}

/** Latency statistics of one size, in microseconds. */
export interface LatStats {
  tMin: number;
  tMax: number;
  tTypical: number;
  tAvg: number;
  tStdev: number;
  p99: number;
  p999: number;
}

/**
 * Statistics of `iters` post times (ms, from `performance.now()`): `iters - 1` round-trip
 * samples divided by `rttFactor` (2 for send/write, 1 for read/atomic).
 */
export function latencyStats(tposted: Float64Array, iters: number, rttFactor: number): LatStats {
  const n = iters - 1;
  const d = new Float64Array(n);
  for (let i = 0; i < n; i++) d[i] = ((tposted[i + 1] - tposted[i]) * 1000) / rttFactor;
  d.sort();
  const m = n - 2; // perftest drops the two largest samples
  const median = (m - 1) % 2 ? (d[m >> 1] + d[(m >> 1) - 1]) / 2 : d[m >> 1];
  let sum = 0;
  for (let i = 0; i < m; i++) sum += d[i];
  const avg = sum / m;
  let sq = 0;
  for (let i = 0; i < m; i++) sq += (avg - d[i]) ** 2;
  return {
    tMin: d[0],
    tMax: d[m],
    tTypical: median,
    tAvg: avg,
    tStdev: Math.sqrt(sq / m),
    p99: d[Math.ceil(m * 0.99)],
    p999: d[Math.ceil(m * 0.999)],
  };
}

/** Times of a bandwidth run (ms). */
export interface BwTimes {
  /** Post time of every message (only [0] without peak). */
  tposted: Float64Array;
  /** Completion times indexed by completed count − 1 (only [0] without peak). */
  tcompleted: Float64Array;
  /** Messages counted. */
  iters: number;
  noPeak: boolean;
  cqMod: number;
}

/** perftest's bandwidth report of one size. */
export function bandwidthReport(size: number, t: BwTimes, gbits: boolean): BwReport {
  const n = t.iters;
  const factor = gbits ? 125_000_000 : 0x100000;
  const last = t.noPeak ? 0 : n - 1;
  const sec = (t.tcompleted[last] - t.tposted[0]) / 1000;
  let peak = 0;
  if (!t.noPeak) {
    let best = t.tcompleted[0] - t.tposted[0];
    const mod = t.cqMod;
    for (let i = 0; i < n; i++) {
      const first = Math.ceil((i + 1) / mod) * mod - 1;
      for (let j = first; j < n; j += mod) {
        const dt = (t.tcompleted[j] - t.tposted[i]) / (j - i + 1);
        if (dt < best) best = dt;
      }
      if (n % mod) {
        const dt = (t.tcompleted[n - 1] - t.tposted[i]) / (n - i);
        if (dt < best) best = dt;
      }
    }
    peak = best > 0 ? (size / (best / 1000)) / factor : 0;
  }
  return {
    size,
    iters: n,
    bwPeak: peak,
    bwAvg: sec > 0 ? (size * n / sec) / factor : 0,
    msgRate: sec > 0 ? n / sec / 1e6 : 0,
  };
}

/** The output of one side: the table on stdout, or JSON lines with the banner on stderr. */
export class Output {
  readonly #s: Settings;
  readonly #side: "server" | "client";

  constructor(s: Settings) {
    this.#s = s;
    this.#side = s.host === undefined ? "server" : "client";
  }

  /** A line of the human-readable output (stderr in --json mode). */
  line(text: string): void {
    if (this.#s.json) console.error(text);
    else console.log(text);
  }

  /** A line that only the table shows (nothing in --json mode). */
  #table(text: string): void {
    if (!this.#s.json) console.log(text);
  }

  #json(fields: Record<string, unknown>): void {
    console.log(JSON.stringify({
      tool: this.#s.tool.name,
      side: this.#side,
      runtime: runtimeName(),
      connection: this.#s.connection,
      rdma_cm: this.#s.rdmaCm,
      ...fields,
    }));
  }

  /** perftest's "Waiting for client to connect..." box (server). */
  waiting(): void {
    this.line("");
    this.line("************************************");
    this.line("* Waiting for client to connect... *");
    this.line("************************************");
  }

  /** The test information block. */
  banner(info: {
    device: string;
    transport: "IB" | "IW";
    linkLayer: string;
    mtuBytes: number;
    gidIndex: number;
    outReads: number;
    method: string;
    inline: number;
  }): void {
    const s = this.#s;
    const verb = { send: "Send", write: "RDMA_Write", read: "RDMA_Read", atomic: "Atomic" }[
      s.tool.verb
    ];
    const kind = s.tool.test === "bw" ? "BW" : "Latency";
    const atomic = s.tool.verb === "atomic" ? `${s.atomicType} ` : "";
    const client = s.host !== undefined;
    this.line(RESULT_LINE);
    this.line(`                    ${verb} ${atomic}${kind} Test`);
    if (s.events) this.line(` Test with events. Using ${info.device}_comp0`);
    this.line(` Dual-port       : OFF\t\tDevice         : ${info.device}`);
    this.line(` Number of qps   : ${s.numQps}\t\tTransport type : ${info.transport}`);
    this.line(` Connection type : ${s.connection}\t\tUsing SRQ      : OFF`);
    this.line(` PCIe relax order: OFF`);
    this.line(` ibv_wr* API     : OFF`);
    this.line(` Runtime         : ${runtimeName()}`);
    if (client) this.line(` TX depth        : ${s.txDepth}`);
    if (s.tool.verb === "send" && !client) this.line(` RX depth        : ${s.rxDepth}`);
    if (s.tool.test === "bw") this.line(` CQ Moderation   : ${s.cqMod}`);
    this.line(` Mtu             : ${info.mtuBytes}[B]`);
    this.line(` Link type       : ${info.linkLayer}`);
    if (info.gidIndex >= 0) this.line(` GID index       : ${info.gidIndex}`);
    if (s.tool.verb === "read" || s.tool.verb === "atomic") {
      this.line(` Outstand reads  : ${info.outReads}`);
    } else this.line(` Max inline data : ${info.inline}[B]`);
    this.line(` rdma_cm QPs\t : ${s.rdmaCm ? "ON" : "OFF"}`);
    this.line(` Data ex. method : ${info.method}`);
    this.line(RESULT_LINE);
  }

  /** One side's QP address lines (` local address: …` and its GID line). */
  address(label: "local" | "remote", d: Dest, withGid: boolean): void {
    let t = ` ${label} address: LID ${altHex(d.lid, 4)} QPN ${altHex(d.qpn, 6)} PSN ${
      altHex(d.psn, 6)
    }`;
    const verb = this.#s.tool.verb;
    if (verb === "read") t += ` OUT ${altHex(d.outReads, 4)}`;
    if (verb === "read" || verb === "write") {
      t += ` RKey ${altHex(d.rkey, 8)} VAddr ${altHex(d.vaddr, 16)}`;
    }
    this.line(t);
    if (withGid) {
      this.line(` GID: ${[...d.gid].map((b) => String(b).padStart(2, "0")).join(":")}`);
    }
  }

  /** The table header (RESULT_LINE and the column names). */
  header(): void {
    const s = this.#s;
    this.#table(RESULT_LINE);
    if (s.tool.test === "lat") this.#table(s.duration ? HEADER_LAT_DUR : HEADER_LAT);
    else this.#table(s.reportGbits ? HEADER_BW_G : HEADER_BW);
  }

  /** The closing separator. */
  footer(): void {
    this.#table(RESULT_LINE);
  }

  /** One latency row. */
  latency(size: number, iters: number, st: LatStats): void {
    this.#table(
      ` ${lu(size, 7)} ${iters}          ${lf(st.tMin, 7, 2)}        ${lf(st.tMax, 7, 2)}      ${
        lf(st.tTypical, 7, 2)
      }  \t       ${lf(st.tAvg, 7, 2)}     \t${lf(st.tStdev, 7, 2)}\t\t${lf(st.p99, 7, 2)} \t\t${
        lf(st.p999, 7, 2)
      }`,
    );
    if (this.#s.json) {
      this.#json({
        MsgSize: size,
        n_iterations: iters,
        t_min: st.tMin,
        t_max: st.tMax,
        t_typical: st.tTypical,
        t_avg: st.tAvg,
        t_stdev: st.tStdev,
        percentile_99: st.p99,
        "percentile_99.9": st.p999,
      });
    }
  }

  /** One latency row of a duration run (-D). */
  latencyDuration(size: number, iters: number, tAvg: number, tps: number): void {
    this.#table(
      ` ${lu(size, 7)}       ${iters}            ${lf(tAvg, 7, 2)}        ${lf(tps, 7, 2)}`,
    );
    if (this.#s.json) {
      this.#json({ MsgSize: size, n_iterations: iters, t_avg: tAvg, tps_average: tps });
    }
  }

  /** One bandwidth row. */
  bandwidth(r: BwReport): void {
    const g = this.#s.reportGbits;
    if (g && r.bwAvg < 0.1) {
      this.#table(
        ` ${lu(r.size, 7)}    ${r.iters}           ${lf(r.bwPeak, 7, 6)}            ${
          lf(r.bwAvg, 7, 6)
        }            ${lf(r.msgRate, 7, 6)}`,
      );
    } else {
      this.#table(
        ` ${lu(r.size, 7)}    ${lu(r.iters, 10)}       ${lf(r.bwPeak, 7, 2)}            ${
          lf(r.bwAvg, 7, 2)
        }\t\t   ${lf(r.msgRate, 7, 6)}`,
      );
    }
    if (this.#s.json) {
      this.#json({
        MsgSize: r.size,
        n_iterations: r.iters,
        BW_peak: r.bwPeak,
        BW_average: r.bwAvg,
        MsgRate: r.msgRate,
        unit: g ? "Gb/sec" : "MB/sec",
      });
    }
  }
}
