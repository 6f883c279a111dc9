/**
 * Misuse and defects found from outside, as regression tests: each failed before its fix (a wrong promise
 * settled, a SIGSEGV, a hang), and now gets a typed error or the right result.
 */
import assert from "node:assert/strict";
import { deviceTest, notOnIwarp } from "../harness.ts";
import { connectOptions, type Fixture } from "./verbs-helpers.ts";
import {
  AccessFlags,
  ClosedError,
  CmEventChannel,
  InvalidArgumentError,
  InvalidWorkRequestError,
  type MemoryRegion,
  MemoryWindow,
  MwType,
  openDevice,
  QpType,
  RemoteMemory,
  SendFlags,
  WcOpcode,
  WrOpcode,
} from "../lib.ts";

function pairOnOneCq(env: Parameters<Parameters<typeof deviceTest>[1]>[0], channel = true) {
  const ctx = openDevice(env.device);
  const pd = ctx.allocPd();
  const ch = channel ? ctx.createCompChannel() : undefined;
  const cq = ctx.createCq({ cqe: 64, channel: ch });
  const f: Fixture = { ctx, pd, cq, env, [Symbol.dispose]: () => ctx.close() };
  const mk = () => pd.createQp({ type: QpType.RC, sendCq: cq, cap: { maxInlineData: 64 } });
  return { f, ctx, pd, cq, mk };
}

deviceTest(
  "defect: equal wr_ids on two QPs of one CQ, and on a send and a receive, settle their own promises",
  async (env) => {
    const { f, pd, mk } = pairOnOneCq(env);
    using _ = f;
    const [a, b, c, d] = [mk(), mk(), mk(), mk()];
    const gid = f.ctx.queryGid(env.port, env.gidIndex);
    const o = connectOptions(f);
    a.activate({ qpNum: b.qpNum, psn: 0, gid }, o);
    b.activate({ qpNum: a.qpNum, psn: 0, gid }, o);
    c.activate({ qpNum: d.qpNum, psn: 0, gid }, o);
    d.activate({ qpNum: c.qpNum, psn: 0, gid }, o);
    const src = pd.allocBuffer(64);
    const dst = pd.allocBuffer(256);
    // the same wrId 7 on a receive of b, a receive of d, a send of a and a send of c
    const rb = b.recv({ wrId: 7, sg: [{ mr: dst, offset: 0, length: 64 }] });
    const rd = d.recv({ wrId: 7, sg: [{ mr: dst, offset: 64, length: 64 }] });
    const sa = a.send({ wrId: 7, sg: [{ mr: src, length: 3 }] });
    const sc = c.send({ wrId: 7, sg: [{ mr: src, length: 5 }] });
    const [ra, rc] = await Promise.all([sa, sc]);
    assert.equal(ra.qpNum, a.qpNum);
    assert.equal(rc.qpNum, c.qpNum);
    assert.equal(ra.opcode, WcOpcode.SEND);
    const [gb, gd] = await Promise.all([rb, rd]);
    assert.deepEqual([gb.qpNum, gb.byteLen, gb.wrId], [b.qpNum, 3, 7n]);
    assert.deepEqual([gd.qpNum, gd.byteLen, gd.wrId], [d.qpNum, 5, 7n]);
    // a duplicate wrId is no longer refused: each tracked WR has its own library id
    const again = await Promise.all([
      b.recv({ wrId: 7, sg: [{ mr: dst, offset: 128, length: 64 }] }),
      a.send({ wrId: 7, sg: [{ mr: src, length: 1 }] }),
    ]);
    assert.equal(again[0].byteLen, 1);
  },
  { needs: notOnIwarp("QPs connected without rdma_cm") },
);

deviceTest(
  "defect: mr.buffer and the CQ's completion cursor are unusable after close, never freed memory",
  (env) => {
    const ctx = openDevice(env.device);
    const pd = ctx.allocPd();
    const mr = pd.allocBuffer(4096);
    const view = mr.buffer;
    view[0] = 42;
    const copy = new Uint8Array(view.buffer); // another view of the same memory
    mr.close();
    assert.equal(mr.buffer.length, 0, "the buffer is detached");
    assert.equal(view[0], undefined);
    assert.equal(copy.length, 0);
    const mr2 = pd.allocBuffer(64);
    const cq = ctx.createCq({ cqe: 4 });
    const kept = mr2.buffer;
    ctx.close(); // closing the parent frees the memory too
    assert.equal(kept.length, 0);
    assert.throws(() => cq.completion(0), ClosedError);
    assert.throws(() => cq.poll(), ClosedError);
  },
);

deviceTest(
  "defect: a look-alike MR, PD, CQ, AH or MW is refused before the provider (inline included)",
  (env) => {
    const { f, pd, cq, mk } = pairOnOneCq(env, false);
    using _ = f;
    const qp = mk();
    const peer = mk();
    const gid = f.ctx.queryGid(env.port, env.gidIndex);
    qp.activate({ qpNum: peer.qpNum, psn: 0, gid }, connectOptions(f));
    const real = pd.allocBuffer(64);
    const fake = {
      pd,
      lkey: real.lkey,
      rkey: real.rkey,
      addrNumber: 8, // an address no process owns: the provider would copy from it
      length: 64,
      access: AccessFlags.LOCAL_WRITE,
      closed: false,
    } as unknown as MemoryRegion;
    assert.throws(
      () =>
        qp.postSend({
          flags: SendFlags.INLINE | SendFlags.SIGNALED,
          sg: [{ mr: fake, length: 8 }],
        }),
      (e) => e instanceof InvalidWorkRequestError && /made by this library/.test(e.message),
    );
    assert.throws(
      () => pd.createQp({ type: QpType.RC, sendCq: { ...cq } as typeof cq }),
      InvalidArgumentError,
    );
    assert.throws(() => f.ctx.createCq({ cqe: 4, channel: {} as never }), InvalidArgumentError);
    assert.throws(
      () =>
        qp.postSend({ opcode: WrOpcode.BIND_MW, bind: { mw: {} as never, mr: real, access: 0 } }),
      InvalidWorkRequestError,
    );
    assert.throws(
      () => new MemoryWindow({ ...pd } as typeof pd, undefined, undefined as never),
      InvalidArgumentError,
    );
    assert.equal(cq.poll(), 0, "nothing reached the provider");
  },
  { needs: notOnIwarp("QPs connected without rdma_cm") },
);

deviceTest(
  "defect: an MR refuses close() while tracked work requests use it; closing the PD still works",
  async (env) => {
    const { f, pd, mk } = pairOnOneCq(env);
    using _ = f;
    const a = mk();
    const b = mk();
    const gid = f.ctx.queryGid(env.port, env.gidIndex);
    const o = connectOptions(f);
    a.activate({ qpNum: b.qpNum, psn: 0, gid }, o);
    b.activate({ qpNum: a.qpNum, psn: 0, gid }, o);
    const dst = pd.allocBuffer(64);
    const pending = b.recv({ wrId: 1, sg: [{ mr: dst }] });
    assert.throws(
      () => dst.close(),
      (e) => e instanceof InvalidArgumentError && /in flight|still use/.test(e.message),
    );
    assert.ok(!dst.closed);
    const src = pd.allocBuffer(8);
    await a.send({ sg: [{ mr: src }] });
    await pending;
    dst.close(); // completed: closes now
    assert.ok(dst.closed);
    const held = pd.allocBuffer(64);
    const never = b.recv({ wrId: 2, sg: [{ mr: held }] });
    pd.close(); // the owner closes the QP first, then the MR regardless
    assert.ok(held.closed);
    await assert.rejects(never, ClosedError);
  },
  { needs: notOnIwarp("QPs connected without rdma_cm") },
);

deviceTest("defect: resolveRoute before resolveAddress is a typed error, not SIGSEGV", async () => {
  using ch = new CmEventChannel();
  const id = ch.createId("TCP");
  await assert.rejects(id.resolveRoute({ timeout: 2000 }), InvalidArgumentError);
  await assert.rejects(id.connect({}, { timeout: 2000 }), InvalidArgumentError);
  await assert.rejects(id.accept({}, { timeout: 2000 }), InvalidArgumentError);
  id.close();
});

deviceTest(
  "defect: a huge spin budget is refused instead of blocking the event loop",
  async (env) => {
    const ctx = openDevice(env.device);
    try {
      const ch = ctx.createCompChannel();
      const cq = ctx.createCq({ cqe: 4, channel: ch });
      for (const spinMicros of [Infinity, 1e12, NaN, -1]) {
        await assert.rejects(cq.wait({ spinMicros, timeout: 100 }), InvalidArgumentError);
      }
      const t0 = performance.now();
      await assert.rejects(cq.wait({ spinMicros: 1000, timeout: 50 }));
      assert.ok(performance.now() - t0 < 5000, "a bounded spin ends with its timeout");
    } finally {
      ctx.close();
    }
  },
);

deviceTest(
  "defect: a Symbol as an SGE's or a bind's offset is a typed error, not a TypeError",
  async (env) => {
    const { f, pd, mk } = pairOnOneCq(env);
    using _ = f;
    const a = mk();
    const b = mk();
    const gid = f.ctx.queryGid(env.port, env.gidIndex);
    const o = connectOptions(f, {
      accessFlags: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE,
    });
    a.activate({ qpNum: b.qpNum, psn: 0, gid }, o);
    b.activate({ qpNum: a.qpNum, psn: 0, gid }, o);
    const access = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.MW_BIND;
    const mr = pd.allocBuffer(256, { access });
    const bad = Symbol("offset") as unknown as number;
    // an SGE without a length: its default length was computed from the offset before the check
    assert.throws(() => b.postRecv({ sg: [{ mr, offset: bad }] }), InvalidWorkRequestError);
    await assert.rejects(b.recv({ sg: [{ mr, offset: bad }] }), InvalidWorkRequestError);
    const mw = pd.allocMw(MwType.TYPE_2);
    assert.throws(
      () =>
        a.postSend({
          opcode: WrOpcode.BIND_MW,
          bind: { mw, mr, offset: bad, access: AccessFlags.REMOTE_WRITE },
        } as never),
      InvalidWorkRequestError,
    );
    const remote = RemoteMemory.from(mr.token());
    await assert.rejects(remote.write(a, { mr, offset: bad }), InvalidArgumentError);
    // the QPs still work
    const dst = pd.allocBuffer(64);
    const got = b.recv({ sg: [{ mr: dst }] });
    await a.send({ sg: [{ mr, length: 4 }] });
    assert.equal((await got).byteLen, 4);
  },
  { needs: notOnIwarp("QPs connected without rdma_cm") },
);
