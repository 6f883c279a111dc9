/** verbs: every opcode over RC, UC and UD, SRQ, WR lists, inline, with data checked. */
import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import {
  AccessFlags,
  InvalidArgumentError,
  InvalidWorkRequestError,
  MAX_POLL_TRIES,
  QpType,
  SendFlags,
  WcFlags,
  WcOpcode,
  WcStatus,
  WrOpcode,
} from "../lib.ts";
import { fixture, qpPair, waitWc } from "./verbs-helpers.ts";

const REMOTE = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ |
  AccessFlags.REMOTE_ATOMIC;
const text = (b: Uint8Array) => new TextDecoder().decode(b);
const bytes = (s: string) => new TextEncoder().encode(s);

deviceTest("verbs RC: SEND_WITH_IMM delivers imm in host order", (env) => {
  using f = fixture(env);
  const [a, b] = qpPair(f);
  const src = f.pd.allocBuffer(64);
  const dst = f.pd.allocBuffer(64);
  src.buffer.set(bytes("imm!"));
  b.postRecv({ wrId: 1, sg: [{ mr: dst }] });
  a.postSend({
    wrId: 2,
    opcode: WrOpcode.SEND_WITH_IMM,
    imm: 0x12345678,
    sg: [{ mr: src, length: 4 }],
  });
  const [w1, w2] = waitWc(f.cq, 2);
  const recv = w1.qpNum === b.qpNum ? w1 : w2;
  assert.equal(recv.status, WcStatus.SUCCESS);
  assert.equal(recv.opcode, WcOpcode.RECV);
  assert.ok(recv.wcFlags & WcFlags.WITH_IMM);
  assert.equal(recv.immData, 0x12345678);
  assert.equal(text(dst.buffer.subarray(0, recv.byteLen)), "imm!");
});

deviceTest("verbs RC: RDMA_WRITE and RDMA_WRITE_WITH_IMM land in remote memory", (env) => {
  using f = fixture(env);
  const [a, b] = qpPair(f, { connect: { accessFlags: REMOTE } });
  const src = f.pd.allocBuffer(128);
  const dst = f.pd.allocBuffer(128, { access: REMOTE });
  src.buffer.set(bytes("written by RDMA_WRITE"));
  a.postSend({
    wrId: 1,
    opcode: WrOpcode.RDMA_WRITE,
    sg: [{ mr: src, length: 21 }],
    remote: dst.remote(8),
  });
  const [w] = waitWc(f.cq, 1);
  assert.equal(w.status, WcStatus.SUCCESS);
  assert.equal(w.opcode, WcOpcode.RDMA_WRITE);
  assert.equal(text(dst.buffer.subarray(8, 29)), "written by RDMA_WRITE");

  src.buffer.set(bytes("with imm"));
  b.postRecv({ wrId: 5, sg: [] });
  a.postSend({
    wrId: 2,
    opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
    imm: 0xdeadbeef,
    sg: [{ mr: src, length: 8 }],
    remote: dst.remote(64),
  });
  const wcs = waitWc(f.cq, 2);
  const recv = wcs.find((x) => x.qpNum === b.qpNum)!;
  assert.equal(recv.status, WcStatus.SUCCESS);
  assert.equal(recv.opcode, WcOpcode.RECV_RDMA_WITH_IMM);
  assert.equal(recv.immData, 0xdeadbeef);
  assert.equal(recv.wrId, 5n);
  assert.equal(text(dst.buffer.subarray(64, 72)), "with imm");
});

deviceTest(
  "verbs: cq.poll(max, tries) polls until completions arrive, at most `tries` polls",
  (env) => {
    using f = fixture(env);
    const [a, b] = qpPair(f, { cap: { maxSendWr: 32, maxRecvWr: 32 } });
    assert.equal(f.cq.poll(undefined, 1000), 0, "an empty CQ: every try comes back empty");
    for (const tries of [0, -1, 1.5, MAX_POLL_TRIES + 1, NaN]) {
      assert.throws(() => f.cq.poll(1, tries), InvalidArgumentError, `tries ${tries}`);
    }
    const src = f.pd.allocBuffer(64);
    const dst = f.pd.allocBuffer(64);
    src.buffer.set(bytes("polled"));
    for (let i = 0; i < 20; i++) b.postRecv({ wrId: 100 + i, sg: [{ mr: dst }] });
    for (let i = 0; i < 20; i++) {
      a.postSend({ wrId: i, opcode: WrOpcode.SEND, sg: [{ mr: src, length: 6 }] });
    }
    // 40 completions in all (20 sends, 20 receives): each call returns as soon as a poll finds
    // some, never more than `max`
    let seen = 0;
    const deadline = Date.now() + 10_000;
    while (seen < 40 && Date.now() < deadline) {
      const n = f.cq.poll(3, 64);
      assert.ok(n >= 0 && n <= 3, `poll(3, 64) returned ${n}`);
      for (let i = 0; i < n; i++) assert.equal(f.cq.completion(i).status, WcStatus.SUCCESS);
      seen += n;
    }
    assert.equal(seen, 40);
    assert.equal(f.cq.poll(undefined, 64), 0);
    assert.equal(text(dst.buffer.subarray(0, 6)), "polled");
  },
);

deviceTest("verbs RC: RDMA_READ reads remote memory", (env) => {
  using f = fixture(env);
  const [a] = qpPair(f, { connect: { accessFlags: REMOTE } });
  const local = f.pd.allocBuffer(64);
  const remote = f.pd.allocBuffer(64, { access: REMOTE });
  remote.buffer.set(bytes("remote bytes"), 4);
  a.postSend({
    wrId: 3,
    opcode: WrOpcode.RDMA_READ,
    sg: [{ mr: local, length: 12 }],
    remote: remote.remote(4),
  });
  const [w] = waitWc(f.cq, 1);
  assert.equal(w.status, WcStatus.SUCCESS);
  assert.equal(w.opcode, WcOpcode.RDMA_READ);
  assert.equal(w.byteLen, 12);
  assert.equal(text(local.buffer.subarray(0, 12)), "remote bytes");
});

deviceTest("verbs RC: atomics return the old value and change remote memory", (env) => {
  using f = fixture(env);
  const [a] = qpPair(f, { connect: { accessFlags: REMOTE } });
  const local = f.pd.allocBuffer(64);
  const remote = f.pd.allocBuffer(64, { access: REMOTE });
  const rv = new DataView(remote.buffer.buffer, remote.buffer.byteOffset, 64);
  const lv = new DataView(local.buffer.buffer, local.buffer.byteOffset, 64);
  rv.setBigUint64(8, 100n, true);
  a.postSend({
    wrId: 1,
    opcode: WrOpcode.ATOMIC_FETCH_AND_ADD,
    sg: [{ mr: local, offset: 0, length: 8 }],
    remote: remote.remote(8),
    compareAdd: 23,
  });
  let [w] = waitWc(f.cq, 1);
  assert.equal(w.status, WcStatus.SUCCESS);
  assert.equal(w.opcode, WcOpcode.FETCH_ADD);
  assert.equal(lv.getBigUint64(0, true), 100n);
  assert.equal(rv.getBigUint64(8, true), 123n);

  a.postSend({
    wrId: 2,
    opcode: WrOpcode.ATOMIC_CMP_AND_SWP,
    sg: [{ mr: local, offset: 8, length: 8 }],
    remote: remote.remote(8),
    compareAdd: 123n,
    swap: 0x1122334455667788n,
  });
  [w] = waitWc(f.cq, 1);
  assert.equal(w.status, WcStatus.SUCCESS);
  assert.equal(w.opcode, WcOpcode.COMP_SWAP);
  assert.equal(lv.getBigUint64(8, true), 123n);
  assert.equal(rv.getBigUint64(8, true), 0x1122334455667788n);

  a.postSend({
    wrId: 3,
    opcode: WrOpcode.ATOMIC_CMP_AND_SWP,
    sg: [{ mr: local, offset: 16, length: 8 }],
    remote: remote.remote(8),
    compareAdd: 1n,
    swap: 2n,
  });
  [w] = waitWc(f.cq, 1);
  assert.equal(w.status, WcStatus.SUCCESS);
  assert.equal(lv.getBigUint64(16, true), 0x1122334455667788n, "old value returned");
  assert.equal(rv.getBigUint64(8, true), 0x1122334455667788n, "no swap when compare differs");
});

deviceTest("verbs UC: send and RDMA write", (env) => {
  using f = fixture(env);
  const [a, b] = qpPair(f, { type: QpType.UC, connect: { accessFlags: AccessFlags.REMOTE_WRITE } });
  const src = f.pd.allocBuffer(64);
  const dst = f.pd.allocBuffer(64, { access: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE });
  src.buffer.set(bytes("uc send"));
  b.postRecv({ wrId: 4, sg: [{ mr: dst, length: 32 }] });
  a.postSend({ wrId: 5, sg: [{ mr: src, length: 7 }] });
  const wcs = waitWc(f.cq, 2);
  assert.ok(wcs.every((w) => w.status === WcStatus.SUCCESS));
  assert.equal(text(dst.buffer.subarray(0, 7)), "uc send");
  src.buffer.set(bytes("uc write"));
  a.postSend({
    wrId: 6,
    opcode: WrOpcode.RDMA_WRITE,
    sg: [{ mr: src, length: 8 }],
    remote: dst.remote(40),
  });
  const [w] = waitWc(f.cq, 1);
  assert.equal(w.opcode, WcOpcode.RDMA_WRITE);
  assert.equal(text(dst.buffer.subarray(40, 48)), "uc write");
});

deviceTest("verbs UD: send with AH and 40-byte GRH, reply through an AH from the WC", (env) => {
  using f = fixture(env);
  const [a, b] = qpPair(f, { type: QpType.UD });
  const gid = f.ctx.queryGid(env.port, env.gidIndex);
  const ah = f.pd.createAh({ port: env.port, grh: { dgid: gid, sgidIndex: env.gidIndex } });
  const src = f.pd.allocBuffer(256);
  const rbuf = f.pd.allocBuffer(256);
  const abuf = f.pd.allocBuffer(256);
  src.buffer.set(bytes("datagram"));
  b.postRecv({ wrId: 10, sg: [{ mr: rbuf }] });
  a.postRecv({ wrId: 11, sg: [{ mr: abuf }] });
  a.postSend({
    wrId: 12,
    sg: [{ mr: src, length: 8 }],
    ud: { ah, remoteQpn: b.qpNum, remoteQkey: 0x11111111 },
  });
  // poll by hand: the AH is made from the WC in place
  let replyAh = null;
  const deadline = Date.now() + 10_000;
  let seen = 0;
  while (!replyAh && Date.now() < deadline) {
    const got = f.cq.poll();
    for (let i = 0; i < got; i++) {
      const wc = f.cq.completion(i);
      seen++;
      assert.equal(wc.status, WcStatus.SUCCESS, wc.statusName);
      if (wc.qpNum !== b.qpNum) continue;
      assert.equal(wc.opcode, WcOpcode.RECV);
      assert.equal(wc.byteLen, 40 + 8);
      assert.ok(wc.hasGrh);
      assert.equal(wc.srcQp, a.qpNum);
      assert.equal(text(rbuf.buffer.subarray(40, 48)), "datagram");
      replyAh = f.pd.createAhFromWc(wc, { mr: rbuf }, env.port);
    }
  }
  assert.ok(replyAh, `no UD receive (saw ${seen})`);
  src.buffer.set(bytes("reply"));
  b.postSend({
    wrId: 13,
    sg: [{ mr: src, length: 5 }],
    ud: { ah: replyAh, remoteQpn: a.qpNum, remoteQkey: 0x11111111 },
  });
  const wcs = waitWc(f.cq, seen >= 2 ? 2 : 3);
  const back = wcs.find((w) => w.qpNum === a.qpNum && w.opcode === WcOpcode.RECV)!;
  assert.equal(back.srcQp, b.qpNum);
  assert.equal(text(abuf.buffer.subarray(40, 45)), "reply");
});

deviceTest("verbs SRQ: one SRQ shared by two QPs", (env) => {
  using f = fixture(env);
  const srq = f.pd.createSrq({ maxWr: 16 });
  const mk = (withSrq: boolean) =>
    f.pd.createQp({ type: QpType.RC, sendCq: f.cq, srq: withSrq ? srq : undefined });
  const a1 = mk(false), b1 = mk(true), a2 = mk(false), b2 = mk(true);
  const gid = f.ctx.queryGid(env.port, env.gidIndex);
  const o = { port: env.port, sgidIndex: env.gidIndex };
  for (const [x, y] of [[a1, b1], [b1, a1], [a2, b2], [b2, a2]]) {
    x.activate({ qpNum: y.qpNum, psn: 0, gid }, o);
  }
  const bufs = [f.pd.allocBuffer(64), f.pd.allocBuffer(64)];
  srq.postRecv([{ wrId: 100, sg: [{ mr: bufs[0] }] }, { wrId: 101, sg: [{ mr: bufs[1] }] }]);
  assert.throws(() => b1.postRecv({ sg: [] }), { name: "InvalidArgumentError" });
  const src = f.pd.allocBuffer(64);
  src.buffer.set(bytes("onetwo"));
  a1.postSend({ wrId: 1, sg: [{ mr: src, length: 3 }] });
  waitWc(f.cq, 2);
  a2.postSend({ wrId: 2, sg: [{ mr: src, offset: 3, length: 3 }] });
  const all = waitWc(f.cq, 2);
  void all;
  assert.equal(text(bufs[0].buffer.subarray(0, 3)), "one");
  assert.equal(text(bufs[1].buffer.subarray(0, 3)), "two");
  assert.deepEqual(srq.query().maxWr >= 16, true);
});

deviceTest(
  "verbs: a WR list whose third WR is invalid reports index 2; the first two were posted",
  (env) => {
    using f = fixture(env);
    const [a, b] = qpPair(f);
    const src = f.pd.allocBuffer(64);
    const dst = f.pd.allocBuffer(64);
    src.buffer.set(bytes("abcdef"));
    b.postRecv([{ wrId: 1, sg: [{ mr: dst, length: 8 }] }, {
      wrId: 2,
      sg: [{ mr: dst, offset: 8, length: 8 }],
    }]);
    const err = (() => {
      try {
        a.postSend([
          { wrId: 10, sg: [{ mr: src, length: 3 }] },
          { wrId: 11, sg: [{ mr: src, offset: 3, length: 3 }] },
          { wrId: 12, sg: [{ mr: src, offset: 60, length: 8 }] }, // outside the MR
          { wrId: 13, sg: [{ mr: src, length: 1 }] },
        ]);
      } catch (e) {
        return e;
      }
    })();
    assert.ok(err instanceof InvalidWorkRequestError, String(err));
    assert.equal(err.index, 2);
    assert.equal(err.posted, 2);
    assert.match(err.message, /outside its MR/);
    const wcs = waitWc(f.cq, 4);
    assert.deepEqual(wcs.filter((w) => w.qpNum === a.qpNum).map((w) => w.wrId).sort(), [10n, 11n]);
    assert.equal(text(dst.buffer.subarray(0, 3)), "abc");
    assert.equal(text(dst.buffer.subarray(8, 11)), "def");
  },
);

deviceTest(
  "verbs: inline send copies the data at post time; zero-length send has no SGE",
  (env) => {
    using f = fixture(env);
    const [a, b] = qpPair(f, { cap: { maxInlineData: 64 } });
    const src = f.pd.allocBuffer(64);
    const dst = f.pd.allocBuffer(64);
    src.buffer.set(bytes("inline!"));
    b.postRecv([{ wrId: 1, sg: [{ mr: dst }] }, { wrId: 2, sg: [{ mr: dst }] }]);
    a.postSend({
      wrId: 3,
      flags: SendFlags.SIGNALED | SendFlags.INLINE,
      sg: [{ mr: src, length: 7 }],
    });
    src.buffer.set(bytes("CHANGED"));
    let wcs = waitWc(f.cq, 2);
    assert.ok(wcs.every((w) => w.status === WcStatus.SUCCESS));
    assert.equal(text(dst.buffer.subarray(0, 7)), "inline!");
    a.postSend({ wrId: 4, sg: [] });
    wcs = waitWc(f.cq, 2);
    const recv = wcs.find((w) => w.qpNum === b.qpNum)!;
    assert.equal(recv.status, WcStatus.SUCCESS);
    assert.equal(recv.byteLen, 0);
  },
);
