/**
 * UD over rdma_cm (the udaddy flow, server in another process) and multicast
 * join/send/receive/leave (the mckey flow, receiver in another process). On
 * iWARP, which has neither, the library must refuse both with a typed
 * UnsupportedError instead of hanging.
 */

import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import {
  cmConnect,
  CmEventChannel,
  CmEventType,
  RDMA_UDP_QKEY,
  udDestination,
  UnsupportedError,
} from "../lib.ts";
import { Endpoint } from "./peers/endpoint.ts";
import { spawnPeer, text } from "./peers/spawn.ts";

const enc = (s: string) => new TextEncoder().encode(s);

deviceTest(
  "cm ud: datagrams over rdma_cm (remote qpn, qkey and AH from the event)",
  async (env) => {
    if (env.transport === "iwarp") {
      let ep: Endpoint | undefined;
      const err = await cmConnect({
        address: env.address,
        port: 7174,
        portSpace: "UDP",
        timeout: 20_000,
        beforeConnect: (id) => void (ep = new Endpoint(id)),
      }).then(() => null, (e) => e);
      ep?.close();
      assert.ok(err instanceof UnsupportedError, `got ${err}`);
      assert.match(err.message, /iWARP has no UD/);
      return;
    }
    const peer = spawnPeer("cm-ud-server.ts", [env.address, "3"]);
    let ep: Endpoint | undefined;
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const { id, event } = await cmConnect({
        address: env.address,
        port,
        portSpace: "UDP",
        privateData: enc("ud-hello"),
        timeout: 20_000,
        beforeConnect: (id) => void (ep = new Endpoint(id)),
      });
      const accepted = await peer.next((m) => "accepted" in m);
      assert.equal(accepted.request, "ud-hello");
      assert.equal(event.type, CmEventType.ESTABLISHED);
      assert.equal(text(event.privateData), "ud-welcome");
      assert.ok(event.ud, "UD parameters in the event");
      assert.equal(event.conn, null);
      assert.equal(event.ud.qpNum, accepted.qpNum);
      assert.equal(event.ud.qkey, RDMA_UDP_QKEY);
      assert.equal(event.ud.ahAttr.grh !== undefined, true); // RoCE: GRH required
      const dest = udDestination(ep!.pd, event);
      for (let i = 0; i < 3; i++) {
        await ep!.send(enc(`dgram ${i}`), dest);
        const m = await ep!.recv();
        assert.equal(text(m.bytes), `echo:dgram ${i}`);
        assert.equal(m.srcQp, event.ud.qpNum);
        const seen = await peer.next((m) => "datagram" in m);
        assert.equal(seen.datagram, `dgram ${i}`);
        assert.equal(seen.srcQp, ep!.qp.qpNum);
      }
      dest.ah.close();
      id.close();
      assert.equal(ep!.qp.closed, true);
      assert.equal(await peer.exited, 0);
    } finally {
      ep?.close();
      peer.kill();
    }
  },
);

deviceTest("cm multicast: join, send, receive, leave (the mckey flow)", async (env) => {
  const group = "239.1.2.3";
  if (env.transport === "iwarp") {
    using ch = new CmEventChannel();
    const id = ch.createId("UDP");
    id.bind({ address: env.address });
    await assert.rejects(
      id.joinMulticast({ address: group }),
      (e) => e instanceof UnsupportedError && /iWARP has no multicast/.test(e.message),
    );
    return;
  }
  const n = 3;
  const peer = spawnPeer("cm-mc-recv.ts", [env.address, group, String(n)]);
  const ch = new CmEventChannel();
  let ep: Endpoint | undefined;
  try {
    const joinedPeer = await peer.next((m) => "joined" in m, 30_000);
    const id = ch.createId("UDP");
    await id.resolveAddress({ address: group }, {
      source: { address: env.address },
      timeout: 20_000,
    });
    ep = new Endpoint(id);
    const joined = await id.joinMulticast({ address: group }, { timeout: 20_000 });
    assert.equal(joined.type, CmEventType.MULTICAST_JOIN);
    assert.equal(joined.name, "RDMA_CM_EVENT_MULTICAST_JOIN");
    assert.equal(joined.ud!.qpNum, 0xffffff);
    assert.equal(joined.ud!.qkey, joinedPeer.qkey);
    const dest = udDestination(ep.pd, joined);
    for (let i = 0; i < n; i++) {
      await ep.send(enc(`mc ${i}`), dest);
      const seen = await peer.next((m) => "datagram" in m, 20_000);
      assert.equal(seen.datagram, `mc ${i}`);
      assert.equal(seen.srcQp, ep.qp.qpNum);
    }
    await peer.next((m) => "left" in m);
    id.leaveMulticast({ address: group });
    dest.ah.close();
    id.close();
    assert.equal(await peer.exited, 0);
  } finally {
    ep?.close();
    ch.close();
    peer.kill();
  }
});
