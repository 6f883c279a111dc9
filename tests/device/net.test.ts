/**
 * The `node:net` layer (`net/`) over real RDMA stream connections, in the runtime that runs this
 * file (`scripts/test` runs it in Deno and in Bun), server and client in one process on the test
 * device's address:
 *
 * - `createServer` + `connect`: a `pipe()` echo of 1 MiB, the events in order, addresses and
 *   counters; closing the server leaves the accepted socket working (the stream listener's close
 *   semantics) and refuses new connections (`ECONNREFUSED`); `close` waits for the socket;
 * - `node:http`'s own server (fed RDMA sockets through `serveHttp`, i.e. `emit("connection")`)
 *   and its own client (`createConnection` returning RDMA sockets): three POSTs of 1 MiB on one
 *   kept-alive connection with chunked replies, then one connection per request, bytes verified;
 * - backpressure: a server socket paused on connect reads nothing while the client's writes stop
 *   at the two rings plus the writable high-water mark (`write()` false, then `drain`), then
 *   everything arrives intact; paused again midway, its read loop stops at the high-water mark.
 *
 * Sizes are small (1–8 MiB): the emulated guest moves tens of MB/s. The whole file took 8 s in
 * each runtime there. An unmodified C HTTP client under rspreload: `http.test.ts`.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import type { EventEmitter } from "node:events";
import http from "node:http";
import { deviceTest } from "../harness.ts";
import { net } from "../lib.ts";

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/** xorshift bytes: reproducible, not compressible. */
function pattern(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
}

/** The arguments of the next `name` event (an `error` does not reject, unlike events.once). */
function once(emitter: EventEmitter, name: string, ms = 60_000): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no ${name} event within ${ms} ms`)), ms);
    emitter.once(name, (...args: unknown[]) => {
      clearTimeout(t);
      resolve(args);
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A server listening on the device's address (port picked by the kernel). */
async function listening(server: net.Server, address: string): Promise<number> {
  const ready = once(server, "listening");
  const failed = once(server, "error").then(([e]) => {
    throw e;
  });
  server.listen(0, address);
  await Promise.race([ready, failed]);
  const a = server.address();
  assert.ok(a && a.port > 0, "address() after listening");
  assert.equal(a.address, address);
  assert.equal(a.family, "IPv4");
  return a.port;
}

/** Everything `socket` delivers until its end. */
function collect(socket: net.Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  socket.on("data", (c: Buffer) => chunks.push(c));
  return once(socket, "end").then(() => Buffer.concat(chunks));
}

deviceTest(
  "net: createServer + connect — 1 MiB echo, events, addresses; close leaves accepted sockets open",
  async (env) => {
    const accepted: net.Socket[] = [];
    const server = net.createServer((s) => {
      accepted.push(s);
      s.pipe(s); // echo, with the Duplex's own backpressure
    });
    const port = await listening(server, env.address);
    try {
      const events: string[] = [];
      const client = net.connect(port, env.address);
      assert.equal(client.connecting, true);
      assert.equal(client.readyState, "opening");
      for (const e of ["connect", "ready", "end", "finish"]) client.on(e, () => events.push(e));
      const closed = once(client, "close");
      await once(client, "connect");
      assert.equal(client.pending, false);
      assert.equal(client.readyState, "open");
      assert.equal(client.remoteAddress, env.address);
      assert.equal(client.remotePort, port);
      assert.equal(client.remoteFamily, "IPv4");
      assert.equal(client.localAddress, env.address);
      assert.ok(client.localPort! > 0);
      assert.deepEqual(client.address(), {
        address: env.address,
        family: "IPv4",
        port: client.localPort,
      });
      const data = pattern(1 << 20, 1);
      const echoed = collect(client);
      client.end(data);
      const got = await echoed;
      const [hadError] = await closed;
      assert.equal(got.length, data.length);
      assert.equal(sha(got), sha(data), "the echo is intact");
      assert.equal(hadError, false);
      assert.deepEqual(events.slice(0, 2), ["connect", "ready"]);
      assert.ok(events.includes("end") && events.includes("finish"));
      assert.equal(client.bytesWritten, data.length);
      assert.equal(client.bytesRead, data.length);
      const s0 = accepted[0];
      assert.equal(s0.remotePort, client.localPort, "the server sees the client's port");
      assert.equal(s0.localPort, port);
      assert.equal(s0.bytesRead, data.length);

      // a second connection, then the server closes: the accepted socket keeps working
      const c2 = net.connect({ port, host: env.address });
      await once(c2, "connect");
      while (accepted.length < 2) await sleep(10);
      const [n] = await new Promise<[number]>((r) => server.getConnections((_e, k) => r([k])));
      assert.ok(n >= 1, `getConnections: ${n}`);
      let serverClosed = false;
      server.close(() => (serverClosed = true));
      assert.equal(server.listening, false);
      assert.equal(server.address(), null);
      const refused = net.connect(port, env.address);
      const [err] = await once(refused, "error");
      assert.equal((err as { code?: string }).code, "ECONNREFUSED", `${err}`);
      assert.ok(err instanceof net.ConnectionRefusedError);
      const reply = once(c2, "data");
      c2.write("after the server closed");
      assert.equal(String((await reply)[0]), "after the server closed");
      assert.equal(serverClosed, false, "close waits for the open connection");
      const serverDone = once(server, "close");
      c2.end();
      await serverDone;
      assert.equal(serverClosed, true);
    } finally {
      server.close();
      for (const s of accepted) s.destroy();
    }
  },
);

deviceTest(
  "net: node:http's server and client over RDMA — keep-alive, 1 MiB bodies, chunked replies",
  async (env) => {
    const httpServer = http.createServer((req, res) => {
      const h = createHash("sha256");
      let n = 0;
      req.on("data", (c: Buffer) => {
        h.update(c);
        n += c.length;
      });
      req.on("end", () => {
        // no content-length: chunked, in several chunks
        res.setHeader("x-request-bytes", String(n));
        res.write(`${req.method} ${req.url} ${n} ${h.digest("hex")}\n`);
        const tail = pattern(300_000, n + 1);
        res.write(tail.subarray(0, 100_000));
        res.end(tail.subarray(100_000));
      });
    });
    const rdma = net.serveHttp(httpServer);
    let connections = 0;
    rdma.on("connection", () => connections++);
    const port = await listening(rdma, env.address);
    class RdmaAgent extends http.Agent {
      override createConnection(): net.Socket {
        return net.connect({ port, host: env.address });
      }
    }
    const agent = new RdmaAgent({ keepAlive: true, maxSockets: 1 });
    const body = pattern(1 << 20, 2);

    async function request(
      path: string,
      options: http.RequestOptions,
      payload?: Buffer,
    ): Promise<{ res: http.IncomingMessage; data: Buffer }> {
      const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.request({ host: env.address, port, path, ...options }, resolve);
        req.on("error", reject);
        req.end(payload);
      });
      const chunks: Buffer[] = [];
      for await (const c of res) chunks.push(c as Buffer);
      return { res, data: Buffer.concat(chunks) };
    }

    function check(data: Buffer, line: string, n: number): void {
      const nl = data.indexOf(10);
      assert.equal(data.subarray(0, nl).toString(), line);
      assert.equal(sha(data.subarray(nl + 1)), sha(pattern(300_000, n + 1)), "the chunked tail");
    }

    try {
      const t0 = performance.now();
      for (let i = 0; i < 3; i++) {
        const { res, data } = await request(`/keep/${i}`, {
          method: "POST",
          agent,
          headers: { "content-length": body.length },
        }, body);
        assert.equal(res.statusCode, 200);
        assert.equal(res.headers["transfer-encoding"], "chunked");
        assert.equal(res.headers["x-request-bytes"], String(body.length));
        check(data, `POST /keep/${i} ${body.length} ${sha(body)}`, body.length);
      }
      const keptAlive = connections;
      assert.equal(keptAlive, 1, "three requests on one kept-alive RDMA connection");
      const secs = (performance.now() - t0) / 1000;

      // no agent: node:http calls createConnection for each request
      for (let i = 0; i < 2; i++) {
        const { res, data } = await request(`/each/${i}`, {
          method: "GET",
          createConnection: () => net.connect({ port, host: env.address }),
        });
        assert.equal(res.statusCode, 200);
        check(data, `GET /each/${i} 0 ${sha(new Uint8Array(0))}`, 0);
      }
      assert.equal(connections, keptAlive + 2, "one new connection per request");
      console.log(`http over rdma: 3 × 1 MiB POSTs kept alive in ${secs.toFixed(2)} s`);
    } finally {
      agent.destroy();
      rdma.close();
      httpServer.closeAllConnections?.();
    }
    await once(rdma, "close");
  },
);

deviceTest(
  "net: backpressure over RDMA — a paused socket reads nothing, the writer waits for drain",
  async (env) => {
    let peer: net.Socket | undefined;
    const server = net.createServer({ pauseOnConnect: true }, (s) => (peer = s));
    const port = await listening(server, env.address);
    const client = net.connect(port, env.address);
    try {
      await once(client, "connect");
      while (!peer) await sleep(10);
      const total = 8 << 20;
      const chunk = 64 * 1024;
      const sent = createHash("sha256");
      let written = 0;
      let falses = 0;
      const writer = (async () => {
        for (let i = 0; written < total; i++) {
          const c = pattern(chunk, i + 10);
          sent.update(c);
          written += c.length;
          if (!client.write(c)) {
            falses++;
            await once(client, "drain", 120_000);
          }
        }
        client.end();
      })();
      // the client fills the server's receive ring, its own send ring, its writable buffer, stops
      let last = -1;
      for (let i = 0; i < 100 && written !== last; i++) {
        last = written;
        await sleep(300);
      }
      assert.equal(written, last, "the writer stopped");
      assert.ok(falses >= 1, "write() returned false");
      assert.equal(peer.bytesRead, 0, "a socket paused on connect reads nothing");
      const rings = client.conn!.info.sendBufferSize + peer.conn!.info.receiveBufferSize;
      const bound = rings + client.writableHighWaterMark + chunk;
      assert.ok(
        written <= bound,
        `${written} bytes left the writer with nobody reading (> ${bound})`,
      );
      console.log(`backpressure: the writer stopped after ${written} bytes (bound ${bound})`);

      // read, pause again midway: the read loop stops at the high-water mark
      const got = createHash("sha256");
      let received = 0;
      peer.on("data", (c: Buffer) => {
        got.update(c);
        received += c.length;
      });
      peer.resume();
      while (received < total / 2) await sleep(20);
      peer.pause();
      await sleep(500);
      const held = peer.bytesRead;
      await sleep(500);
      assert.equal(peer.bytesRead, held, "no reads while paused");
      assert.ok(
        peer.readableLength <= peer.readableHighWaterMark + 65536,
        `${peer.readableLength} bytes buffered while paused`,
      );
      const ended = once(peer, "end", 120_000);
      peer.resume();
      await writer;
      await ended;
      assert.equal(received, total);
      assert.equal(got.digest("hex"), sent.digest("hex"), "intact and in order");
    } finally {
      client.destroy();
      peer?.destroy();
      server.close();
    }
  },
);
