/**
 * JS-heap growth over N prepared-WR post+poll operations (default 1,000,000): an RC QP
 * pair on the test device, one prepared signaled RDMA_WRITE re-posted with its wr_id,
 * length and remote address updated in place, and the CQ polled until it completes.
 * Prints ops/s, heap before/after (after a GC) and the growth per operation.
 *
 *   RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 deno run -A --v8-flags=--expose-gc bench/prepared-wr.ts [N]
 *   RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 bun bench/prepared-wr.ts [N]
 */
import process from "node:process";
import { openDevice } from "../verbs/mod.ts";
import { native } from "../ffi/native.ts";
import { AccessFlags, QpType, WcStatus, WrOpcode } from "../types/enums.ts";

const arg = process.argv.slice(2).find((a) => /^\d+$/.test(a));
const N = Number(arg ?? 1_000_000);
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
const cq = ctx.createCq({ cqe: 64 });
const rw = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE;
const a = pd.createQp({ type: QpType.RC, sendCq: cq });
const b = pd.createQp({ type: QpType.RC, sendCq: cq });
const gid = ctx.queryGid(port, gidIndex);
const o = { port, sgidIndex: gidIndex, accessFlags: rw, pathMtu: ctx.queryPort(port).activeMtu };
a.activate({ qpNum: b.qpNum, psn: 0, gid }, o);
b.activate({ qpNum: a.qpNum, psn: 0, gid }, o);
const src = pd.allocBuffer(4096);
const dst = pd.allocBuffer(1 << 16, { access: rw });
const wr = a.prepareSend({
  opcode: WrOpcode.RDMA_WRITE,
  sg: [{ mr: src, length: 64 }],
  remote: dst.remote(),
});
const base = dst.addrNumber;

function run(count: number): void {
  for (let i = 0; i < count; i++) {
    wr.setWrId(0, i);
    wr.setLength(0, 0, 8 + (i & 63));
    wr.setRemoteAddr(0, base + ((i & 255) << 6));
    wr.post();
    let got = 0;
    while (got === 0) got = cq.poll(1);
    if (cq.wc.at(0).status !== WcStatus.SUCCESS) throw cq.wc.error();
  }
}

run(20_000); // warm up (JIT, caches)
gc();
const before = process.memoryUsage().heapUsed;
const t0 = performance.now();
run(N);
const ms = performance.now() - t0;
const beforeGc = process.memoryUsage().heapUsed;
gc();
const after = process.memoryUsage().heapUsed;
const rt = "Bun" in globalThis ? "bun" : "deno";
console.log(
  JSON.stringify({
    runtime: rt,
    fnPointerPath: native().fnPointerPath,
    operations: N,
    seconds: +(ms / 1000).toFixed(2),
    opsPerSecond: Math.round(N / (ms / 1000)),
    heapBefore: before,
    heapAfterNoGc: beforeGc,
    heapAfterGc: after,
    growthBytes: after - before,
    growthBytesPerOpNoGc: +((beforeGc - before) / N).toFixed(4),
  }),
);
