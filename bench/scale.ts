/**
 * Scale of the event path, on a device (the soft-RoCE guest): many RC QPs completing on one CQ
 * and one poller, event-driven, every completion delivered; and many completion channels on one
 * poller — the cost of a wake-up as the number of watched sources grows. Prints a table.
 *
 *   deno run -A bench/scale.ts [qps] [messagesPerQp]     bun bench/scale.ts [qps] [messagesPerQp]
 *
 * Environment: RDMA_DEVICE, RDMA_PORT, RDMA_GID_INDEX (set inside scripts/softroce-vm).
 */
import process from "node:process";
import { openDevice, QpType, WcStatus } from "../mod.ts";

const args = process.argv.slice(process.argv[1]?.endsWith(".ts") ? 2 : 1);
const QPS = Number(args[0] ?? 1000);
const PER_QP = Number(args[1] ?? 20);
const device = process.env.RDMA_DEVICE ?? "rxe0";
const port = Number(process.env.RDMA_PORT ?? 1);
const gidIndex = Number(process.env.RDMA_GID_INDEX ?? 1);
const runtime = "Bun" in globalThis ? "bun" : "deno";

const ctx = openDevice(device);
const pd = ctx.allocPd();
const gid = ctx.queryGid(port, gidIndex);
const transition = { port, sgidIndex: gidIndex, pathMtu: ctx.queryPort(port).activeMtu };

/** Part A: QPS pairs on one CQ; each sender sends PER_QP messages; all completions event-driven. */
async function manyQps(): Promise<string> {
  const ch = ctx.createCompChannel();
  const cq = ctx.createCq({ cqe: Math.min(QPS * 8, 65536), channel: ch, pollBatch: 512 });
  const cap = { maxSendWr: 4, maxRecvWr: 4 };
  const a = Array.from({ length: QPS }, () => pd.createQp({ type: QpType.RC, sendCq: cq, cap }));
  const b = Array.from({ length: QPS }, () => pd.createQp({ type: QpType.RC, sendCq: cq, cap }));
  for (let i = 0; i < QPS; i++) {
    a[i].activate({ qpNum: b[i].qpNum, psn: 0, gid }, transition);
    b[i].activate({ qpNum: a[i].qpNum, psn: 0, gid }, transition);
  }
  const mr = pd.allocBuffer(64);
  const isB = new Set(b.map((q) => q.qpNum));
  const byNum = new Map(a.map((q) => [q.qpNum, q]));
  const recvOf = new Map(b.map((q) => [q.qpNum, q]));
  const sent = new Map<number, number>();
  for (const q of b) for (let s = 0; s < 2; s++) q.postRecv({ wrId: s, sg: [{ mr, length: 64 }] });
  for (const q of a) {
    q.postSend({ wrId: 0, sg: [{ mr, length: 8 }] });
    sent.set(q.qpNum, 1);
  }
  const total = QPS * PER_QP;
  let received = 0, wakes = 0;
  const t0 = performance.now();
  while (received < total) {
    const n = await cq.wait({ strategy: "event", timeout: 60_000 });
    wakes++;
    for (let i = 0; i < n; i++) {
      const wc = cq.completion(i);
      if (wc.status !== WcStatus.SUCCESS) throw new Error(`completion failed: ${wc.statusName}`);
      if (isB.has(wc.qpNum)) {
        received++;
        recvOf.get(wc.qpNum)!.postRecv({ wrId: wc.wrIdNumber, sg: [{ mr, length: 64 }] });
      } else {
        const q = byNum.get(wc.qpNum)!;
        const k = sent.get(q.qpNum)!;
        if (k < PER_QP) {
          q.postSend({ wrId: k, sg: [{ mr, length: 8 }] });
          sent.set(q.qpNum, k + 1);
        }
      }
    }
  }
  const secs = (performance.now() - t0) / 1000;
  for (const q of [...a, ...b]) q.close();
  cq.close();
  ch.close();
  return `| ${QPS} RC QPs on one CQ, ${total} messages | ${secs.toFixed(2)} s | ${
    (total / secs).toFixed(0)
  } msg/s | ${(total * 2 / wakes).toFixed(1)} completions per wake-up |`;
}

/** Part B: K channels (one CQ each) all awaited; one completion at a time on a random one. */
async function manyChannels(k: number, rounds: number): Promise<string> {
  const chans = Array.from({ length: k }, () => ctx.createCompChannel());
  const cqs = chans.map((channel) => ctx.createCq({ cqe: 8, channel }));
  const a = pd.createQp({ type: QpType.RC, sendCq: cqs[0], cap: { maxSendWr: 2 } });
  const others = cqs.map((cq) =>
    pd.createQp({ type: QpType.RC, sendCq: cq, cap: { maxRecvWr: 4 } })
  );
  const mr = pd.allocBuffer(64);
  const lat: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const target = r % k;
    // a fresh pair each round would dominate: re-point `a` at the target's QP
    a.reset();
    others[target].reset();
    a.activate({ qpNum: others[target].qpNum, psn: 0, gid }, transition);
    others[target].activate({ qpNum: a.qpNum, psn: 0, gid }, transition);
    others[target].postRecv({ wrId: r, sg: [{ mr, length: 64 }] });
    const waits = cqs.map((cq, i) =>
      i === target ? cq.wait({ strategy: "event", timeout: 30_000 }) : null
    );
    const t0 = performance.now();
    a.postSend({ wrId: r, sg: [{ mr, length: 8 }] });
    await waits[target];
    lat.push((performance.now() - t0) * 1000);
    cqs[0].poll(); // the send completion of `a`
  }
  lat.sort((x, y) => x - y);
  for (const q of [a, ...others]) q.close();
  for (const cq of cqs) cq.close();
  for (const c of chans) c.close();
  return `| ${k} channels watched | median ${lat[lat.length >> 1].toFixed(0)} µs | p90 ${
    lat[Math.floor(lat.length * 0.9)].toFixed(0)
  } µs | ${rounds} wake-ups |`;
}

console.log(
  `scale (${runtime}, ${device})\n| workload | result | rate | note |\n|---|---|---|---|`,
);
console.log(await manyQps());
for (const k of [1, 16, 64, 256]) console.log(await manyChannels(k, 200));
ctx.close();
