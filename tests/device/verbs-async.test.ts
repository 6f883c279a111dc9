// The promise side of verbs objects: qp.send()/qp.recv() settled by their completions,
// cq.wait()/cq.batches() through the poller, and closing a CQ settling what is pending.
import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import { connectOptions, type Fixture } from "./verbs-helpers.ts";
import {
  AccessFlags,
  ClosedError,
  openDevice,
  QpType,
  WcOpcode,
  WcStatus,
  WorkCompletionError,
  WrOpcode,
} from "../lib.ts";

function eventFixture(env: Parameters<Parameters<typeof deviceTest>[1]>[0]) {
  const ctx = openDevice(env.device);
  const pd = ctx.allocPd();
  const channel = ctx.createCompChannel();
  const cq = ctx.createCq({ cqe: 64, channel });
  const f: Fixture = { ctx, pd, cq, env, [Symbol.dispose]: () => ctx.close() };
  const a = pd.createQp({ type: QpType.RC, sendCq: cq });
  const b = pd.createQp({ type: QpType.RC, sendCq: cq });
  const gid = ctx.queryGid(env.port, env.gidIndex);
  const o = connectOptions(f, {
    accessFlags: AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ,
    retryCnt: 1,
  });
  a.activate({ qpNum: b.qpNum, psn: 0, gid }, o);
  b.activate({ qpNum: a.qpNum, psn: 0, gid }, o);
  return { f, ctx, pd, cq, a, b };
}

deviceTest("verbs async: await qp.send()/qp.recv() resolve with their completions", async (env) => {
  const { f, pd, a, b } = eventFixture(env);
  using _ = f;
  const src = pd.allocBuffer(64);
  const dst = pd.allocBuffer(64);
  src.buffer.set(new TextEncoder().encode("promised"));
  const received = b.recv({ wrId: 10n, sg: [{ mr: dst }] });
  const sent = await a.send({ wrId: 11n, opcode: WrOpcode.SEND, sg: [{ mr: src, length: 8 }] });
  assert.equal(sent.wrId, 11n);
  assert.equal(sent.opcode, WcOpcode.SEND);
  const got = await received;
  assert.equal(got.wrId, 10n);
  assert.equal(got.opcode, WcOpcode.RECV);
  assert.equal(got.byteLen, 8);
  assert.equal(new TextDecoder().decode(dst.buffer.subarray(0, 8)), "promised");
});

deviceTest(
  "verbs async: a failing WR rejects with WorkCompletionError carrying the status",
  async (env) => {
    const { f, pd, a } = eventFixture(env);
    using _ = f;
    const src = pd.allocBuffer(64);
    const target = pd.allocBuffer(64, {
      access: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE,
    });
    await assert.rejects(
      a.send({
        wrId: 21n,
        opcode: WrOpcode.RDMA_WRITE,
        sg: [{ mr: src, length: 8 }],
        remote: { addr: target.remote(8).addr, rkey: (target.rkey + 1) >>> 0 },
      }),
      (e: unknown) => {
        assert.ok(e instanceof WorkCompletionError, String(e));
        assert.equal(e.status, WcStatus.REM_ACCESS_ERR);
        assert.equal(e.wrId, 21n);
        assert.equal(e.qpNum, a.qpNum);
        return true;
      },
    );
  },
);

deviceTest(
  "verbs async: cq.wait() and cq.batches() deliver completions in each strategy",
  async (env) => {
    const { f, pd, cq, a, b } = eventFixture(env);
    using _ = f;
    const src = pd.allocBuffer(64);
    const dst = pd.allocBuffer(64 * 8);
    for (const strategy of ["event", "adaptive", "busy"] as const) {
      for (let i = 0; i < 4; i++) {
        b.postRecv({
          wrId: BigInt(i),
          sg: [{ mr: dst, offset: i * 64, length: 64 }],
        });
      }
      for (let i = 0; i < 4; i++) {
        a.postSend({
          wrId: BigInt(100 + i),
          sg: [{ mr: src, length: 16 }],
        });
      }
      let recvs = 0, sends = 0;
      const signal = AbortSignal.timeout(20_000);
      for await (const n of cq.batches({ strategy, signal })) {
        for (let i = 0; i < n; i++) {
          const wc = cq.completion(i);
          assert.equal(wc.status, WcStatus.SUCCESS, `${strategy}: ${wc.statusName}`);
          if (wc.opcode === WcOpcode.RECV) recvs++;
          else sends++;
        }
        if (recvs === 4 && sends === 4) break;
      }
      assert.deepEqual([recvs, sends], [4, 4], strategy);
    }
    a.postSend({ wrId: 7n, sg: [{ mr: src, length: 1 }] }); // no receive posted: stays pending...
    b.postRecv({ wrId: 8n, sg: [{ mr: dst, length: 64 }] }); // ...until this one
    let seen = 0;
    while (seen < 2) seen += await cq.wait({ timeout: 20_000 });
    assert.equal(seen, 2);
  },
);

deviceTest(
  "verbs async: closing the CQ rejects pending tracked WRs with ClosedError",
  async (env) => {
    const { f, pd, cq, b } = eventFixture(env);
    using _ = f;
    const dst = pd.allocBuffer(64);
    const pending = b.recv({ wrId: 30n, sg: [{ mr: dst }] }); // nobody sends
    const waiting = cq.wait({ timeout: 30_000 });
    b.close();
    cq.close();
    await assert.rejects(pending, ClosedError);
    await assert.rejects(waiting, ClosedError);
  },
);
