/**
 * The JavaScript of the classic post path without a device: what `qp.postSend(wr)` and
 * `qp.postRecv(wr)` do before the provider is called (the one-WR array, the checks, the encoding
 * into the reused native list), in ns per call and heap bytes per call, part by part. The MR is a
 * stand-in of the library's brand (a `NativeResource` of kind "MemoryRegion") that no provider
 * ever sees. Runs on any machine, in both runtimes:
 *
 *   deno run -A bench/post-js.ts [calls]     bun bench/post-js.ts [calls]
 *
 * Rounds of 1,000,000 calls by default, after a tenth as many untimed; medians of 5 rounds.
 */
import process from "node:process";
import { median } from "./median.ts";
import { NativeResource } from "../ffi/resource.ts";
import { layouts } from "../ffi/native.ts";
import { One } from "../verbs/_post.ts";
import { WrList } from "../verbs/_wr-list.ts";
import {
  countSges,
  type RecvWr,
  recvWrProblem,
  type SendLimits,
  type SendWr,
  sendWrProblem,
} from "../verbs/wr.ts";
import type { MemoryRegion } from "../verbs/mr.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import { QpType, SendFlags, WrOpcode } from "../types/enums.ts";

const arg = process.argv.slice(2).find((a) => /^\d+$/.test(a));
const N = Number(arg ?? 1_000_000);
const ROUNDS = 5;

class StandInPd extends NativeResource {
  constructor() {
    super("ProtectionDomain", []);
  }
  protected destroy(): void {}
}

class StandInMr extends NativeResource {
  readonly length = 4096;
  readonly access = 7;
  readonly lkey = 0x1234;
  readonly addrNumber = 0x7f00_0000_1000;
  constructor(readonly pd: StandInPd) {
    super("MemoryRegion", []);
  }
  protected destroy(): void {}
}

const pd = new StandInPd() as unknown as ProtectionDomain;
const mr = new StandInMr(pd as unknown as StandInPd) as unknown as MemoryRegion;
const limits: SendLimits = { type: QpType.RC, pd, maxSendSge: 4, maxInlineData: 64 };
const L = layouts();
const sendList = new WrList(L.ibv_send_wr.size, 8, 16);
const recvList = new WrList(L.ibv_recv_wr.size, 8, 16);
const oneSend = new One<SendWr>();
const oneRecv = new One<RecvWr>();
const write: SendWr = {
  wrId: 1,
  opcode: WrOpcode.RDMA_WRITE,
  sg: [{ mr, offset: 0, length: 64 }],
  remote: { addr: 0x7f00_0000_2000, rkey: 99 },
  flags: SendFlags.SIGNALED,
};
const recv: RecvWr = { wrId: 3, sg: [{ mr, offset: 0, length: 64 }] };
const writes = [write];
const recvs = [recv];

/** What one classic postSend + postRecv pair runs before the provider (qp.ts, _post.ts). */
function pair(n: number): void {
  for (let i = 0; i < n; i++) {
    const s = oneSend.of(write);
    try {
      if (sendWrProblem(s[0], limits) !== null) throw new Error("refused");
      sendList.encodeSend(s, countSges(s, 1));
    } finally {
      oneSend.clear();
    }
    const r = oneRecv.of(recv);
    try {
      if (recvWrProblem(r[0], pd, 4) !== null) throw new Error("refused");
      recvList.encodeRecv(r, countSges(r, 1));
    } finally {
      oneRecv.clear();
    }
  }
}

const parts: [string, (n: number) => void][] = [
  ["send+recv pair", pair],
  ["send check", (n) => {
    for (let i = 0; i < n; i++) if (sendWrProblem(write, limits) !== null) throw new Error("");
  }],
  ["send encode", (n) => {
    for (let i = 0; i < n; i++) sendList.encodeSend(writes, 1);
  }],
  ["recv check", (n) => {
    for (let i = 0; i < n; i++) if (recvWrProblem(recv, pd, 4) !== null) throw new Error("");
  }],
  ["recv encode", (n) => {
    for (let i = 0; i < n; i++) recvList.encodeRecv(recvs, 1);
  }],
  ["one-WR array", (n) => {
    for (let i = 0; i < n; i++) {
      oneSend.of(write);
      oneSend.clear();
    }
  }],
];

const heapUsed = () => process.memoryUsage().heapUsed;
const times = new Map<string, number[]>(parts.map(([name]) => [name, []]));
const heaps = new Map<string, number[]>(parts.map(([name]) => [name, []]));
for (let r = 0; r < ROUNDS; r++) {
  for (const [name, run] of parts) {
    run(N / 10);
    const h0 = heapUsed();
    const t0 = performance.now();
    run(N);
    times.get(name)!.push((performance.now() - t0) * 1e6 / N);
    heaps.get(name)!.push((heapUsed() - h0) / N);
  }
}
const runtime = "Bun" in globalThis ? "bun" : "deno";
console.log(`classic post path, JavaScript only (${runtime}), ${N} calls × ${ROUNDS} rounds:`);
for (const [name] of parts) {
  const ns = median(times.get(name)!).toFixed(1).padStart(7);
  console.log(`  ${name.padEnd(16)} ${ns} ns   heap ${median(heaps.get(name)!).toFixed(2)} B`);
}
