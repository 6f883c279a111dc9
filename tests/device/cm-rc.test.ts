/**
 * RC over rdma_cm with QPs created on the CM ids from this library's PD and
 * CQs: connect/accept/exchange/disconnect with the server in another process,
 * 50 sequential cycles without fd growth (the longer soaks are fault-soak and census), 16 simultaneous connections, and
 * reject/private-data checks on the transport's limits. The servers' address follows the peer
 * (`serverAddress`): in the two-guest run the servers run on guest 1.
 */

import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import {
  ClosedError,
  cmConnect,
  CmEventError,
  CmEventType,
  InvalidArgumentError,
  privateDataLimit,
  PrivateDataLimits,
} from "../lib.ts";
import { Endpoint } from "./peers/endpoint.ts";
import { serverAddress, spawnPeer, text } from "./peers/spawn.ts";
import { openFds, session } from "./peers/session.ts";

const enc = (s: string) => new TextEncoder().encode(s);

deviceTest(
  "cm rc: connect, accept, exchange data, disconnect (server in another process)",
  async (env) => {
    const peer = spawnPeer("cm-rc-server.ts", [serverAddress(env), "1"]);
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const { id, event, ep } = await session(serverAddress(env), port, "client-0", 3);
      assert.equal(event.type, CmEventType.ESTABLISHED);
      assert.equal(text(event.privateData), "welcome:0");
      assert.equal(id.connected, true);
      assert.deepEqual(id.peerAddress, { family: "IPv4", address: serverAddress(env), port });
      assert.equal(id.peerPort, port);
      assert.equal(id.localAddress?.address, env.address);
      assert.ok(id.localPort > 0);
      const accepted = await peer.next((m) => "accepted" in m);
      assert.equal(accepted.request, "client-0");
      assert.equal(accepted.established, "RDMA_CM_EVENT_ESTABLISHED");
      // disconnect resolves once the peer has seen it and our side is torn down
      await id.disconnect();
      assert.equal(id.closed, true);
      assert.equal(ep.qp.closed, true);
      ep.close();
      const served = await peer.next((m) => "served" in m);
      assert.equal(served.messages, 3);
      assert.equal(served.qpClosed, true);
      assert.equal(await peer.exited, 0);
    } finally {
      peer.kill();
    }
  },
);

deviceTest("cm rc: 50 sequential connect/disconnect cycles without fd growth", async (env) => {
  const cycles = 50;
  const peer = spawnPeer("cm-rc-server.ts", [serverAddress(env), String(cycles)]);
  try {
    const { port } = await peer.next((m) => "ready" in m) as { port: number };
    let before = 0;
    const t0 = Date.now();
    for (let i = 0; i < cycles; i++) {
      const { id, ep } = await session(serverAddress(env), port, `c${i}`);
      await id.disconnect();
      ep.close();
      if (i === 0) before = openFds(); // after warm-up (poller, librdmacm's device context)
    }
    const after = openFds();
    // Bun's waiter holds a duplicate of the poller's epoll fd only while something is awaited, so
    // the count after the first cycle may include it and the last one not: growth is the leak.
    assert.ok(after <= before, `open fds grew from ${before} to ${after}`);
    const done = await peer.next((m) => "done" in m, 60_000);
    assert.ok(done);
    assert.equal(await peer.exited, 0);
    console.log(`cm rc: ${cycles} cycles in ${Date.now() - t0} ms, fds ${before} → ${after}`);
  } finally {
    peer.kill();
  }
});

deviceTest("cm rc: 16 simultaneous connections to one listener", async (env) => {
  const n = 16;
  const peer = spawnPeer("cm-rc-server.ts", [serverAddress(env), String(n), "concurrent"]);
  try {
    const { port } = await peer.next((m) => "ready" in m) as { port: number };
    const sessions = await Promise.all(
      Array.from({ length: n }, (_, i) => session(serverAddress(env), port, `s${i}`, 2)),
    );
    const welcomes = sessions.map((s) => text(s.event.privateData)).sort();
    assert.equal(new Set(welcomes).size, n);
    const qpns = new Set(sessions.map((s) => s.id.qp!.qpNum));
    assert.equal(qpns.size, n);
    await Promise.all(sessions.map((s) => s.id.disconnect()));
    for (const s of sessions) s.ep.close();
    for (let i = 0; i < n; i++) await peer.next((m) => "served" in m, 30_000);
    assert.equal(await peer.exited, 0);
  } finally {
    peer.kill();
  }
});

deviceTest(
  "cm rc: reject with private data, and private data at the limit / one byte over",
  async (env) => {
    const ctx = { transport: env.transport, ud: false, afIb: false };
    const limits = {
      connect: privateDataLimit("connect", ctx),
      reject: privateDataLimit("reject", ctx),
    };
    assert.equal(limits.connect, env.transport === "iwarp" ? 251 : PrivateDataLimits.ib.connect);
    const peer = spawnPeer("cm-reject.ts", [
      serverAddress(env),
      "2",
      "fill",
      String(limits.reject),
    ]);
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const eps: Endpoint[] = [];
      const attempt = (privateData: Uint8Array) =>
        cmConnect({
          address: serverAddress(env),
          port,
          privateData,
          timeout: 20_000,
          beforeConnect: (id) => void eps.push(new Endpoint(id)),
        }).then(() => null, (e) => e);
      // one byte over the connect limit: refused before the call
      const over = await attempt(new Uint8Array(limits.connect + 1));
      assert.ok(over instanceof InvalidArgumentError, `got ${over}`);
      assert.match(over.message, new RegExp(`limit for connect .* is ${limits.connect}`));
      // at the limit: delivered to the peer, which rejects with the reject limit
      const atLimit = new Uint8Array(limits.connect).map((_, i) => (i * 7 + 1) & 0xff);
      const err = await attempt(atLimit);
      assert.ok(err instanceof CmEventError, `got ${err}`);
      assert.equal(err.event, CmEventType.REJECTED);
      const req = await peer.next((m) => "request" in m);
      assert.deepEqual((req.bytes as number[]).slice(0, atLimit.length), [...atLimit]);
      assert.ok(err.privateData!.length >= limits.reject);
      assert.ok(err.privateData!.subarray(0, limits.reject).every((b: number) => b === 0x5a));
      // a short reject message is seen as sent
      const err2 = await attempt(enc("short"));
      assert.ok(err2 instanceof CmEventError);
      assert.equal(err2.eventName, "RDMA_CM_EVENT_REJECTED");
      assert.ok(err2.privateData!.every((b: number) => b === 0x5a));
      for (const ep of eps) ep.close();
      assert.equal(await peer.exited, 0);
    } finally {
      peer.kill();
    }
  },
);

deviceTest(
  "cm rc: closing in any order is safe (CQ, then channel, then the id again)",
  async (env) => {
    const peer = spawnPeer("cm-rc-server.ts", [serverAddress(env), "1"]);
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const { id, ep } = await session(serverAddress(env), port, "order");
      const waiting = id.waitDisconnected();
      // the CQ first: its QP goes first (rdma_destroy_qp), the id stays usable
      ep.cq.close();
      assert.equal(ep.qp.closed, true);
      assert.equal(id.closed, false);
      // then the channel: it disconnects and destroys the id; the pending wait ends typed
      id.channel.close();
      await assert.rejects(waiting, ClosedError);
      assert.equal(id.closed, true);
      assert.throws(() => id.localAddress, ClosedError);
      id.close();
      id.channel.close();
      await id.disconnect(); // a closed id resolves at once
      await assert.rejects(id.resolveRoute(), ClosedError);
      ep.close();
      const served = await peer.next((m) => "served" in m);
      assert.equal(served.messages, 1);
      assert.equal(await peer.exited, 0);
    } finally {
      peer.kill();
    }
  },
);
