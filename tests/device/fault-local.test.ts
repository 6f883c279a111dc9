/**
 * The fault suite on one host: a QP forced to ERR with work requests outstanding, a peer
 * process killed mid-transfer (verbs RC pair and rdma_cm connection), and many messages over
 * many QPs on one CQ. Each checks that nothing is lost and nothing hangs (every wait bounded)
 * and prints the figures it measured. Faults on the wire (loss, delay, link cuts) need two
 * hosts: see fault-wire.test.ts.
 */
import assert from "node:assert/strict";
import process from "node:process";
import { deviceTest, notOnIwarp } from "../harness.ts";
import { connectOptions, fixture, qpPair } from "./verbs-helpers.ts";
import {
  type CompletionRecord,
  openDevice,
  QpType,
  WcStatus,
  WorkCompletionError,
  WrOpcode,
} from "../lib.ts";
import { spawnPeer } from "./peers/spawn.ts";
import { openFds, session } from "./peers/session.ts";

const ibOnly = { needs: notOnIwarp("QPs connected without rdma_cm") };

deviceTest(
  "fault: a QP forced to ERR with 64 sends and 64 receives outstanding flushes each exactly once",
  async (env) => {
    using f = fixture(env, 512);
    // the peer has no receives and RNR retries forever: our sends stay outstanding
    const [a, b] = qpPair(f, { cap: { maxSendWr: 128, maxRecvWr: 128 } });
    const src = f.pd.allocBuffer(64);
    const dst = f.pd.allocBuffer(64 * 64);
    for (let i = 0; i < 64; i++) {
      a.postRecv({ wrId: 1000 + i, sg: [{ mr: dst, offset: 64 * i, length: 64 }] });
    }
    for (let i = 0; i < 64; i++) a.postSend({ wrId: i, sg: [{ mr: src, length: 8 }] });
    await new Promise((r) => setTimeout(r, 50));
    a.toError();
    const seen = new Map<bigint, number>();
    const deadline = Date.now() + 20_000;
    while (seen.size < 128 && Date.now() < deadline) {
      const n = f.cq.poll();
      for (let i = 0; i < n; i++) {
        const wc = f.cq.completion(i);
        if (wc.qpNum !== a.qpNum) continue;
        assert.equal(wc.status, WcStatus.WR_FLUSH_ERR, `wr ${wc.wrId}: ${wc.statusName}`);
        seen.set(wc.wrId, (seen.get(wc.wrId) ?? 0) + 1);
      }
      if (n === 0) await new Promise((r) => setTimeout(r, 1));
    }
    assert.equal(seen.size, 128, "every WR completed");
    assert.ok([...seen.values()].every((c) => c === 1), "each exactly once");
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(f.cq.poll(), 0, "no completion after the flush");
    b.toError();
  },
  ibOnly,
);

deviceTest(
  "fault: forced to ERR, 64 tracked sends and 64 tracked receives all settle with WR_FLUSH_ERR",
  async (env) => {
    const ctx = openDevice(env.device);
    try {
      const pd = ctx.allocPd();
      const ch = ctx.createCompChannel();
      const cq = ctx.createCq({ cqe: 512, channel: ch });
      const mk = () =>
        pd.createQp({ type: QpType.RC, sendCq: cq, cap: { maxSendWr: 128, maxRecvWr: 128 } });
      const a = mk();
      const b = mk();
      const f = { ctx, pd, cq, env, [Symbol.dispose]: () => {} };
      const gid = ctx.queryGid(env.port, env.gidIndex);
      a.activate({ qpNum: b.qpNum, psn: 0, gid }, connectOptions(f));
      b.activate({ qpNum: a.qpNum, psn: 0, gid }, connectOptions(f));
      const src = pd.allocBuffer(64);
      const dst = pd.allocBuffer(64 * 64);
      const promises: Promise<CompletionRecord>[] = [];
      for (let i = 0; i < 64; i++) {
        promises.push(a.recv({ wrId: i, sg: [{ mr: dst, offset: 64 * i, length: 64 }] }));
        promises.push(a.send({ wrId: i, sg: [{ mr: src, length: 8 }] }));
      }
      await new Promise((r) => setTimeout(r, 50));
      const t0 = performance.now();
      a.toError();
      const results = await Promise.allSettled(promises);
      const ms = performance.now() - t0;
      const statuses = results.map((r) =>
        r.status === "rejected" && r.reason instanceof WorkCompletionError
          ? r.reason.statusName
          : r.status
      );
      assert.deepEqual(new Set(statuses), new Set(["IBV_WC_WR_FLUSH_ERR"]));
      assert.equal(results.length, 128);
      console.log(`fault: 128 tracked WRs flushed and settled ${ms.toFixed(1)} ms after ERR`);
    } finally {
      ctx.close();
    }
  },
  ibOnly,
);

deviceTest(
  "fault: the verbs peer process SIGKILLed mid-transfer: outstanding sends fail within a bound",
  async (env) => {
    using f = fixture(env, 256);
    const [a] = qpPair(f, { type: QpType.RC }); // a's own peer is replaced by the process below
    const mine = f.pd.createQp({ type: QpType.RC, sendCq: f.cq, cap: { maxSendWr: 64 } });
    const gid = f.ctx.queryGid(env.port, env.gidIndex);
    const peer = spawnPeer("rc-peer.ts", [
      env.device,
      String(env.port),
      String(env.gidIndex),
      String(mine.qpNum),
    ]);
    try {
      const { qpNum } = await peer.next((m) => "qpNum" in m) as { qpNum: number };
      // few retries and a short ACK timeout so that the failure shows within seconds
      mine.activate({ qpNum, psn: 0, gid }, connectOptions(f, { timeout: 12, retryCnt: 2 }));
      const src = f.pd.allocBuffer(4096);
      // steady traffic, then the kill
      for (let i = 0; i < 50; i++) await mine.send({ wrId: i, sg: [{ mr: src, length: 4096 }] });
      peer.kill();
      await peer.exited;
      const t0 = performance.now();
      let failed: unknown = null;
      for (let i = 0; failed === null && i < 10_000; i++) {
        try {
          await mine.send({ wrId: 1000 + i, sg: [{ mr: src, length: 4096 }] }, { timeout: 30_000 });
        } catch (e) {
          failed = e;
        }
      }
      const ms = performance.now() - t0;
      assert.ok(failed instanceof WorkCompletionError, String(failed));
      assert.equal((failed as WorkCompletionError).statusName, "IBV_WC_RETRY_EXC_ERR");
      assert.ok(ms < 30_000);
      console.log(`fault: dead verbs peer detected after ${ms.toFixed(0)} ms (RETRY_EXC_ERR)`);
      a.toError();
    } finally {
      peer.kill();
    }
  },
  ibOnly,
);

deviceTest(
  "fault: the rdma_cm peer process SIGKILLed mid-transfer: the survivor sees a typed error in bounded time",
  async (env) => {
    const peer = spawnPeer("cm-rc-server.ts", [env.address, "1"]);
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const fds = openFds();
      const { id, ep } = await session(env.address, port, "victim", 5);
      peer.kill();
      await peer.exited;
      const t0 = performance.now();
      // the survivor learns it from the connection manager (the dead process's ids are torn
      // down by its kernel, which tells this side) or from its own traffic failing
      const seen = await Promise.race([
        id.waitDisconnected({ timeout: 60_000 }).then(() => "DISCONNECTED"),
        (async () => {
          for (let i = 0; i < 10_000; i++) {
            await ep.send(new TextEncoder().encode(`ping victim ${i}`), undefined, 60_000);
            await ep.recv(60_000);
          }
          return "no error";
        })().catch((e) => (e as Error).name),
      ]);
      const ms = performance.now() - t0;
      assert.ok(
        ["DISCONNECTED", "ClosedError", "WorkCompletionError"].includes(seen),
        `DISCONNECTED or a typed error, got ${seen}`,
      );
      await id.disconnect({ timeout: 5_000 });
      ep.close();
      const after = openFds();
      assert.ok(after <= fds, `resources freed: ${fds} fds before, ${after} after`);
      console.log(`fault: dead cm peer noticed after ${ms.toFixed(0)} ms (${seen})`);
    } finally {
      peer.kill();
    }
  },
);

const LOAD_QPS = 64;
/** A sample in the suite (250 per QP); `RDMA_FAULT_MESSAGES` for more. */
const LOAD_MESSAGES = Number(process.env.RDMA_FAULT_MESSAGES ?? 16_000);

deviceTest(
  `fault: ${LOAD_MESSAGES} messages over ${LOAD_QPS} RC QPs sharing one CQ, event-driven: none lost, none twice, in order per QP`,
  async (env) => {
    const ctx = openDevice(env.device);
    try {
      const pd = ctx.allocPd();
      const ch = ctx.createCompChannel();
      const depth = 16;
      const cq = ctx.createCq({ cqe: LOAD_QPS * depth * 2 + 64, channel: ch, pollBatch: 256 });
      const f = { ctx, pd, cq, env, [Symbol.dispose]: () => {} };
      const gid = ctx.queryGid(env.port, env.gidIndex);
      const cap = { maxSendWr: depth, maxRecvWr: depth };
      const senders = Array.from(
        { length: LOAD_QPS },
        () => pd.createQp({ type: QpType.RC, sendCq: cq, cap }),
      );
      const receivers = Array.from(
        { length: LOAD_QPS },
        () => pd.createQp({ type: QpType.RC, sendCq: cq, cap }),
      );
      for (let q = 0; q < LOAD_QPS; q++) {
        senders[q].activate({ qpNum: receivers[q].qpNum, psn: 0, gid }, connectOptions(f));
        receivers[q].activate({ qpNum: senders[q].qpNum, psn: 0, gid }, connectOptions(f));
      }
      const src = pd.allocBuffer(LOAD_QPS * depth * 8);
      const dst = pd.allocBuffer(LOAD_QPS * depth * 8);
      const perQp = Math.ceil(LOAD_MESSAGES / LOAD_QPS);
      const sendIndex = new Map(senders.map((s, q) => [s.qpNum, q]));
      const recvIndex = new Map(receivers.map((r, q) => [r.qpNum, q]));
      const sent = new Array(LOAD_QPS).fill(0);
      const inFlight = new Array(LOAD_QPS).fill(0);
      const expected = new Array(LOAD_QPS).fill(0);
      const slot = (q: number, s: number) => (q * depth + s) * 8;
      const post = (q: number) => {
        while (inFlight[q] < depth && sent[q] < perQp) {
          const s = sent[q] % depth;
          new DataView(src.buffer.buffer, src.buffer.byteOffset).setUint32(
            slot(q, s),
            sent[q],
            true,
          );
          senders[q].postSend({
            wrId: sent[q],
            opcode: WrOpcode.SEND,
            sg: [{ mr: src, offset: slot(q, s), length: 8 }],
          });
          sent[q]++;
          inFlight[q]++;
        }
      };
      for (let q = 0; q < LOAD_QPS; q++) {
        for (let s = 0; s < depth; s++) {
          receivers[q].postRecv({ wrId: s, sg: [{ mr: dst, offset: slot(q, s), length: 8 }] });
        }
        post(q);
      }
      const view = new DataView(dst.buffer.buffer, dst.buffer.byteOffset);
      let received = 0;
      const t0 = performance.now();
      while (received < perQp * LOAD_QPS) {
        const n = await cq.wait({ strategy: "event", timeout: 30_000 });
        for (let i = 0; i < n; i++) {
          const wc = cq.completion(i);
          assert.equal(wc.status, WcStatus.SUCCESS, wc.statusName);
          const r = recvIndex.get(wc.qpNum);
          if (r !== undefined) {
            const s = wc.wrIdNumber;
            const seq = view.getUint32(slot(r, s), true);
            assert.equal(seq, expected[r], `QP ${r}: message ${seq} out of order or twice`);
            expected[r]++;
            received++;
            receivers[r].postRecv({ wrId: s, sg: [{ mr: dst, offset: slot(r, s), length: 8 }] });
          } else {
            const q = sendIndex.get(wc.qpNum)!;
            inFlight[q]--;
          }
        }
        for (let q = 0; q < LOAD_QPS; q++) post(q);
      }
      const secs = (performance.now() - t0) / 1000;
      assert.deepEqual(expected, new Array(LOAD_QPS).fill(perQp));
      console.log(
        `fault: ${received} messages over ${LOAD_QPS} QPs on one CQ in ${secs.toFixed(1)} s ` +
          `(${(received / secs).toFixed(0)} msg/s): 0 lost, 0 duplicated, in order per QP`,
      );
    } finally {
      ctx.close();
    }
  },
  { ...ibOnly, timeout: 900_000 },
);
