/**
 * The extended post API (`ibv_wr_*` through `struct ibv_qp_ex`) against the classic
 * `ibv_post_send`, in the same run on the same QP: the cost of posting RDMA_WRITEs of 64 bytes,
 * eight ways — one WR per post, or a list of BATCH WRs per post (one doorbell: `ibv_post_send`
 * of a list, or one `ibv_wr_start` … `ibv_wr_complete` batch), each prepared (`qp.prepareSend`
 * vs `qp.prepareSendEx`) and from WR objects (`qp.postSend` vs `qp.postSendEx`). Rounds are
 * interleaved; each round posts BATCH WRs (the last one signaled), timing only the posting,
 * then drains the CQ. Prints the median ns per WR of each way, the ratios extended / classic,
 * and the JS-heap growth per prepared post of both kinds.
 *
 *   RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 deno run -A --v8-flags=--expose-gc bench/post-ex.ts [ROUNDS]
 *   RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 bun bench/post-ex.ts [ROUNDS]
 */
import process from "node:process";
import { median } from "./median.ts";
import { openDevice, runtimeInfo, type SendWr } from "../mod.ts";
import { AccessFlags, QpType, SendFlags, WcStatus, WrOpcode } from "../types/enums.ts";

const arg = process.argv.slice(2).find((a) => /^\d+$/.test(a));
const ROUNDS = Number(arg ?? 200);
const BATCH = 64;
const device = process.env.RDMA_DEVICE;
if (!device) throw new Error("set RDMA_DEVICE (and RDMA_GID_INDEX), or run in the soft-RoCE VM");
const gidIndex = Number(process.env.RDMA_GID_INDEX ?? 0);
const port = Number(process.env.RDMA_PORT ?? 1);

function gc(): void {
  const g = (globalThis as { gc?: () => void }).gc;
  const bun = (globalThis as { Bun?: { gc(sync: boolean): void } }).Bun;
  if (bun) bun.gc(true);
  else if (g) g();
}

using ctx = openDevice(device);
const pd = ctx.allocPd();
const cq = ctx.createCq({ cqe: 4 * BATCH });
const rw = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE;
const init = {
  type: QpType.RC,
  sendCq: cq,
  cap: { maxSendWr: 2 * BATCH },
  sendOps: [WrOpcode.RDMA_WRITE],
} as const;
const a = pd.createQpEx(init);
const b = pd.createQpEx(init);
const gid = ctx.queryGid(port, gidIndex);
const o = { port, sgidIndex: gidIndex, accessFlags: rw, pathMtu: ctx.queryPort(port).activeMtu };
a.activate({ qpNum: b.qpNum, psn: 0, gid }, o);
b.activate({ qpNum: a.qpNum, psn: 0, gid }, o);
const src = pd.allocBuffer(4096);
const dst = pd.allocBuffer(1 << 16, { access: rw });
const wr: SendWr = {
  opcode: WrOpcode.RDMA_WRITE,
  flags: 0,
  sg: [{ mr: src, length: 64 }],
  remote: dst.remote(),
};
const last: SendWr = { ...wr, flags: SendFlags.SIGNALED };
const classic = a.prepareSend(wr);
const extended = a.prepareSendEx(wr);
const list: SendWr[] = Array.from({ length: BATCH }, (_, i) => (i === BATCH - 1 ? last : wr));
const classicList = a.prepareSend(list);
const extendedList = a.prepareSendEx(list);

function drain(): void {
  let got = 0;
  const deadline = performance.now() + 10_000;
  while (got === 0) {
    got = cq.poll(1);
    if (got === 0 && performance.now() > deadline) throw new Error("no completion");
  }
  if (cq.wc.at(0).status !== WcStatus.SUCCESS) throw cq.wc.error();
}

type Way = { name: string; post: (i: number, signaled: boolean) => void; list?: boolean };
const ways: Way[] = [
  {
    name: "classic prepared (ibv_post_send)",
    post: (i, s) => {
      classic.setWrId(0, i);
      classic.setFlags(0, s ? SendFlags.SIGNALED : 0);
      classic.post();
    },
  },
  {
    name: "extended prepared (ibv_wr_*)",
    post: (i, s) => {
      extended.setWrId(0, i);
      extended.setFlags(0, s ? SendFlags.SIGNALED : 0);
      extended.post();
    },
  },
  { name: "classic postSend(wr)", post: (_i, s) => a.postSend(s ? last : wr) },
  { name: "extended postSendEx(wr)", post: (_i, s) => a.postSendEx(s ? last : wr) },
  { name: "classic prepared list", post: () => classicList.post(), list: true },
  { name: "extended prepared batch", post: () => extendedList.post(), list: true },
  { name: "classic postSend(list)", post: () => a.postSend(list), list: true },
  { name: "extended postSendEx(list)", post: () => a.postSendEx(list), list: true },
];

function round(w: Way): number {
  const t0 = performance.now();
  if (w.list) w.post(0, true);
  else for (let i = 0; i < BATCH; i++) w.post(i, i === BATCH - 1);
  const ns = ((performance.now() - t0) * 1e6) / BATCH;
  drain();
  return ns;
}

for (let i = 0; i < 20; i++) for (const w of ways) round(w); // warm up (JIT, caches)
const samples = ways.map(() => [] as number[]);
for (let r = 0; r < ROUNDS; r++) ways.forEach((w, i) => samples[i].push(round(w)));
const ns = samples.map(median);

// heap growth per prepared post, classic and extended (the harness's own timing is included)
function growth(w: Way): number {
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let r = 0; r < ROUNDS; r++) round(w);
  return +((process.memoryUsage().heapUsed - before) / (ROUNDS * BATCH)).toFixed(3);
}
const grewClassic = growth(ways[0]);
const grew = growth(ways[1]);

const info = runtimeInfo();
const result = {
  runtime: info.runtime,
  fnPointerPath: info.fnPointerPath,
  device,
  rounds: ROUNDS,
  batch: BATCH,
  nsPerWr: Object.fromEntries(ways.map((w, i) => [w.name, +ns[i].toFixed(0)])),
  ratioExOverClassic: {
    prepared: +(ns[1] / ns[0]).toFixed(2),
    object: +(ns[3] / ns[2]).toFixed(2),
    preparedList: +(ns[5] / ns[4]).toFixed(2),
    objectList: +(ns[7] / ns[6]).toFixed(2),
  },
  heapGrowthBytesPerPost: { classicPrepared: grewClassic, extendedPrepared: grew },
};
console.log(JSON.stringify(result));
