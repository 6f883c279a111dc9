/**
 * JS-heap growth over N post+poll operations (default 1,000,000) on the two posting paths: a
 * prepared signaled RDMA_WRITE re-posted with its wr_id, length and remote address updated in
 * place (`prepareSend` + `post`), and the classic `postSend` of one work-request object the caller
 * reuses (its fields updated in place). An RC QP pair on the test device; the CQ polled until each
 * completes. Prints ops/s, heap before/after (after a GC) and the growth per operation, per path.
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

const sge = { mr: src, offset: 0, length: 64 };
const classic = {
  wrId: 0,
  opcode: WrOpcode.RDMA_WRITE,
  sg: [sge],
  remote: { addr: base, rkey: dst.rkey },
} as {
  wrId: number;
  opcode: typeof WrOpcode.RDMA_WRITE;
  sg: typeof sge[];
  remote: { addr: number; rkey: number };
};

function runClassic(count: number): void {
  for (let i = 0; i < count; i++) {
    classic.wrId = i;
    sge.length = 8 + (i & 63);
    classic.remote.addr = base + ((i & 255) << 6);
    a.postSend(classic);
    let got = 0;
    while (got === 0) got = cq.poll(1);
    if (cq.wc.at(0).status !== WcStatus.SUCCESS) throw cq.wc.error();
  }
}

function runPrepared(count: number): void {
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

const modes = (process.argv.find((x) => x === "--classic" || x === "--prepared") ?? "both")
  .replace(/^--/, "");
for (const [path, run] of [["prepared", runPrepared], ["classic", runClassic]] as const) {
  if (modes !== "both" && modes !== path) continue;
  run(20_000); // warm up (JIT, caches)
  gc();
  const before = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  run(N);
  const ms = performance.now() - t0;
  const beforeGc = process.memoryUsage().heapUsed;
  gc();
  const after = process.memoryUsage().heapUsed;
  console.log(
    JSON.stringify({
      runtime: "Bun" in globalThis ? "bun" : "deno",
      path,
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
}
