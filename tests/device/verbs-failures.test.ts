/** verbs: failing work requests, flushes, memory windows, notification and async events. */
import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import {
  AccessFlags,
  EventType,
  PostError,
  QpType,
  SendFlags,
  WcStatus,
  WorkCompletionError,
  WrOpcode,
} from "../lib.ts";
import { assertNoWc, fixture, qpPair, waitWc, waitWcAsync } from "./verbs-helpers.ts";

const RW = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE;

deviceTest("verbs: wrong rkey completes with REM_ACCESS_ERR", (env) => {
  using f = fixture(env);
  const [a] = qpPair(f, { connect: { accessFlags: RW, retryCnt: 1 } });
  const src = f.pd.allocBuffer(64);
  const dst = f.pd.allocBuffer(64, { access: RW });
  a.postSend({
    wrId: 77,
    opcode: WrOpcode.RDMA_WRITE,
    sg: [{ mr: src, length: 8 }],
    remote: { addr: dst.addr, rkey: (dst.rkey ^ 0x5a5a00) >>> 0 },
  });
  const [w] = waitWc(f.cq, 1);
  assert.equal(w.status, WcStatus.REM_ACCESS_ERR);
  assert.equal(w.statusName, "IBV_WC_REM_ACCESS_ERR");
  assert.equal(w.wrId, 77n);
  // the same through the cursor's typed error
  a.toError();
});

deviceTest(
  "verbs: a post the provider refuses (send queue full) names bad_wr's index",
  async (env) => {
    using f = fixture(env, 256);
    const [a, b] = qpPair(f, { cap: { maxSendWr: 4 }, connect: { accessFlags: RW } });
    const src = f.pd.allocBuffer(64);
    const dst = f.pd.allocBuffer(64, { access: RW });
    // more WRs than any rounding of the queue holds: the provider takes a prefix (until the queue is
    // full) and names the first one it refused in bad_wr
    const wrs = Array.from({ length: 4 * (a.cap.maxSendWr + 1) + 16 }, (_, i) => ({
      wrId: i,
      opcode: WrOpcode.RDMA_WRITE,
      sg: [{ mr: src, length: 8 }],
      remote: { addr: dst.addr, rkey: dst.rkey },
    }));
    const refusedAt = (post: () => void): number => {
      try {
        post();
      } catch (e) {
        assert.ok(e instanceof PostError, String(e));
        assert.equal(e.code, "ENOMEM");
        assert.ok(e.index >= a.cap.maxSendWr && e.index < wrs.length, `index ${e.index}`);
        return e.index;
      }
      assert.fail("the post was not refused");
    };
    // exactly the WRs before bad_wr were posted: their completions come, in order, and no more
    const taken = async (count: number) => {
      const wcs = await waitWcAsync(f.cq, count);
      assert.deepEqual(wcs.map((w) => w.wrId), wrs.slice(0, count).map((w) => BigInt(w.wrId)));
      assert.deepEqual(wcs.map((w) => w.statusName), wcs.map(() => "IBV_WC_SUCCESS"));
      assertNoWc(f.cq);
    };
    const index = refusedAt(() => a.postSend(wrs));
    await taken(index);
    // the same through a prepared list, twice (its bad_wr slot is reused)
    const prepared = a.prepareSend(wrs);
    for (let round = 0; round < 2; round++) {
      assert.equal(refusedAt(() => prepared.post()), index);
      await taken(index);
    }
    assert.equal(b.stateName, "IBV_QPS_RTS");
  },
);

deviceTest("verbs: no receive posted → RNR retry exceeded with small rnr_retry", async (env) => {
  using f = fixture(env);
  const [a] = qpPair(f, { connect: { rnrRetry: 1, minRnrTimer: 1 } });
  const src = f.pd.allocBuffer(64);
  a.postSend({ wrId: 5, sg: [{ mr: src, length: 4 }] });
  const [w] = await waitWcAsync(f.cq, 1);
  assert.equal(w.status, WcStatus.RNR_RETRY_EXC_ERR, w.statusName);
  assert.equal(w.wrId, 5n);
});

deviceTest("verbs: QP moved to ERR flushes outstanding receives with WR_FLUSH_ERR", (env) => {
  using f = fixture(env);
  const [, b] = qpPair(f);
  const buf = f.pd.allocBuffer(256);
  b.postRecv([1, 2, 3].map((i) => ({ wrId: i, sg: [{ mr: buf, offset: i * 64, length: 64 }] })));
  assertNoWc(f.cq);
  b.toError();
  assert.equal(b.stateName, "IBV_QPS_ERR");
  // read the flushed completions in place; the cursor turns each into a typed error
  const ids: bigint[] = [];
  const deadline = Date.now() + 10_000;
  while (ids.length < 3) {
    assert.ok(Date.now() < deadline, `only ${ids.length} flushed completions`);
    const got = f.cq.poll();
    for (let i = 0; i < got; i++) {
      const wc = f.cq.completion(i);
      assert.equal(wc.status, WcStatus.WR_FLUSH_ERR);
      assert.equal(wc.statusName, "IBV_WC_WR_FLUSH_ERR");
      assert.equal(wc.qpNum, b.qpNum);
      const err = wc.error();
      assert.ok(err instanceof WorkCompletionError);
      assert.equal(err.statusName, "IBV_WC_WR_FLUSH_ERR");
      assert.equal(err.wrId, wc.wrId);
      assert.equal(err.qpNum, b.qpNum);
      assert.throws(() => wc.check(), WorkCompletionError);
      ids.push(wc.wrId);
    }
  }
  assert.deepEqual(ids, [1n, 2n, 3n]);
});

deviceTest(
  "verbs: MW type 2 bind, remote write through the MW rkey, invalidate, write fails",
  (env) => {
    using f = fixture(env);
    const [a, b] = qpPair(f, { connect: { accessFlags: RW | AccessFlags.MW_BIND, retryCnt: 1 } });
    const mr = f.pd.allocBuffer(4096, { access: RW | AccessFlags.MW_BIND });
    const src = f.pd.allocBuffer(64);
    const mw = f.pd.allocMw();
    const before = mw.rkey;
    // bind on the responder's QP: a type 2 window is tied to it
    b.postSend({
      wrId: 1,
      opcode: WrOpcode.BIND_MW,
      bind: { mw, mr, offset: 1024, length: 512, access: AccessFlags.REMOTE_WRITE },
    });
    let [w] = waitWc(f.cq, 1);
    assert.equal(w.status, WcStatus.SUCCESS, w.statusName);
    assert.notEqual(mw.rkey, before);
    src.buffer.set(new TextEncoder().encode("via window"));
    const at = mr.addr + 1024n + 16n;
    a.postSend({
      wrId: 2,
      opcode: WrOpcode.RDMA_WRITE,
      sg: [{ mr: src, length: 10 }],
      remote: { addr: at, rkey: mw.rkey },
    });
    [w] = waitWc(f.cq, 1);
    assert.equal(w.status, WcStatus.SUCCESS, w.statusName);
    assert.equal(new TextDecoder().decode(mr.buffer.subarray(1040, 1050)), "via window");
    b.postSend({ wrId: 3, opcode: WrOpcode.LOCAL_INV, invalidateRkey: mw.rkey });
    [w] = waitWc(f.cq, 1);
    assert.equal(w.status, WcStatus.SUCCESS, w.statusName);
    a.postSend({
      wrId: 4,
      opcode: WrOpcode.RDMA_WRITE,
      sg: [{ mr: src, length: 10 }],
      remote: { addr: at, rkey: mw.rkey },
    });
    [w] = waitWc(f.cq, 1);
    assert.equal(w.wrId, 4n);
    assert.equal(w.status, WcStatus.REM_ACCESS_ERR, w.statusName);
  },
);

deviceTest("verbs: solicited-only notification wakes only on a SOLICITED send", async (env) => {
  using f = fixture(env);
  const ch = f.ctx.createCompChannel();
  const rcq = f.ctx.createCq({ cqe: 16, channel: ch });
  const [a, b] = qpPair(f, { cqB: rcq });
  const src = f.pd.allocBuffer(64);
  const dst = f.pd.allocBuffer(64);
  b.postRecv([{ wrId: 1, sg: [{ mr: dst }] }, { wrId: 2, sg: [{ mr: dst }] }]);
  rcq.requestNotify(true);
  assert.equal(ch.armedCqs, 1);
  a.postSend({ wrId: 10, sg: [{ mr: src, length: 4 }] });
  waitWc(f.cq, 1); // the send completed, so the receive is there too
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(ch.getEvent(), null, "a non-solicited send must not wake a solicited-only CQ");
  a.postSend({
    wrId: 11,
    flags: SendFlags.SIGNALED | SendFlags.SOLICITED,
    sg: [{ mr: src, length: 4 }],
  });
  let fired = null;
  const deadline = Date.now() + 10_000;
  while (!fired && Date.now() < deadline) {
    fired = ch.getEvent();
    if (!fired) await new Promise((r) => setTimeout(r, 5));
  }
  assert.equal(fired, rcq);
  assert.equal(rcq.unackedEvents, 1);
  assert.equal(rcq.armed, false, "the event read disarmed the CQ");
  assert.equal(ch.armedCqs, 0, "no armed CQ is left to signal");
  const wcs = waitWc(rcq, 2);
  assert.deepEqual(wcs.map((w) => w.wrId), [1n, 2n]);
  // destroying a CQ with an un-acked event works: the library acks it first
  rcq.close();
  assert.equal(rcq.unackedEvents, 0);
  assert.ok(b.closed, "closing the CQ closed the QP using it first");
});

deviceTest("verbs: SRQ limit raises SRQ_LIMIT_REACHED as an async event", async (env) => {
  using f = fixture(env);
  const srq = f.pd.createSrq({ maxWr: 16 });
  const a = f.pd.createQp({ type: QpType.RC, sendCq: f.cq });
  const b = f.pd.createQp({ type: QpType.RC, sendCq: f.cq, srq });
  const gid = f.ctx.queryGid(env.port, env.gidIndex);
  const o = { port: env.port, sgidIndex: env.gidIndex };
  a.activate({ qpNum: b.qpNum, psn: 0, gid }, o);
  b.activate({ qpNum: a.qpNum, psn: 0, gid }, o);
  const buf = f.pd.allocBuffer(64 * 8);
  srq.postRecv(
    [0, 1, 2, 3, 4, 5, 6, 7].map((i) => ({
      wrId: i,
      sg: [{ mr: buf, offset: i * 64, length: 64 }],
    })),
  );
  srq.setLimit(7);
  assert.equal(srq.query().limit, 7);
  assert.equal(f.ctx.getAsyncEvent(), null);
  const src = f.pd.allocBuffer(64);
  a.postSend([{ wrId: 100, sg: [{ mr: src, length: 1 }] }, {
    wrId: 101,
    sg: [{ mr: src, length: 1 }],
  }]);
  waitWc(f.cq, 4);
  let ev = null;
  const deadline = Date.now() + 10_000;
  while (!ev && Date.now() < deadline) {
    ev = f.ctx.getAsyncEvent();
    if (!ev) await new Promise((r) => setTimeout(r, 5));
  }
  assert.ok(ev, "no async event");
  assert.equal(ev.type, EventType.SRQ_LIMIT_REACHED);
  assert.equal(ev.typeName, "IBV_EVENT_SRQ_LIMIT_REACHED");
  assert.equal(ev.srq, srq);
  assert.equal(srq.query().limit, 0, "the limit disarms when it fires");
});
