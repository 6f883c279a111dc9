/**
 * Streams where `Deno.Conn` and `Deno.Listener` are expected, in the runtime that runs this file:
 *
 * - an `RdmaListener` and the `RdmaConn`s it accepts, and a connection from `connect()`, go
 *   through functions written for `Deno.Listener` and `Deno.Conn` (typed so: `deno check`
 *   holds the assignability) — an echo over them, with the addresses in `Deno.NetAddr`'s shape;
 * - `ref()`/`unref()`: a process whose only pending operation is an accept or a read of an
 *   unref'd listener or connection exits by itself; ref'd, it stays alive (each in a peer
 *   process, four runs);
 * - exact reads: `read(p, { min })` and BYOB reads with `{ min }` return at least that many
 *   bytes even when the peer sends them one at a time, and fewer only at the end of the stream;
 *   `tryRead`/`tryWrite` never wait;
 * - keepalive against C: a C `rstream` server probing every second (`-k 1`) and our client
 *   probing every 200 ms stay connected through 2.5 s of silence, then finish rstream's exchange.
 */

import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import { connect, listen, type RdmaConn } from "../lib.ts";
import { spawnPeer } from "./peers/spawn.ts";
import { account, killAll, port, start, waitListening } from "./examples-common.ts";

/** Written against Deno's own types: nothing here knows it gets RDMA. */
async function echoServer(listener: Deno.Listener): Promise<Deno.NetAddr> {
  const conn: Deno.Conn = await listener.accept();
  const buf = new Uint8Array(1024);
  for (let n; (n = await conn.read(buf)) !== null;) await conn.write(buf.subarray(0, n));
  await conn.closeWrite();
  conn.close();
  return conn.remoteAddr as Deno.NetAddr;
}

async function askEcho(conn: Deno.Conn, text: string): Promise<string> {
  const sent = new TextEncoder().encode(text);
  await conn.write(sent);
  await conn.closeWrite();
  const chunks: Uint8Array[] = [];
  const buf = new Uint8Array(7);
  for (let n; (n = await conn.read(buf)) !== null;) chunks.push(buf.slice(0, n));
  conn.close();
  return new TextDecoder().decode(new Uint8Array(chunks.flatMap((c) => [...c])));
}

deviceTest("stream: code written for Deno.Conn and Deno.Listener runs over RDMA", async (env) => {
  const listener = listen({ hostname: env.address, port: 0 });
  const deno: Deno.Listener = listener;
  assert.deepEqual(deno.addr, {
    transport: "tcp",
    hostname: env.address,
    port: listener.addr.port,
  });
  const served = echoServer(listener);
  const conn: Deno.TcpConn = await connect({ hostname: env.address, port: listener.addr.port });
  conn.setNoDelay(true);
  conn.setKeepAlive(true);
  const local = conn.localAddr as Deno.NetAddr;
  assert.equal(local.transport, "tcp");
  assert.equal(local.hostname, env.address);
  assert.equal(await askEcho(conn, "hello through Deno.Conn"), "hello through Deno.Conn");
  const peer = await served;
  assert.equal(peer.port, local.port, "the server saw the client's port");
  listener.close();
  await (conn as RdmaConn).released;
});

for (const what of ["accept", "read"] as const) {
  for (const ref of [true, false]) {
    deviceTest(
      `stream: a pending ${what} ${
        ref ? "keeps the process alive" : "of an unref'd " +
          (what === "accept" ? "listener" : "connection") + " lets it exit"
      }`,
      async (env) => {
        const role = `${what}-${ref ? "ref" : "unref"}`;
        let server: ReturnType<typeof listen> | null = null;
        let accepted: Promise<RdmaConn> | null = null;
        const args = [role, env.address];
        if (what === "read") {
          server = listen({ hostname: env.address, port: 0 });
          accepted = server.accept({ timeout: 60_000 });
          args.push(String(server.addr.port));
        }
        const peer = spawnPeer("stream-hold.ts", args);
        try {
          await peer.next((m) => m.ready === true, 60_000);
          const exited = await Promise.race([
            peer.exited.then((code) => ({ code })),
            new Promise<null>((r) => setTimeout(() => r(null), ref ? 5_000 : 30_000)),
          ]);
          if (ref) assert.equal(exited, null, "the ref'd operation kept the process alive");
          else {
            assert.deepEqual(exited, { code: 0 }, `it exited by itself: ${peer.stderr()}`);
          }
        } finally {
          peer.kill();
          (await accepted?.catch(() => null))?.close();
          server?.close();
        }
      },
    );
  }
}

deviceTest("stream: exact reads with { min }, BYOB { min }, tryRead and tryWrite", async (env) => {
  const listener = listen({ hostname: env.address, port: 0 });
  const [a, b] = await Promise.all([
    listener.accept(),
    connect({ hostname: env.address, port: listener.addr.port }),
  ]);
  listener.close();
  try {
    const one = new Uint8Array(1);
    // the sender trickles 1 byte at a time; the reader asks for all 100 at once
    const trickle = (async () => {
      for (let i = 0; i < 100; i++) {
        one[0] = i;
        await b.write(one);
        if (i % 10 === 0) await new Promise((r) => setTimeout(r, 1));
      }
    })();
    const p = new Uint8Array(100);
    assert.equal(await a.read(p, { min: 100 }), 100);
    await trickle;
    assert.deepEqual([...p], Array.from({ length: 100 }, (_, i) => i));
    await assert.rejects(a.read(p, { min: 101 }), /min must be/);
    // BYOB with min through the web stream
    const reader = a.readable.getReader({ mode: "byob" });
    const filling = (async () => {
      for (let i = 0; i < 48; i++) {
        one[0] = 200 - i;
        await b.write(one);
      }
    })();
    const r = await reader.read(new Uint8Array(64), { min: 48 });
    await filling;
    assert.ok(!r.done && r.value.length >= 48, `BYOB read with min 48 got ${r.value?.length}`);
    reader.releaseLock();
    // tryRead/tryWrite: nothing there → 0 at once; then what arrived
    assert.equal(a.tryRead(p), 0);
    assert.equal(b.tryWrite(new Uint8Array([7, 8, 9])), 3);
    let got = 0;
    for (let i = 0; i < 10_000 && got === 0; i++) {
      got = a.tryRead(p) ?? -1;
      if (got === 0) await new Promise((r) => setTimeout(r, 1));
    }
    assert.equal(got, 3);
    assert.deepEqual([...p.subarray(0, 3)], [7, 8, 9]);
    // fewer than min only at the end of the stream
    await b.write(new Uint8Array([1, 2]));
    await b.closeWrite();
    assert.equal(await a.read(p, { min: 10 }), 2);
    assert.equal(await a.read(p, { min: 10 }), null);
    assert.equal(a.tryRead(p), null);
  } finally {
    a.close();
    b.close();
    await Promise.all([a.released, b.released]);
  }
});

deviceTest("stream: keepalive probes both ways with a C rstream server (-k 1)", async (env) => {
  const p = port();
  // rstream's custom test, server side: a 16-byte sync, then 3 × (receive 64 B, send 64 B)
  const server = start([
    "rstream",
    "-b",
    env.address,
    "-p",
    String(p),
    "-k",
    "1",
    "-S",
    "64",
    "-C",
    "1",
    "-I",
    "3",
  ]);
  try {
    await waitListening(server, p);
    const conn = await connect({ hostname: env.address, port: p, timeout: 30_000 });
    try {
      conn.setKeepAlive(true, 200);
      const sync = new Uint8Array(16);
      await conn.write(sync);
      assert.equal(await conn.read(sync, { min: 16 }), 16);
      // silence: C's probes arrive here (1 s) and ours reach it (every 200 ms idle)
      await new Promise((r) => setTimeout(r, 2500));
      const buf = new Uint8Array(64);
      for (let i = 0; i < 3; i++) {
        await conn.write(buf);
        assert.equal(await conn.read(buf, { min: 64 }), 64);
      }
      await conn.closeWrite();
    } finally {
      conn.close();
      await conn.released;
    }
    const r = await server.ended;
    assert.equal(r.code, 0, account("rstream -k 1 server", r));
  } finally {
    killAll();
  }
});
