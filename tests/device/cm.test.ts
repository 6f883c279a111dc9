/**
 * rdma_cm without QPs: address errors, a port nobody listens on, reject with
 * private data, private-data limits. The peer runs in a separate process.
 */

import assert from "node:assert/strict";
import { deviceTest, notOnIwarp } from "../harness.ts";
import {
  cmConnect,
  CmEventChannel,
  CmEventError,
  CmEventType,
  cmListen,
  getAddrInfo,
  InvalidArgumentError,
  NativeError,
  PortSpace,
  PrivateDataLimits,
} from "../lib.ts";
import { spawnPeer, text } from "./peers/spawn.ts";
import { Endpoint } from "./peers/endpoint.ts";

const enc = (s: string) => new TextEncoder().encode(s);

deviceTest(
  "cm: resolving an address with no route fails with ADDR_ERROR in bounded time",
  async (env) => {
    using ch = new CmEventChannel();
    using id = ch.createId("TCP");
    const t0 = Date.now();
    // an address on the device's own subnet that nobody answers ARP for
    const parts = env.address.split(".");
    const absent = `${parts[0]}.${parts[1]}.${parts[2]}.${parts[3] === "200" ? "201" : "200"}`;
    const err = await id.resolveAddress({ address: absent, port: 7471 }, {
      timeoutMs: 1000,
      timeout: 15_000,
    })
      .then(() => null, (e) => e);
    const ms = Date.now() - t0;
    assert.ok(err instanceof CmEventError, `expected CmEventError, got ${err}`);
    assert.equal(err.event, CmEventType.ADDR_ERROR);
    assert.equal(err.eventName, "RDMA_CM_EVENT_ADDR_ERROR");
    assert.ok(err.status < 0, `status ${err.status}`);
    assert.ok(ms < 15_000, `took ${ms} ms`);
  },
);

deviceTest(
  "cm: connect to a port nobody listens on fails with a typed error in bounded time",
  async (env) => {
    const t0 = Date.now();
    let ep: Endpoint | undefined;
    const err = await cmConnect({
      address: env.address,
      port: 7,
      timeout: 20_000,
      beforeConnect: (id) => void (ep = new Endpoint(id)),
    }).then(() => null, (e) => e);
    const ms = Date.now() - t0;
    ep?.close();
    assert.ok(ep, "the QP was created before connecting");
    if (env.transport === "iwarp" && err instanceof NativeError) {
      // iWARP opens the TCP connection inside rdma_connect: refused synchronously
      assert.equal(err.code, "ECONNREFUSED");
      assert.equal(err.operation, "rdma_connect");
      return;
    }
    assert.ok(err instanceof CmEventError, `expected CmEventError, got ${err}`);
    assert.ok(
      err.event === CmEventType.REJECTED ||
        err.event === CmEventType.UNREACHABLE ||
        err.event === CmEventType.CONNECT_ERROR,
      err.message,
    );
    assert.ok(ms < 20_000, `took ${ms} ms`);
  },
);

deviceTest(
  "cm: reject with private data is seen by the client",
  async (env) => {
    const peer = spawnPeer("cm-reject.ts", [env.address, "1"]);
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const err = await cmConnect({
        address: env.address,
        port,
        qpNum: 0x123,
        privateData: enc("hello"),
        initiatorDepth: 3,
        responderResources: 2,
        timeout: 20_000,
      }).then(() => null, (e) => e);
      assert.ok(
        err instanceof CmEventError,
        `expected CmEventError, got ${err}`,
      );
      assert.equal(err.event, CmEventType.REJECTED);
      assert.equal(err.eventName, "RDMA_CM_EVENT_REJECTED");
      assert.equal(text(err.privateData), "reject:hello");
      const req = await peer.next((m) => "request" in m);
      assert.equal(req.request, "hello");
      assert.equal(req.qpNum, 0x123);
      // seen from the passive side: the peer's initiator depth is what it asks us to respond to
      assert.equal(req.responderResources, 3);
      assert.equal(req.initiatorDepth, 2);
      assert.equal((req.peer as { address: string }).address, env.address);
      assert.equal(await peer.exited, 0);
    } finally {
      peer.kill();
    }
  },
  {
    needs: notOnIwarp(
      "connect without a QP (covered with QPs in cm-rc.test.ts)",
    ),
  },
);

deviceTest(
  "cm: private data at the limit is delivered, one byte over is refused before the call",
  async (env) => {
    const limits = PrivateDataLimits.ib;
    const peer = spawnPeer("cm-reject.ts", [
      env.address,
      "1",
      "fill",
      String(limits.reject),
    ]);
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const atLimit = new Uint8Array(limits.connect).map((_, i) => i + 1);
      // one byte over: refused before anything reaches librdmacm
      await assert.rejects(
        cmConnect({
          address: env.address,
          port,
          qpNum: 1,
          privateData: new Uint8Array(limits.connect + 1),
        }),
        (e) =>
          e instanceof InvalidArgumentError &&
          /limit for connect .* 56/.test(e.message),
      );
      const err = await cmConnect({
        address: env.address,
        port,
        qpNum: 1,
        privateData: atLimit,
      })
        .then(() => null, (e) => e);
      assert.ok(
        err instanceof CmEventError,
        `expected CmEventError, got ${err}`,
      );
      const req = await peer.next((m) => "request" in m);
      assert.deepEqual(req.bytes, [...atLimit]);
      // the peer rejected with exactly the reject limit (148 bytes)
      assert.equal(err.privateData?.length, limits.reject);
      assert.ok(err.privateData!.every((b: number) => b === 0x5a));
      assert.equal(await peer.exited, 0);
    } finally {
      peer.kill();
    }
  },
  {
    needs: notOnIwarp(
      "connect without a QP (covered with QPs in cm-rc.test.ts)",
    ),
  },
);

deviceTest(
  "cm: listener reports its address and port; closed ids raise ClosedError",
  (env) => {
    const l = cmListen({ address: env.address, port: 0, backlog: 8 });
    const port = l.addr.port;
    assert.ok(port > 0);
    assert.deepEqual(l.addr, { transport: "tcp", hostname: env.address, port });
    assert.deepEqual(l.id.localAddress, { family: "IPv4", address: env.address, port });
    assert.equal(l.id.transport, env.transport);
    l.close();
    l.close();
    assert.throws(() => l.id.localAddress, /closed/);
  },
);

deviceTest(
  "cm: options (TOS, reuse-address, ACK timeout) and rdma_getaddrinfo",
  (env) => {
    // REUSEADDR lets a second listener bind the port of a closed one at once
    const a = cmListen({ address: env.address, port: 0, reuseAddress: true });
    const port = a.addr.port;
    a.id.setTos(32);
    a.id.setAckTimeout(14);
    assert.throws(() => a.id.setTos(256), InvalidArgumentError);
    assert.throws(() => a.id.setAckTimeout(32), InvalidArgumentError);
    a.close();
    const b = cmListen({ address: env.address, port, reuseAddress: true });
    assert.equal(b.addr.port, port);
    b.close();
    const [ai] = getAddrInfo(env.address, port, {
      numericHost: true,
      portSpace: PortSpace.TCP,
    });
    assert.deepEqual(ai.destination, {
      family: "IPv4",
      address: env.address,
      port,
    });
    assert.equal(ai.family, "IPv4");
    assert.equal(ai.portSpace, PortSpace.TCP);
    const [passive] = getAddrInfo(env.address, port, {
      passive: true,
      numericHost: true,
    });
    assert.deepEqual(passive.source, {
      family: "IPv4",
      address: env.address,
      port,
    });
    assert.throws(() => getAddrInfo(null, null), InvalidArgumentError);
  },
);

deviceTest(
  "cm: closing a cmListen listener leaves its accepted connection open; their channel closes with the last id",
  async (env) => {
    const l = cmListen({ address: env.address, port: 0 });
    const channel = l.id.channel;
    let server: Endpoint | undefined;
    let client: Endpoint | undefined;
    const accepted = l.accept({ timeout: 20_000 }).then(async (req) => {
      server = new Endpoint(req);
      await req.accept({}, { timeout: 20_000 });
      return req;
    });
    try {
      const conn = await cmConnect({
        address: env.address,
        port: l.addr.port,
        timeout: 20_000,
        beforeConnect: (id) => void (client = new Endpoint(id)),
      });
      const sid = await accepted;
      assert.equal(sid.channel, channel, "accepted ids share the listener's channel");
      l.close();
      assert.ok(l.id.closed);
      assert.equal(sid.closed, false, "the accepted id stays open");
      assert.equal(channel.closed, false, "the channel stays open while an id uses it");
      // and it still carries traffic
      await client!.send(enc("after the listener closed"));
      assert.equal(text((await server!.recv()).bytes), "after the listener closed");
      sid.close();
      assert.ok(channel.closed, "the channel closed with its last id");
      await conn.id.disconnect({ timeout: 20_000 });
    } finally {
      l.close();
      client?.close();
      server?.close();
    }
  },
);
