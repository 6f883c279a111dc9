/** verbs: device, context, PD, MR, CQ and QP basics on a real device. */
import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import {
  AccessFlags,
  ClosedError,
  NativeError,
  openDevice,
  PortState,
  QpState,
  QpType,
  SendFlags,
  WcOpcode,
  WcStatus,
  WrOpcode,
} from "../lib.ts";
import { fixture, qpPair, waitWc } from "./verbs-helpers.ts";

deviceTest("verbs: open device, query device/port/GIDs/pkeys as typed objects", (env) => {
  using ctx = openDevice(env.device);
  assert.equal(ctx.deviceName, env.device);
  const d = ctx.queryDevice();
  assert.ok((d.maxQp as number) > 0 && (d.maxQpWr as number) > 0 && (d.maxSge as number) > 0);
  assert.match(d.nodeGuidHex, /^[0-9a-f]{16}$/);
  assert.ok(Array.isArray(d.deviceCapFlagNames));
  const dx = ctx.queryDeviceEx();
  assert.equal(dx.maxQp, d.maxQp);
  assert.equal(dx.fwVer, d.fwVer);
  const p = ctx.queryPort(env.port);
  assert.equal(p.state, PortState.ACTIVE);
  assert.equal(p.stateName, "IBV_PORT_ACTIVE");
  assert.equal(p.linkLayerName, "IBV_LINK_LAYER_ETHERNET");
  assert.ok(p.activeMtuBytes >= 256);
  assert.ok(p.gidTblLen > env.gidIndex);
  const gid = ctx.queryGid(env.port, env.gidIndex);
  const v4 = env.address.split(".").map((x) => Number(x).toString(16).padStart(2, "0"));
  assert.equal(gid, `0000:0000:0000:0000:0000:ffff:${v4[0]}${v4[1]}:${v4[2]}${v4[3]}`);
  const gx = ctx.queryGidEx(env.port, env.gidIndex);
  assert.equal(gx.gid, gid);
  assert.equal(gx.gidTypeName, "IBV_GID_TYPE_ROCE_V2");
  const table = ctx.gidTable();
  assert.ok(table.some((e) => e.gid === gid && e.gidIndex === env.gidIndex));
  const pkeys = ctx.pkeys(env.port);
  assert.equal(pkeys[0], 0xffff);
});

deviceTest("verbs: queryDeviceEx nested capability structs and numCompVectors", (env) => {
  const ctx = openDevice(env.device);
  const d = ctx.queryDevice();
  const dx = ctx.queryDeviceEx();
  // device_cap_flags_ex carries the base flags in its low 32 bits
  assert.equal(Number(dx.deviceCapFlagsEx & 0xffffffffn), d.deviceCapFlags);
  assert.equal(dx.physPortCnt, d.physPortCnt);
  // every nested struct is a typed object, its names derived from its bits
  const odp = dx.odpCaps;
  assert.equal(typeof odp.generalCaps, "bigint");
  assert.equal(odp.generalCapNames.length, popcount(odp.generalCaps));
  const per = odp.perTransportCaps;
  for (
    const [mask, names] of [
      [per.rcOdpCaps, per.rcOdpCapNames],
      [per.ucOdpCaps, per.ucOdpCapNames],
      [per.udOdpCaps, per.udOdpCapNames],
      [dx.xrcOdpCaps, dx.xrcOdpCapNames],
    ] as const
  ) {
    assert.equal(names.length, popcount(mask));
    for (const name of names) assert.match(name, /^IBV_ODP_SUPPORT_[A-Z_]+$/);
  }
  for (const q of [dx.tsoCaps, dx.rssCaps, dx.packetPacingCaps]) {
    assert.equal(q.supportedQptNames.length, popcount(q.supportedQpts));
  }
  assert.equal(typeof dx.rssCaps.rxHashFieldsMask, "bigint");
  assert.equal(typeof dx.tmCaps.maxNumTags, "number");
  assert.equal(typeof dx.cqModCaps.maxCqCount, "number");
  assert.equal(typeof dx.pciAtomicCaps.fetchAdd, "number");
  if (env.device.startsWith("rxe")) {
    // soft-RoCE: no ODP, TSO, RSS, packet pacing, tag matching, CQ moderation, PCI atomics
    assert.deepEqual(odp.generalCapNames, []);
    assert.deepEqual(per.rcOdpCapNames, []);
    assert.deepEqual(
      [
        dx.tsoCaps.maxTso,
        dx.rssCaps.maxRwqIndirectionTables,
        dx.packetPacingCaps.qpRateLimitMax,
        dx.tmCaps.maxNumTags,
        dx.cqModCaps.maxCqCount,
        dx.pciAtomicCaps.fetchAdd,
        dx.rawPacketCaps,
      ],
      [0, 0, 0, 0, 0, 0, 0],
    );
    assert.deepEqual(dx.deviceCapFlagsExNames, d.deviceCapFlagNames);
  }
  // num_comp_vectors: every vector below it takes a CQ; the next one is refused
  const vectors = ctx.numCompVectors;
  assert.ok(Number.isInteger(vectors) && vectors >= 1, `numCompVectors ${vectors}`);
  const cq = ctx.createCq({ cqe: 4, compVector: vectors - 1 });
  assert.equal(cq.poll(), 0);
  assert.throws(
    () => ctx.createCq({ cqe: 4, compVector: vectors }),
    (e: unknown) => e instanceof NativeError && e.code === "EINVAL",
  );
  ctx.close();
  assert.throws(() => ctx.numCompVectors, ClosedError);
});

function popcount(v: number | bigint): number {
  let n = 0;
  for (let b = BigInt(v); b; b &= b - 1n) n++;
  return n;
}

deviceTest("verbs: MR access is least privilege; owned buffer is zero-copy", (env) => {
  using f = fixture(env);
  const mr = f.pd.allocBuffer(4096);
  assert.equal(mr.access, AccessFlags.LOCAL_WRITE);
  assert.equal(mr.buffer.byteLength, 4096);
  assert.notEqual(mr.lkey, 0);
  mr.buffer[5] = 42;
  assert.equal(mr.buffer[5], 42);
  const user = new Uint8Array(8192);
  const mr2 = f.pd.registerMemory(user, {
    access: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ,
  });
  assert.equal(mr2.buffer, user);
  assert.equal(mr2.remote(16, 32).length, 32);
  mr2.close();
  mr2.close();
  assert.throws(() => f.pd.allocBuffer(64, { access: AccessFlags.REMOTE_WRITE }), {
    name: "InvalidArgumentError",
  });
});

deviceTest("verbs: RC send/recv with granted caps and completion fields", (env) => {
  using f = fixture(env);
  const [a, b] = qpPair(f, { cap: { maxInlineData: 64 } });
  assert.ok(a.cap.maxInlineData >= 64);
  assert.equal(a.state, QpState.RTS);
  assert.equal(a.query().qpStateName, "IBV_QPS_RTS");
  const src = f.pd.allocBuffer(256);
  const dst = f.pd.allocBuffer(256);
  src.buffer.set(new TextEncoder().encode("hello rdma"));
  b.postRecv({ wrId: 7n, sg: [{ mr: dst }] });
  a.postSend({ wrId: 9, opcode: WrOpcode.SEND, sg: [{ mr: src, length: 10 }] });
  const wcs = waitWc(f.cq, 2);
  const send = wcs.find((w) => w.qpNum === a.qpNum)!;
  const recv = wcs.find((w) => w.qpNum === b.qpNum)!;
  assert.equal(send.status, WcStatus.SUCCESS);
  assert.equal(send.opcode, WcOpcode.SEND);
  assert.equal(send.wrId, 9n);
  assert.equal(recv.statusName, "IBV_WC_SUCCESS");
  assert.equal(recv.opcode, WcOpcode.RECV);
  assert.equal(recv.wrId, 7n);
  assert.equal(recv.byteLen, 10);
  assert.equal(new TextDecoder().decode(dst.buffer.subarray(0, 10)), "hello rdma");
  void SendFlags;
  void QpType;
});
