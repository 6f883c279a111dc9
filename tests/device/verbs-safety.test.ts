/** verbs: validation before the provider, lifetimes, prepared WRs and a CQ shared by QPs. */
import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import {
  AccessFlags,
  ClosedError,
  InvalidWorkRequestError,
  openDevice,
  QpStateError,
  QpType,
  RdmaError,
  SendFlags,
  WcStatus,
  WrOpcode,
} from "../lib.ts";
import { fixture, qpPair, waitWc } from "./verbs-helpers.ts";

const ALL = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ |
  AccessFlags.REMOTE_ATOMIC;

function rejects(fn: () => void, pattern: RegExp, index = 0): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof InvalidWorkRequestError, String(e));
    assert.equal(e.index, index);
    assert.match(e.message, pattern);
    return true;
  });
}

deviceTest(
  "verbs validation: each caller mistake raises a typed error before the provider",
  (env) => {
    using f = fixture(env);
    const [rc] = qpPair(f, { cap: { maxInlineData: 32 }, connect: { accessFlags: ALL } });
    const [uc] = qpPair(f, { type: QpType.UC });
    const [ud] = qpPair(f, { type: QpType.UD });
    const mr = f.pd.allocBuffer(256, { access: ALL });
    const remote = mr.remote();
    rejects(
      () => uc.postSend({ opcode: WrOpcode.RDMA_READ, sg: [{ mr, length: 8 }], remote }),
      /RDMA_READ is not supported on IBV_QPT_UC/,
    );
    rejects(() =>
      uc.postSend({
        opcode: WrOpcode.ATOMIC_FETCH_AND_ADD,
        sg: [{ mr, length: 8 }],
        remote,
        compareAdd: 1,
      }), /not supported on IBV_QPT_UC/);
    rejects(
      () => ud.postSend({ opcode: WrOpcode.RDMA_WRITE, sg: [{ mr, length: 8 }], remote }),
      /RDMA_WRITE is not supported on IBV_QPT_UD/,
    );
    rejects(() =>
      rc.postSend({
        opcode: WrOpcode.ATOMIC_CMP_AND_SWP,
        sg: [{ mr, length: 8 }],
        remote: { addr: mr.addr + 4n, rkey: mr.rkey },
        compareAdd: 0,
        swap: 1,
      }), /not 8-byte aligned/);
    rejects(
      () =>
        rc.postSend({ flags: SendFlags.INLINE, sg: [{ mr, length: rc.cap.maxInlineData + 1 }] }),
      /exceed the QP's granted max_inline_data/,
    );
    const sges = Array.from(
      { length: rc.cap.maxSendSge + 1 },
      (_, i) => ({ mr, offset: i, length: 1 }),
    );
    rejects(() => rc.postSend({ sg: sges }), /exceed the QP's granted max_send_sge/);
    rejects(() => rc.postSend({ sg: [{ mr, offset: 200, length: 100 }] }), /outside its MR/);
    rejects(() => rc.postSend({ sg: [{ mr, length: 0 }] }), /0 bytes is not allowed/);
    // @ts-expect-error: imm is required by the type too; this checks the run-time guard
    rejects(() => rc.postSend({ opcode: WrOpcode.SEND_WITH_IMM, sg: [] }), /needs imm/);
    rejects(() => ud.postSend({ sg: [{ mr, length: 8 }] }), /UD send needs ud/);
    rejects(() => rc.postRecv({ sg: [{ mr, offset: 250, length: 10 }] }), /outside its MR/);
    const other = f.ctx.allocPd().allocBuffer(64);
    rejects(() => rc.postSend({ sg: [{ mr: other, length: 8 }] }), /another PD/);
    // nothing reached the provider: no completions
    assert.equal(f.cq.poll(), 0);

    const fresh = f.pd.createQp({ type: QpType.RC, sendCq: f.cq });
    assert.throws(
      () => fresh.postSend({ sg: [] }),
      (e) => e instanceof QpStateError && /IBV_QPS_RESET/.test(e.message),
    );
    assert.throws(() => fresh.postRecv({ sg: [] }), QpStateError);
    fresh.toInit({ port: env.port });
    assert.throws(
      () => fresh.postSend({ sg: [] }),
      (e) => e instanceof QpStateError && /IBV_QPS_INIT/.test(e.message),
    );
    fresh.postRecv({ sg: [] }); // allowed in INIT
    const gid = f.ctx.queryGid(env.port, env.gidIndex);
    fresh.toRtr({ qpNum: rc.qpNum, psn: 0, gid }, { port: env.port, sgidIndex: env.gidIndex });
    assert.throws(
      () => fresh.postSend({ sg: [] }),
      (e) => e instanceof QpStateError && /IBV_QPS_RTR/.test(e.message),
    );
    // a state that is no state (named in the error's text before the attributes are checked)
    for (const qpState of [Symbol("x"), "RTS", 99, {}]) {
      assert.throws(() => fresh.modify({ qpState } as never), (e) => e instanceof RdmaError);
    }
    // @ts-expect-error: the type admits RC, UC and UD only; this checks the run-time guard
    assert.throws(() => f.pd.createQp({ type: QpType.RAW_PACKET, sendCq: f.cq }), {
      name: "InvalidArgumentError",
    });
  },
);

deviceTest(
  "verbs lifetimes: parents close children first; use-after-close and double close are safe",
  (env) => {
    const ctx = openDevice(env.device);
    const pd = ctx.allocPd();
    const ch = ctx.createCompChannel();
    const cq = ctx.createCq({ cqe: 8, channel: ch });
    const qp = pd.createQp({ type: QpType.RC, sendCq: cq });
    const srq = pd.createSrq({ maxWr: 4 });
    const mr = pd.allocBuffer(64);
    const mw = pd.allocMw();
    const prepared = (() => {
      qp.toInit({ port: env.port });
      return qp.prepareRecv({ sg: [{ mr }] });
    })();
    cq.requestNotify();
    ctx.close();
    for (const o of [pd, ch, cq, qp, srq, mr, mw, prepared, ctx]) assert.ok(o.closed, o.kind);
    ctx.close();
    qp.close();
    assert.throws(() => qp.postSend({ sg: [] }), ClosedError);
    assert.throws(() => qp.postRecv({ sg: [] }), ClosedError);
    assert.throws(() => prepared.post(), ClosedError);
    assert.throws(() => cq.poll(), ClosedError);
    assert.throws(() => cq.requestNotify(), ClosedError);
    assert.throws(() => ch.getEvent(), ClosedError);
    assert.throws(() => pd.allocBuffer(8), ClosedError);
    assert.throws(() => srq.postRecv({ sg: [] }), ClosedError);
    assert.throws(() => ctx.queryPort(env.port), ClosedError);
    assert.throws(() => ctx.getAsyncEvent(), ClosedError);
    assert.throws(() => qp.modify({ qpState: 0 }), ClosedError);

    // a child alone: closing an MR used by nothing leaves the PD open
    using ctx2 = openDevice(env.device);
    const pd2 = ctx2.allocPd();
    const mr2 = pd2.allocBuffer(64);
    mr2.close();
    mr2.close();
    assert.ok(!pd2.closed);
    const cq2 = ctx2.createCq({ cqe: 4 });
    const qp2 = pd2.createQp({ type: QpType.UD, sendCq: cq2 });
    cq2.close();
    assert.ok(qp2.closed, "a QP closes before its CQ");
    assert.ok(!pd2.closed);
  },
);

deviceTest("verbs prepared WRs: build once, update fields in place, re-post", (env) => {
  using f = fixture(env);
  const [a, b] = qpPair(f, { connect: { accessFlags: ALL } });
  const src = f.pd.allocBuffer(256);
  const dst = f.pd.allocBuffer(4096, { access: ALL });
  const write = a.prepareSend({
    wrId: 0,
    opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
    imm: 0,
    sg: [{ mr: src, length: 4 }],
    remote: dst.remote(),
  });
  const recv = b.prepareRecv({ wrId: 0, sg: [] });
  for (let i = 0; i < 20; i++) {
    src.buffer[0] = i;
    src.buffer[i % 8 + 1] = 0xa0 + i;
    recv.setWrId(0, 1000 + i);
    recv.post();
    write.setWrId(0, i);
    write.setImm(0, 0x01000000 + i);
    write.setLength(0, 0, 1 + (i % 8) + 1);
    // odd rounds give the address as its two 32-bit words (the stream's posting path)
    const to = dst.addrNumber + i * 16;
    if (i % 2 === 0) write.setRemoteAddr(0, to);
    else write.setRemoteAddrWords(0, Math.floor(to / 2 ** 32) | 0, to | 0);
    write.post();
    const wcs = waitWc(f.cq, 2);
    const s = wcs.find((w) => w.qpNum === a.qpNum)!;
    const r = wcs.find((w) => w.qpNum === b.qpNum)!;
    assert.equal(s.status, WcStatus.SUCCESS);
    assert.equal(s.wrId, BigInt(i));
    assert.equal(r.wrId, BigInt(1000 + i));
    assert.equal(r.immData, 0x01000000 + i);
    assert.equal(r.byteLen, 1 + (i % 8) + 1);
    assert.equal(dst.buffer[i * 16], i);
    assert.equal(dst.buffer[i * 16 + (i % 8) + 1], 0xa0 + i);
  }
  assert.throws(() => write.setLength(0, 0, 1000), { name: "InvalidArgumentError" });
  assert.throws(() => write.setLength(0, 1, 4), { name: "InvalidArgumentError" });
  assert.throws(() => write.setRemoteAddrWords(0, 0, 2 ** 32), { name: "InvalidArgumentError" });
  assert.throws(() => write.setRemoteAddrWords(0, 0.5, 0), { name: "InvalidArgumentError" });
  assert.throws(
    // @ts-expect-error: remote is required by the type too; this checks the run-time guard
    () => a.prepareSend({ opcode: WrOpcode.RDMA_READ, sg: [] }),
    InvalidWorkRequestError,
  );
});

deviceTest("verbs: one CQ shared by many QPs dispatches completions by qp_num", (env) => {
  using f = fixture(env);
  const pairs = [qpPair(f), qpPair(f), qpPair(f)];
  const src = f.pd.allocBuffer(64);
  const dst = f.pd.allocBuffer(64 * 3);
  const seen = new Map<number, bigint[]>();
  for (const [a, b] of pairs) {
    for (const q of [a, b]) {
      seen.set(q.qpNum, []);
      q.onCompletion = (wc) => {
        assert.equal(wc.qpNum, q.qpNum);
        assert.equal(wc.status, WcStatus.SUCCESS);
        seen.get(q.qpNum)!.push(wc.wrId);
      };
    }
  }
  pairs.forEach(([a, b], i) => {
    b.postRecv({ wrId: 100 + i, sg: [{ mr: dst, offset: 64 * i, length: 64 }] });
    a.postSend({ wrId: i, sg: [{ mr: src, length: 8 }] });
  });
  let total = 0;
  const deadline = Date.now() + 10_000;
  while (total < 6 && Date.now() < deadline) total += f.cq.dispatch();
  assert.equal(total, 6);
  pairs.forEach(([a, b], i) => {
    assert.deepEqual(seen.get(a.qpNum), [BigInt(i)]);
    assert.deepEqual(seen.get(b.qpNum), [BigInt(100 + i)]);
  });
  f.cq.resize(128);
  assert.ok(f.cq.cqe >= 128);
});
