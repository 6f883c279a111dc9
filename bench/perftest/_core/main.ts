/**
 * One run of a perftest tool: the same steps, in the same order, as perftest's, so that the
 * peer can be the C program: open the device, connect the exchange (TCP, or rdma_cm with
 * -R), exchange versions, system data and MTU, create the QPs (or connect them through
 * rdma_cm between two handshakes), then the tool's own sequence of address handshakes, QP
 * transitions, runs and reports, and the closing handshake.
 *
 * The tool sequences (H = one handshake of QP 0's address, A = one handshake per QP):
 *
 * | tool                | before the run                                   | after          |
 * | ------------------- | ------------------------------------------------ | -------------- |
 * | send_lat            | A, connect, H, A (printed); per size: recvs, H   | H, done        |
 * | send_bw             | A, connect, H, A (printed); per size: recvs, H   | (-a: H) H, done|
 * | write_lat           | H, A, connect, A (printed), H                    | —              |
 * | read/atomic_lat     | H, A, connect, A (printed), H; server: H, done   | H, done        |
 * | write/read/atomic_bw| A, connect, A (printed), H; server: H, report    | H, report, H, done |
 *
 * @module
 */

import {
  type AddressHandle,
  bytesToMtu,
  type CmId,
  type Context,
  GidType,
  LinkLayer,
  type Mtu,
  mtuToBytes,
  parseGid,
  PortState,
  type QueuePair,
} from "../../../mod.ts";
import {
  cmAccept,
  cmClose,
  cmConnect,
  cmContext,
  cmCreateQp,
  cmListen,
  type CmListening,
  cmStopListening,
  createQp,
  isIwarp,
  openContext,
  type PathOptions,
  type PeerQp,
  qpToInit,
  qpToRtr,
  qpToRts,
  udAddressHandle,
} from "./bringup.ts";
import { BwReceiver, BwSender, type Walk } from "./bw.ts";
import { runCli, type Settings, type ToolDef } from "./cli.ts";
import { latencyTest } from "./lat.ts";
import { counted } from "./cost.ts";
import {
  type BwReport,
  CmChannel,
  type Dest,
  exchangeBwReport,
  exchangeMtu,
  exchangeSysData,
  exchangeVersions,
  type OobChannel,
  TcpChannel,
} from "./oob.ts";
import { bandwidthReport, latencyStats, Output, RESULT_LINE } from "./report.ts";
import { type Base, createBase, qpAccess, qpInit, type Resources } from "./resources.ts";

/** How long a client keeps retrying a server that is not listening yet. */
const PATIENCE_MS = 60_000;
/** Our page and cache line sizes (the exchange takes the larger of both sides'). */
const PAGE_SIZE = 4096;
const CACHE_LINE = 64;

/** Runs `tool` with this process's arguments and exits. */
export function perftest(tool: ToolDef): Promise<never> {
  return runCli(tool, (s) => run(s));
}

function isV4Mapped(gid: Uint8Array): boolean {
  for (let i = 0; i < 10; i++) if (gid[i] !== 0) return false;
  return gid[10] === 0xff && gid[11] === 0xff;
}

/** perftest's default GID on Ethernet: IPv4-mapped first, then RoCE v2 over v1, lowest index. */
function bestGid(ctx: Context, port: number): number {
  let best = -1, bestScore = -1;
  for (const e of ctx.gidTable()) {
    if (e.portNum !== port) continue;
    const score = (isV4Mapped(parseGid(e.gid)) ? 2 : 0) + (e.gidType === GidType.ROCE_V2 ? 1 : 0);
    if (score > bestScore || (score === bestScore && e.gidIndex < best)) {
      best = e.gidIndex;
      bestScore = score;
    }
  }
  return Math.max(best, 0);
}

function peerQp(d: Dest): PeerQp {
  return { lid: d.lid, qpn: d.qpn, psn: d.psn, gid: d.gid, outReads: d.outReads };
}

const ZERO_DEST: Dest = {
  lid: 0,
  outReads: 0,
  qpn: 0,
  psn: 0,
  rkey: 0,
  vaddr: 0,
  gid: new Uint8Array(16),
  srqn: 0,
};

/** The message sizes of the run: one, or 2..2^23 with -a (UD: up to the MTU). */
function sizesOf(s: Settings, size: number, mtuBytes: number): number[] {
  if (!s.all) return [size];
  const max = s.connection === "UD" ? mtuBytes : 1 << 23;
  const out: number[] = [];
  for (let v = 2; v <= max; v *= 2) out.push(v);
  return out;
}

async function run(s: Settings): Promise<number> {
  const { verb, test } = s.tool;
  const server = s.host === undefined;
  const out = new Output(s);

  const ctx = openContext(s.device);
  const device = ctx.deviceName;
  const port = ctx.queryPort(s.ibPort);
  if (port.state !== PortState.ACTIVE) {
    throw new Error(`Port number ${s.ibPort} state is ${port.stateName}`);
  }
  const iwarp = isIwarp(device);
  if (iwarp && !s.rdmaCm) {
    throw new Error("iWARP QPs connect only through rdma_cm: run both sides with -R");
  }
  const ethernet = port.linkLayer === LinkLayer.ETHERNET;
  const gidIndex = s.gidIndex >= 0 ? s.gidIndex : ethernet ? bestGid(ctx, s.ibPort) : -1;
  const withGid = gidIndex >= 0;
  const asked = s.mtu ? bytesToMtu(s.mtu)! : port.activeMtu;
  const localMtu: Mtu = asked < port.activeMtu ? asked : port.activeMtu;
  let outReads = 1;
  if (verb === "read" || verb === "atomic") {
    const max = Number(ctx.queryDevice().maxQpRdAtom);
    outReads = s.outReads > 0 && s.outReads <= max ? s.outReads : max;
  }

  if (server) out.waiting();
  const ch: OobChannel = s.rdmaCm
    ? server
      ? await CmChannel.accept(s.port, gidIndex)
      : await CmChannel.connect(s.host!, s.port, gidIndex, PATIENCE_MS)
    : server
    ? await TcpChannel.accept(s.port, withGid)
    : await TcpChannel.connect(s.host!, s.port, withGid, PATIENCE_MS);

  await exchangeVersions(ch);
  const walk: Walk = await exchangeSysData(ch, PAGE_SIZE, CACHE_LINE);
  const mtu = await exchangeMtu(ch, localMtu);
  const mtuBytes = mtuToBytes(mtu)!;
  let size = s.size;
  if (s.connection === "UD" && size > mtuBytes) {
    if (s.sizeGiven && !s.all) throw new Error("Max message size in UD cannot be greater than MTU");
    size = mtuBytes;
  }
  const credits = verb === "send" && test === "bw" && iwarp;
  const sys = { ...walk, size, iwarp, credits };
  const path: PathOptions = {
    port: s.ibPort,
    pathMtu: mtu,
    gidIndex,
    sl: s.sl,
    qpTimeout: s.qpTimeout,
    access: qpAccess(verb),
  };

  // the test QPs: plain, or connected through rdma_cm between two handshakes
  let res: Resources;
  let ids: CmId[] = [];
  if (s.rdmaCm) {
    // the server listens before its half of the handshake: perftest's client connects right
    // after it, and does not survive a refused first attempt
    const listening = server ? cmListen(s.port) : undefined;
    await ch.handshake(ZERO_DEST);
    ({ res, ids } = await connectWithCm(s, sys, outReads, listening));
    await ch.handshake(ZERO_DEST);
  } else {
    const base = createBase(ctx, s, sys);
    const qps: QueuePair[] = [];
    for (let i = 0; i < s.numQps; i++) {
      const qp = createQp(base.pd, qpInit(base, s));
      qpToInit(qp, path);
      qps.push(qp);
    }
    res = { ...base, qps };
  }

  const gid = withGid ? parseGid(ctx.queryGid(s.ibPort, gidIndex)) : new Uint8Array(16);
  const my: Dest[] = res.qps.map((qp, i) => ({
    lid: port.lid,
    outReads,
    qpn: qp.qpNum,
    psn: Math.floor(Math.random() * 0x1000000),
    rkey: res.mr.rkey,
    vaddr: res.mr.addrNumber + res.layout.remoteOffset(i),
    gid,
    srqn: 0,
  }));
  out.banner({
    device,
    transport: iwarp ? "IW" : "IB",
    linkLayer: ethernet ? "Ethernet" : "IB",
    mtuBytes,
    gidIndex,
    outReads,
    method: ch.method,
    inline: s.inlineSize,
  });
  if (res.credit) {
    for (let i = 0; i < my.length; i++) {
      my[i].rkey = res.credit.rkey;
      my[i].vaddr = res.credit.addrNumber + 4 * (s.numQps + i);
    }
  }

  const H = () => ch.handshake(my[0]);
  const handshakeAll = async () => {
    const peers: Dest[] = [];
    for (const d of my) peers.push(await ch.handshake(d));
    return peers;
  };
  let ahs: AddressHandle[] | undefined;
  const connect = (peers: Dest[]) => {
    if (s.rdmaCm) return;
    if (withGid && isV4Mapped(my[0].gid) !== isV4Mapped(peers[0].gid)) {
      throw new Error(
        "Found Incompatibility issue with GID types. Please Try to use a different IP version.",
      );
    }
    const active = test === "lat" || !server;
    res.qps.forEach((qp, i) => {
      qpToRtr(qp, peerQp(peers[i]), outReads, path);
      if (active) qpToRts(qp, my[i].psn, peerQp(peers[i]), path);
    });
    if (s.connection === "UD" && active) {
      ahs = peers.map((p) => udAddressHandle(res.pd, peerQp(p), path));
    }
  };
  const printAddresses = async () => {
    for (const d of my) out.address("local", d, withGid);
    for (const d of my) out.address("remote", await ch.handshake(d), withGid);
  };
  const sizes = sizesOf(s, size, mtuBytes);
  const finish = async (done: boolean) => {
    if (done) await H();
    for (const id of ids) await cmClose(id, !server);
    await ch.close(done);
  };

  if (verb === "send" && test === "lat") {
    const peers = await handshakeAll();
    connect(peers);
    await H();
    await printAddresses();
    out.header();
    for (const sz of sizes) {
      const t = latencyTest(res, s, sz, peers[0], ahs?.[0]);
      t.postRecvs();
      await H();
      reportLatency(out, s, sz, await counted(s, sz, () => t.run()));
    }
    out.footer();
    await finish(true);
  } else if (verb === "send") {
    const peers = await handshakeAll();
    connect(peers);
    await H();
    await printAddresses();
    out.header();
    for (const sz of sizes) {
      using side = server
        ? new BwReceiver(res, s, sz, peers, walk)
        : new BwSender(res, s, sz, peers, ahs, walk);
      if (side instanceof BwReceiver) side.postRecvs();
      await H();
      res.credit?.buffer.fill(0);
      out.bandwidth(bandwidthReport(sz, await counted(s, sz, () => side.run()), s.reportGbits));
      if (s.all) await H();
    }
    out.footer();
    await finish(true);
  } else if (test === "lat") {
    await H();
    const peers = await handshakeAll();
    connect(peers);
    await printAddresses();
    await H();
    if (server && verb !== "write") {
      await finish(true);
      out.line(RESULT_LINE);
      return 0;
    }
    out.header();
    for (const sz of sizes) {
      const t = latencyTest(res, s, sz, peers[0], undefined);
      reportLatency(out, s, sz, await counted(s, sz, () => t.run()));
    }
    out.footer();
    await finish(verb !== "write");
  } else {
    const peers = await handshakeAll();
    connect(peers);
    await printAddresses();
    await H();
    out.header();
    const none: BwReport = { size: 0, iters: 0, bwPeak: 0, bwAvg: 0, msgRate: 0 };
    if (server) {
      await H();
      out.bandwidth(await exchangeBwReport(ch, none));
      out.footer();
      await finish(true);
      return 0;
    }
    let last = none;
    for (const sz of sizes) {
      using sender = new BwSender(res, s, sz, peers, undefined, walk);
      last = bandwidthReport(sz, await counted(s, sz, () => sender.run()), s.reportGbits);
      out.bandwidth(last);
    }
    out.footer();
    await H();
    await exchangeBwReport(ch, last);
    await finish(true);
  }
  return 0;
}

function reportLatency(
  out: Output,
  s: Settings,
  size: number,
  r: { tposted: Float64Array; iters: number; sampleMs: number },
): void {
  const rtt = s.tool.verb === "read" || s.tool.verb === "atomic" ? 1 : 2;
  if (s.duration) {
    const tAvg = r.iters > 0 ? (r.sampleMs * 1000) / rtt / r.iters : 0;
    const tps = r.sampleMs > 0 ? r.iters / (r.sampleMs / 1000) : 0;
    out.latencyDuration(size, r.iters, tAvg, tps);
  } else out.latency(size, r.iters, latencyStats(r.tposted, r.iters, rtt));
}

/** -R: the test QPs connected through rdma_cm, one connection per QP, on the test port. */
async function connectWithCm(
  s: Settings,
  sys: { cycleBuffer: number; cacheLine: number; size: number; iwarp: boolean; credits: boolean },
  outReads: number,
  listening: CmListening | undefined,
): Promise<{ res: Resources; ids: CmId[] }> {
  let base: Base | undefined;
  const qps: QueuePair[] = [];
  const setup = (id: CmId) => {
    base ??= createBase(cmContext(id), s, sys);
    const { sendCq, recvCq, cap } = qpInit(base, s);
    qps.push(cmCreateQp(id, base.pd, { sendCq, recvCq, cap }));
  };
  const reads = s.tool.verb === "read" || s.tool.verb === "atomic" ? outReads : 0;
  const param = {
    responderResources: reads,
    initiatorDepth: reads,
    retryCount: 7,
    rnrRetryCount: 7,
  };
  const ids: CmId[] = [];
  if (listening) {
    try {
      for (let i = 0; i < s.numQps; i++) ids.push(await cmAccept(listening, setup, param));
    } finally {
      cmStopListening(listening);
    }
  } else {
    for (let i = 0; i < s.numQps; i++) {
      ids.push(await cmConnect(s.host!, s.port, setup, param, PATIENCE_MS));
    }
  }
  return { res: { ...base!, qps }, ids };
}
