/**
 * The rest of rdma_cm: rdma_init_qp_attr (QPs of plain verbs following a CM connection on both
 * sides), rdma_join_multicast_ex (a send-only member reaching a full member), rdma_migrate_id (a
 * request and a connected id moved to other channels, the old ones closed), rdma_create_ep with
 * the rdma_verbs.h helpers (messages, RDMA write and read), and RDMA_OPTION_IB_PATH (a route set
 * from another id's path record). Where the soft providers lack a call the test asserts the
 * typed UnsupportedError naming the device and errno.
 */

import assert from "node:assert/strict";
import { deviceTest, notOnIwarp } from "../harness.ts";
import {
  AccessFlags,
  CmEventChannel,
  CmEventType,
  type CmId,
  createEndpoint,
  McJoinFlag,
  type MemoryRegion,
  type ProtectionDomain,
  QpState,
  QpType,
  type QueuePair,
  UnsupportedError,
  WcOpcode,
  WcStatus,
} from "../lib.ts";
import { Endpoint } from "./peers/endpoint.ts";
import { text } from "./peers/spawn.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const WAIT = { timeout: 20_000 };

/** A listening id on its own channel, bound to the device's address. */
function listener(address: string, ps: "TCP" | "UDP" = "TCP"): { ch: CmEventChannel; id: CmId } {
  const ch = new CmEventChannel();
  const id = ch.createId(ps);
  id.bind({ address, port: 0 });
  id.listen();
  return { ch, id };
}

/** A QP of plain verbs (not on the id), its PD, CQ and a buffer, on the id's device. */
function rawQp(id: CmId): { qp: QueuePair; mr: MemoryRegion; close(): void } {
  const ctx = id.context;
  const pd: ProtectionDomain = ctx.allocPd();
  const channel = ctx.createCompChannel();
  const cq = ctx.createCq({ cqe: 16, channel });
  const qp = pd.createQp({ type: QpType.RC, sendCq: cq, cap: { maxSendWr: 4, maxRecvWr: 4 } });
  const mr = pd.allocBuffer(4096, { access: AccessFlags.LOCAL_WRITE });
  return {
    qp,
    mr,
    close: () => {
      pd.close();
      cq.close();
      channel.close();
    },
  };
}

/**
 * The passive side of a disconnect: waits for DISCONNECTED, then answers it (`rdma_disconnect`
 * sends the DREP; the id stays open). Without the answer the initiator's `disconnect()` waits
 * for the CM's DREQ timeout (about 10 s on RoCE), as a C initiator would.
 */
async function answerDisconnect(id: CmId): Promise<void> {
  await id.waitDisconnected(WAIT);
  await id.disconnect({ close: false });
}

/** Sends `msg` from `a` and receives it in `b` (RC, receive posted first). */
async function exchange(
  a: { qp: QueuePair; mr: MemoryRegion },
  b: { qp: QueuePair; mr: MemoryRegion },
  msg: string,
): Promise<string> {
  const recv = b.qp.recv({ sg: [{ mr: b.mr, offset: 2048, length: 2048 }] }, WAIT);
  a.mr.buffer.set(enc(msg));
  await a.qp.send({ sg: [{ mr: a.mr, length: msg.length }] }, WAIT);
  const wc = await recv;
  return text(b.mr.buffer.slice(2048, 2048 + wc.byteLen));
}

deviceTest(
  "cm ex: initQpAttr moves QPs of plain verbs through a CM connection (both sides)",
  async (env) => {
    const srv = listener(env.address);
    const ch = new CmEventChannel();
    const cli = ch.createId("TCP");
    try {
      await cli.resolveAddress({ address: env.address, port: srv.id.localPort }, WAIT);
      await cli.resolveRoute(WAIT);
      const c = rawQp(cli);
      const init = cli.initQpAttr(QpState.INIT);
      assert.equal(init.qpState, QpState.INIT);
      assert.equal(init.port, cli.portNum);
      assert.equal(typeof init.accessFlags, "number");
      c.qp.modify(init);
      assert.equal(c.qp.state, QpState.INIT);
      const connecting = cli.connect({ qpNum: c.qp.qpNum }, WAIT);

      const req = await srv.id.getRequest(WAIT);
      const s = rawQp(req);
      s.qp.modify(req.initQpAttr(QpState.INIT));
      const rtr = req.initQpAttr(QpState.RTR);
      if (env.transport === "ib") {
        assert.equal(rtr.qpState, QpState.RTR);
        assert.equal(rtr.destQpNum, c.qp.qpNum, "the server's RTR names the client's QP");
        assert.ok(rtr.ahAttr?.grh, "RoCE: the path has a GRH");
        assert.equal(typeof rtr.rqPsn, "number");
        s.qp.modify(rtr);
        s.qp.modify(req.initQpAttr(QpState.RTS));
        assert.equal(s.qp.state, QpState.RTS);
      }
      // receives of the server before accept, of the client before it is established
      const sRecv = s.qp.recv({ sg: [{ mr: s.mr, offset: 2048, length: 2048 }] }, WAIT);
      const accepting = req.accept({ qpNum: s.qp.qpNum }, WAIT);
      const ev = await connecting;
      if (env.transport === "ib") {
        assert.equal(ev.type, CmEventType.CONNECT_RESPONSE);
        assert.equal(cli.connected, false);
        const crtr = cli.initQpAttr(QpState.RTR);
        assert.equal(crtr.destQpNum, s.qp.qpNum);
        c.qp.modify(crtr);
        c.qp.modify(cli.initQpAttr(QpState.RTS));
        cli.establish();
      } else {
        // iWARP: the CM moves the QP during the MPA exchange and reports ESTABLISHED
        assert.equal(ev.type, CmEventType.ESTABLISHED);
      }
      assert.equal(cli.connected, true);
      await accepting;
      c.mr.buffer.set(enc("raw hello"));
      await c.qp.send({ sg: [{ mr: c.mr, length: 9 }] }, WAIT);
      const got = await sRecv;
      assert.equal(text(s.mr.buffer.slice(2048, 2048 + got.byteLen)), "raw hello");
      assert.equal(await exchange(s, c, "raw reply"), "raw reply");
      await Promise.all([cli.disconnect(), answerDisconnect(req)]);
      req.close();
      c.close();
      s.close();
    } finally {
      cli.close();
      ch.close();
      srv.ch.close();
    }
  },
);

deviceTest(
  "cm ex: a send-only member (rdma_join_multicast_ex) reaches a full member",
  async (env) => {
    const group = `239.4.${Math.floor(Math.random() * 200)}.${"Bun" in globalThis ? 2 : 1}`;
    const ch = new CmEventChannel();
    const full = ch.createId("UDP");
    const sender = ch.createId("UDP");
    try {
      await full.resolveAddress({ address: group }, { ...WAIT, source: { address: env.address } });
      await sender.resolveAddress({ address: group }, {
        ...WAIT,
        source: { address: env.address },
      });
      const r = new Endpoint(full);
      const s = new Endpoint(sender);
      const joined = await full.joinMulticast({ address: group }, {
        ...WAIT,
        joinFlags: McJoinFlag.FULLMEMBER,
      });
      const sent = await sender.joinMulticast({ address: group }, {
        ...WAIT,
        joinFlags: McJoinFlag.SENDONLY_FULLMEMBER,
      });
      assert.equal(sent.ud!.qpNum, 0xffffff);
      assert.deepEqual(sent.ud!.ahAttr.grh?.dgid, joined.ud!.ahAttr.grh?.dgid);
      const ah = s.pd.createAh(sent.ud!.ahAttr);
      await new Promise((res) => setTimeout(res, 500));
      for (let i = 0; i < 3; i++) {
        await s.send(enc(`mc ${i}`), { ah, remoteQpn: sent.ud!.qpNum, remoteQkey: sent.ud!.qkey });
      }
      for (let i = 0; i < 3; i++) assert.equal(text((await r.recv()).bytes), `mc ${i}`);
      full.leaveMulticast({ address: group });
      sender.leaveMulticast({ address: group });
      ah.close();
      r.close();
      s.close();
    } finally {
      ch.close();
    }
  },
  { needs: notOnIwarp("multicast (asserted below)") },
);

deviceTest(
  "cm ex: on iWARP a multicast join is UnsupportedError naming the device",
  async (env) => {
    const ch = new CmEventChannel();
    const id = ch.createId("TCP");
    try {
      id.bind({ address: env.address, port: 0 });
      for (const joinFlags of [undefined, McJoinFlag.SENDONLY_FULLMEMBER]) {
        const err = await id.joinMulticast({ address: "239.4.4.4" }, { joinFlags }).then(
          () => null,
          (e) => e,
        );
        assert.ok(err instanceof UnsupportedError, `got ${err}`);
        assert.equal(err.code, "EOPNOTSUPP");
        assert.equal(
          err.operation,
          joinFlags === undefined ? "rdma_join_multicast" : "rdma_join_multicast_ex",
        );
        assert.match(err.message, new RegExp(`${env.device}: iWARP has no multicast`));
      }
    } finally {
      ch.close();
    }
  },
  { needs: (env) => env.transport === "iwarp" ? false : "IB/RoCE have multicast (tested above)" },
);

deviceTest(
  "cm ex: migrate moves a request and a connected id to other channels; the old ones close",
  async (env) => {
    const srv = listener(env.address);
    const ch = new CmEventChannel();
    const other = new CmEventChannel();
    const mine = new CmEventChannel();
    try {
      const cli = ch.createId("TCP");
      await cli.resolveAddress({ address: env.address, port: srv.id.localPort }, WAIT);
      await cli.resolveRoute(WAIT);
      const c = new Endpoint(cli);
      const connecting = cli.connect({}, WAIT);
      const req = await srv.id.getRequest(WAIT);
      const moved = req.migrate(mine);
      assert.equal(req.closed, true);
      assert.equal(moved.channel, mine);
      assert.equal(moved.request?.type, CmEventType.CONNECT_REQUEST);
      srv.id.close();
      srv.ch.close(); // the listener's channel goes; the request lives on its own
      const s = new Endpoint(moved);
      await Promise.all([moved.accept({}, WAIT), connecting]);
      const cliMoved = cli.migrate(other);
      ch.close(); // the client's first channel goes too
      assert.equal(cliMoved.qp, c.qp, "the QP went with the id");
      assert.equal(cliMoved.connected, true);
      await c.send(enc("after migrate"));
      assert.equal(text((await s.recv()).bytes), "after migrate");
      // DISCONNECTED comes on the new channels
      await Promise.all([cliMoved.disconnect(), answerDisconnect(moved)]);
      moved.close();
      assert.equal(c.qp.closed, true);
      c.close();
      s.close();
    } finally {
      ch.close();
      srv.ch.close();
      other.close();
      mine.close();
    }
  },
);

deviceTest(
  "cm ex: createEndpoint and the rdma_verbs.h helpers (send/recv, write, read, completions)",
  async (env) => {
    const qp = { cap: { maxSendWr: 4, maxRecvWr: 4, maxInlineData: 16 }, sqSigAll: true };
    const server = await createEndpoint({ hostname: env.address, port: 0, passive: true, qp });
    server.listen();
    const serving = (async () => {
      const id = await server.getRequest(WAIT);
      assert.notEqual(id.channel, server.channel, "the request has a channel of its own");
      assert.ok(id.qp && id.pd, "the request got its QP and PD");
      assert.notEqual(id.qp.sendCq, id.qp.recvCq);
      const recv = id.regMsgs(16);
      const target = id.regWrite(64);
      const source = id.regRead(enc("read me, client!"));
      id.postRecv(recv, 7);
      await id.accept({ privateData: new Uint8Array(16).fill(0).map((_, i) => i) }, WAIT);
      const wc = await id.getRecvComp(WAIT);
      assert.equal(wc.status, WcStatus.SUCCESS);
      assert.equal(wc.wrId, 7n);
      const remote = new DataView(recv.buffer.buffer, recv.buffer.byteOffset);
      const msg = { write: target.remote(), read: source.remote() };
      // the client's request: 4 bytes
      assert.equal(wc.byteLen, 4);
      assert.equal(remote.getUint32(0, true), 0x12345678);
      const reply = id.regMsgs(32);
      new DataView(reply.buffer.buffer, reply.buffer.byteOffset).setBigUint64(
        0,
        BigInt(msg.write.addr),
        true,
      );
      const rv = new DataView(reply.buffer.buffer, reply.buffer.byteOffset);
      rv.setUint32(8, msg.write.rkey, true);
      rv.setBigUint64(16, BigInt(msg.read.addr), true);
      rv.setUint32(24, msg.read.rkey, true);
      id.postSend(reply, { wrId: 9 });
      const sc = await id.getSendComp(WAIT);
      assert.equal(sc.wrId, 9n);
      assert.equal(sc.opcode, WcOpcode.SEND);
      await id.waitDisconnected(WAIT);
      const written = text(target.buffer.slice(0, 5));
      await id.disconnect();
      return written;
    })();
    const client = await createEndpoint({ hostname: env.address, port: server.localPort, qp });
    try {
      assert.ok(client.qp);
      const recv = client.regMsgs(32);
      client.postRecv(recv, 1);
      const ev = await client.connect({}, WAIT);
      assert.equal(ev.privateData?.[15], 15);
      // a request: 4 bytes inline when the device can, else from registered memory
      const req = new Uint8Array([0x78, 0x56, 0x34, 0x12]);
      if (client.qp.cap.maxInlineData >= 4) client.postSend(req, { wrId: 2 });
      else {
        const m = client.regMsgs(req);
        client.postSend(m, { wrId: 2 });
      }
      assert.equal((await client.getSendComp(WAIT)).status, WcStatus.SUCCESS);
      const wc = await client.getRecvComp(WAIT);
      assert.equal(wc.wrId, 1n);
      const v = new DataView(recv.buffer.buffer, recv.buffer.byteOffset);
      const write = { addr: v.getBigUint64(0, true), rkey: v.getUint32(8, true) };
      const read = { addr: v.getBigUint64(16, true), rkey: v.getUint32(24, true) };
      const local = client.regMsgs(64);
      local.buffer.set(enc("wrote"));
      client.postWrite({ mr: local, length: 5 }, write, { wrId: 3 });
      assert.equal((await client.getSendComp(WAIT)).wrId, 3n);
      client.postRead({ mr: local, offset: 16, length: 16 }, read, { wrId: 4 });
      const rc = await client.getSendComp(WAIT);
      assert.equal(rc.opcode, WcOpcode.RDMA_READ);
      assert.equal(text(local.buffer.slice(16, 32)), "read me, client!");
      await client.disconnect();
      assert.equal(await serving, "wrote");
      assert.equal(client.closed, true);
    } finally {
      client.close();
      server.close();
    }
  },
);

deviceTest(
  "cm ex: setIbPath sets a route from another id's path record (RDMA_OPTION_IB_PATH)",
  async (env) => {
    const srv = listener(env.address);
    const ch = new CmEventChannel();
    try {
      const dst = { address: env.address, port: srv.id.localPort };
      const a = ch.createId("TCP");
      await a.resolveAddress(dst, WAIT);
      await a.resolveRoute(WAIT);
      const paths = a.routePaths;
      if (env.transport === "iwarp") {
        assert.deepEqual(paths, []);
        const err = await a.setIbPath([{ dgid: "::1", sgid: "::1" }]).then(() => null, (e) => e);
        assert.ok(err instanceof UnsupportedError, `got ${err}`);
        assert.equal(err.code, "EOPNOTSUPP");
        assert.match(err.message, new RegExp(`${env.device}: iWARP has no IB paths`));
        return;
      }
      assert.equal(paths.length, 1);
      const [p] = paths;
      assert.equal(p.dgid.length, 16);
      assert.equal(p.pkey, 0xffff);
      const b = ch.createId("TCP");
      await b.resolveAddress(dst, WAIT);
      const ev = await b.setIbPath(paths, WAIT);
      assert.equal(ev.type, CmEventType.ROUTE_RESOLVED);
      assert.deepEqual(b.routePaths[0].dgid, p.dgid);
      assert.deepEqual(b.routePaths[0].sgid, p.sgid);
      const e = new Endpoint(b);
      const connecting = b.connect({}, WAIT);
      const req = await srv.id.getRequest(WAIT);
      const s = new Endpoint(req);
      await Promise.all([req.accept({}, WAIT), connecting]);
      await e.send(enc("over a set path"));
      assert.equal(text((await s.recv()).bytes), "over a set path");
      await Promise.all([b.disconnect(), answerDisconnect(req)]);
      req.close();
      e.close();
      s.close();
    } finally {
      ch.close();
      srv.ch.close();
    }
  },
);
