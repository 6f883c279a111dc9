/**
 * The `node:net` layer on the host, without a device: argument checks (the library's errors with
 * Node's codes), what a machine without RDMA gets, and the `Socket` adapter over an in-memory
 * pair of connections that behave like two `RdmaConn`s (reads resolve with what arrived or null
 * at the end, writes resolve once the bytes fit in a bounded "ring", `closeWrite`, `close`):
 * data both ways, end/close events, backpressure (a paused reader stops the read loop; a writer
 * sees `write() === false` and `drain`), the idle timeout, and `node:http`'s server and client
 * over such sockets (keep-alive, a 1 MiB body, a chunked response). The same over real RDMA
 * connections: `tests/device/net.test.ts`.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import type { EventEmitter } from "node:events";
import http from "node:http";
import { test } from "./harness.ts";
import * as net from "../net/mod.ts";
import {
  AbortedError,
  ClosedError,
  InvalidArgumentError,
  NativeError,
  RdmaError,
} from "../types/errors.ts";
import { ConnectionRefusedError, ConnectionResetError, type RdmaConn } from "../stream/mod.ts";
import { withCode } from "../net/errors.ts";

// ------------------------------------------------------------------ an in-memory connection pair

/** One end of an in-memory pair with RdmaConn's contract (see the file's doc). */
class MemConn {
  peer!: MemConn;
  readonly localAddr;
  readonly remoteAddr;
  readonly inbox: Uint8Array[] = [];
  inboxBytes = 0;
  maxInbox = 0;
  eof = false;
  closed = false;
  failure: Error | null = null;
  reads = 0;
  readonly capacity: number;
  #wake: (() => void)[] = [];
  constructor(local: number, remote: number, capacity: number) {
    this.localAddr = { transport: "rdma" as const, hostname: "10.0.2.15", port: local };
    this.remoteAddr = { transport: "rdma" as const, hostname: "10.0.2.15", port: remote };
    this.capacity = capacity;
  }
  #changed(): Promise<void> {
    return new Promise((r) => this.#wake.push(r));
  }
  notify(): void {
    for (const w of this.#wake.splice(0)) w();
  }
  async read(p: Uint8Array): Promise<number | null> {
    this.reads++;
    for (;;) {
      if (this.closed) throw new ClosedError("RdmaConn");
      if (this.inbox.length) break;
      if (this.failure) throw this.failure;
      if (this.eof) return null;
      await this.#changed();
    }
    const first = this.inbox[0];
    const n = Math.min(p.length, first.length);
    p.set(first.subarray(0, n));
    if (n === first.length) this.inbox.shift();
    else this.inbox[0] = first.subarray(n);
    this.inboxBytes -= n;
    this.peer.notify(); // room for its writer
    return n;
  }
  async write(p: Uint8Array): Promise<number> {
    let off = 0;
    while (off < p.length) {
      if (this.closed) throw new ClosedError("RdmaConn");
      if (this.peer.eof || this.peer.closed) throw new ClosedError("RdmaConn (write side)");
      const room = this.peer.capacity - this.peer.inboxBytes;
      if (room <= 0) {
        await this.#changed();
        continue;
      }
      const n = Math.min(room, p.length - off);
      this.peer.inbox.push(p.slice(off, off + n));
      this.peer.inboxBytes += n;
      this.peer.maxInbox = Math.max(this.peer.maxInbox, this.peer.inboxBytes);
      this.peer.notify();
      off += n;
    }
    return p.length;
  }
  /** The connection fails as a vanished peer makes it fail (after the bytes that arrived). */
  fail(err: Error): void {
    this.failure = err;
    this.notify();
  }
  closeWrite(): Promise<void> {
    this.peer.eof = true;
    this.peer.notify();
    return Promise.resolve();
  }
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.notify();
    this.peer.eof = true;
    this.peer.notify();
  }
}

function memPair(capacity = 128 * 1024): [MemConn, MemConn] {
  const a = new MemConn(1111, 2222, capacity);
  const b = new MemConn(2222, 1111, capacity);
  a.peer = b;
  b.peer = a;
  return [a, b];
}

const asConn = (c: MemConn) => c as unknown as RdmaConn;

function socketPair(capacity?: number): [net.Socket, net.Socket, MemConn, MemConn] {
  const [a, b] = memPair(capacity);
  return [new net.Socket({ conn: asConn(a) }), new net.Socket({ conn: asConn(b) }), a, b];
}

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

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

/** The arguments of `emitter`'s next `name` event (unlike events.once, an `error` does not reject). */
function once(emitter: EventEmitter, name: string): Promise<unknown[]> {
  return new Promise((resolve) => emitter.once(name, (...args: unknown[]) => resolve(args)));
}

function code(e: unknown): string | undefined {
  return (e as { code?: string }).code;
}

// ------------------------------------------------------------------ argument checks

test("net: bad arguments throw InvalidArgumentError with node:net's codes", () => {
  const cases: [() => unknown, string][] = [
    [() => net.connect(70000, "10.0.2.15"), "ERR_SOCKET_BAD_PORT"],
    [() => net.connect(-1, "10.0.2.15"), "ERR_SOCKET_BAD_PORT"],
    [() => net.connect({ port: 1.5, host: "10.0.2.15" }), "ERR_SOCKET_BAD_PORT"],
    [() => net.connect({ port: "http", host: "10.0.2.15" }), "ERR_SOCKET_BAD_PORT"],
    [() => net.connect({ port: 80, host: "" }), "ERR_INVALID_ARG_TYPE"],
    [() => (net.connect as (...a: unknown[]) => unknown)(), "ERR_MISSING_ARGS"],
    [() => net.connect("/tmp/some.sock"), "ERR_INVALID_ARG_VALUE"],
    [() => net.connect({ port: 80, host: "h", connectTimeout: -1 }), "ERR_OUT_OF_RANGE"],
    [() => net.createServer().listen(65536), "ERR_SOCKET_BAD_PORT"],
    [() => net.createServer().listen("/tmp/some.sock"), "ERR_INVALID_ARG_VALUE"],
    [
      () => net.createServer().listen({ path: "/tmp/x" } as unknown as net.ListenOptions),
      "ERR_INVALID_ARG_VALUE",
    ],
    [() => net.createServer().listen(0, "0.0.0.0", -1), "ERR_OUT_OF_RANGE"],
    [() => net.createServer(42 as unknown as net.ServerOptions), "ERR_INVALID_ARG_TYPE"],
    [() => new net.Socket().setTimeout(-5), "ERR_OUT_OF_RANGE"],
    [() => new net.Socket({ conn: {} as RdmaConn }), "ERR_INVALID_ARG_TYPE"],
    [() => net.serveHttp(null as unknown as net.ConnectionSink), "ERR_INVALID_ARG_TYPE"],
  ];
  for (const [f, want] of cases) {
    assert.throws(f, (e: unknown) => {
      assert.ok(e instanceof InvalidArgumentError, `${f}: ${e}`);
      assert.ok(e instanceof net.NetArgumentError);
      assert.equal(code(e), want, `${f}: ${(e as Error).message}`);
      return true;
    });
  }
});

test("net: a server that is not listening — address() null, close(cb) gets ERR_SERVER_NOT_RUNNING", async () => {
  const server = net.createServer();
  assert.equal(server.address(), null);
  assert.equal(server.listening, false);
  const err = await new Promise<Error | undefined>((r) => server.close(r));
  assert.ok(err instanceof ClosedError);
  assert.equal(code(err), "ERR_SERVER_NOT_RUNNING");
  const [n] = await new Promise<[number]>((r) => server.getConnections((_e, c) => r([c])));
  assert.equal(n, 0);
});

test("net: an unconnected socket — state, address(), write fails with ERR_SOCKET_CLOSED", async () => {
  const s = new net.Socket();
  assert.equal(s.pending, true);
  assert.equal(s.connecting, false);
  assert.deepEqual(s.address(), {});
  assert.equal(s.remoteAddress, undefined);
  const errored = once(s, "error");
  const closed = once(s, "close"); // emitted right after error, as node:net does
  s.write("x");
  const [e] = await errored;
  assert.ok(e instanceof ClosedError);
  assert.equal(code(e), "ERR_SOCKET_CLOSED");
  assert.deepEqual(await closed, [true]);
  assert.equal(s.readyState, "closed");
});

test("net: connecting and listening report failures as error events, then close", async () => {
  // on a machine without RDMA this is NoDeviceError; with a device, nothing listens on 127.0.0.1
  const s = net.connect({ port: 9, host: "127.0.0.1", connectTimeout: 10_000 });
  assert.equal(s.connecting, true);
  assert.equal(s.readyState, "opening");
  const events: string[] = [];
  s.on("connect", () => events.push("connect"));
  const closed = once(s, "close");
  const [err] = await once(s, "error");
  const [hadError] = await closed;
  assert.ok(err instanceof RdmaError, `an RdmaError: ${err}`);
  assert.equal(hadError, true);
  assert.deepEqual(events, []);
  assert.equal(s.connecting, false);
  s.destroy(); // idempotent

  const server = net.createServer();
  const failed = new Promise<unknown>((resolve) => {
    server.once("error", resolve);
    server.once("listening", () => resolve(null));
  });
  server.listen(0, "192.0.2.1"); // TEST-NET-1: no interface has it
  const e = await failed;
  assert.ok(e instanceof RdmaError, `listen on an address no interface has: ${e}`);
  assert.equal(server.listening, false);
});

test("net: a socket aborted by its signal is destroyed with ABORT_ERR", async () => {
  const ac = new AbortController();
  const [a] = memPair();
  const s = new net.Socket({ conn: asConn(a), signal: ac.signal });
  const closed = once(s, "close");
  ac.abort();
  const [e] = await once(s, "error");
  assert.equal(code(e), "ABORT_ERR");
  await closed;
  assert.equal(a.closed, true, "the connection was closed");
});

test("net: the stream layer's errors get node:net's codes", () => {
  const where = { address: "10.0.2.15", port: 7471 };
  const reset = withCode(new ConnectionResetError("reset"));
  assert.ok(reset instanceof ConnectionResetError);
  assert.equal(reset.code, "ECONNRESET");
  const refused = withCode(new ConnectionRefusedError("refused"), where);
  assert.equal(refused.code, "ECONNREFUSED");
  assert.deepEqual([refused.syscall, refused.address, refused.port], [
    "connect",
    "10.0.2.15",
    7471,
  ]);
  assert.equal(withCode(new AbortedError("t"), { ...where, timedOut: true }).code, "ETIMEDOUT");
  assert.equal(withCode(new AbortedError("a"), where).code, "ABORT_ERR");
  const native = withCode(new NativeError("rdma_bind_addr", 98, "Address already in use"));
  assert.equal(native.code, "EADDRINUSE", "a NativeError keeps its errno name");
  assert.equal(withCode(new Error("other")).code, undefined);
});

// ------------------------------------------------------------------ the adapter over a pair

test("net: Socket over a connection pair — data both ways, end, close, counters, addresses", async () => {
  const [x, y] = socketPair();
  assert.equal(x.readyState, "open");
  assert.equal(x.pending, false);
  assert.deepEqual(x.address(), { address: "10.0.2.15", family: "IPv4", port: 1111 });
  assert.equal(x.remoteAddress, "10.0.2.15");
  assert.equal(x.remotePort, 2222);
  assert.equal(x.remoteFamily, "IPv4");
  assert.equal(x.localPort, 1111);
  const out = pattern(300_001, 7);
  const back = pattern(123_457, 9);
  const gotY: Buffer[] = [];
  const gotX: Buffer[] = [];
  y.on("data", (c: Buffer) => gotY.push(c));
  x.on("data", (c: Buffer) => gotX.push(c));
  const closes: boolean[] = [];
  x.on("close", (h: boolean) => closes.push(h));
  y.on("close", (h: boolean) => closes.push(h));
  const done = Promise.all([once(x, "end"), once(y, "end"), once(x, "close"), once(y, "close")]);
  x.end(out);
  y.end(back);
  await done;
  assert.equal(sha(Buffer.concat(gotY)), sha(out), "x → y intact");
  assert.equal(sha(Buffer.concat(gotX)), sha(back), "y → x intact");
  assert.equal(x.bytesWritten, out.length);
  assert.equal(y.bytesRead, out.length);
  assert.equal(x.bytesRead, back.length);
  assert.deepEqual(closes, [false, false]);
  assert.equal(x.readyState, "closed");
  x.destroy();
  x.destroy(); // idempotent: no second close
  await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(closes, [false, false]);
});

test("net: backpressure — a paused reader stops the read loop; the writer waits for drain", async () => {
  const ring = 64 * 1024;
  const [x, y, _a, b] = socketPair(ring);
  const chunk = Buffer.alloc(16 * 1024, 1);
  const total = 2 << 20;
  let sent = 0;
  let falses = 0;
  const writer = (async () => {
    while (sent < total) {
      const ok = x.write(chunk);
      sent += chunk.length;
      if (!ok) {
        falses++;
        await once(x, "drain");
      }
    }
    x.end();
  })();
  let received = 0;
  const ended = once(y, "end");
  y.on("data", (c: Buffer) => (received += c.length));
  y.once("data", () => y.pause()); // flowing, then paused after the first chunk
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  await sleep(50);
  const reads = b.reads;
  const sentThen = sent;
  await sleep(100);
  assert.equal(b.reads, reads, "no reads while the socket is paused and full");
  assert.equal(sent, sentThen, "the writer waits for drain");
  assert.ok(falses >= 1, "write() returned false");
  assert.ok(
    y.readableLength <= y.readableHighWaterMark + 65536,
    `buffered ${y.readableLength} > high-water mark ${y.readableHighWaterMark} + one read`,
  );
  assert.ok(b.maxInbox <= ring, "the ring never held more than its size");
  const inFlight = sent - received;
  const bound = ring + y.readableHighWaterMark + 65536 + x.writableHighWaterMark + chunk.length;
  assert.ok(inFlight <= bound, `${inFlight} bytes between writer and reader > ${bound}`);
  y.resume();
  await writer;
  await ended;
  assert.equal(received, total);
  assert.equal(x.bytesWritten, total);
  y.destroy();
  x.destroy();
});

test("net: a connection that fails is an ECONNRESET error after the bytes that arrived", async () => {
  const [x, y, a] = socketPair();
  let got = 0;
  x.on("data", (c: Buffer) => (got += c.length));
  const closed = once(x, "close");
  const errored = once(x, "error");
  y.write(Buffer.alloc(1000));
  await new Promise((r) => setTimeout(r, 20));
  a.fail(new ConnectionResetError("connection reset: the peer vanished"));
  const [e] = await errored;
  assert.ok(e instanceof ConnectionResetError);
  assert.equal(code(e), "ECONNRESET");
  assert.deepEqual(await closed, [true]);
  assert.equal(got, 1000, "the bytes that had arrived were delivered first");
  assert.equal(a.closed, true, "the connection was closed");
  y.destroy();
});

test("net: setTimeout emits timeout once per idle period; activity postpones it", async () => {
  const [x, y] = socketPair();
  let timeouts = 0;
  const idleMs = 150;
  x.setTimeout(idleMs, () => timeouts++);
  assert.equal(x.timeout, idleMs);
  x.on("timeout", () => {}); // the one-time callback and a listener
  y.on("data", () => {});
  let lastWrite = 0;
  for (let i = 0; i < 5; i++) {
    await new Promise<void>((r) => x.write("tick", () => r()));
    lastWrite = performance.now();
    await new Promise((r) => setTimeout(r, 30));
  }
  assert.equal(timeouts, 0, "no timeout while active");
  await once(x, "timeout");
  const idle = performance.now() - lastWrite;
  assert.ok(idle >= idleMs - 5, `timeout after ${idle.toFixed(1)} ms idle (< ${idleMs})`);
  await new Promise((r) => setTimeout(r, 2 * idleMs));
  assert.equal(timeouts, 1, "one timeout per idle period");
  x.setTimeout(0);
  x.destroy();
  y.destroy();
});

test("net: setKeepAlive, setNoDelay, ref and unref reach the connection when it has them", () => {
  const [a] = memPair();
  const calls: string[] = [];
  const conn = Object.assign(a, {
    setKeepAlive: (on: boolean, ms: number) => calls.push(`keepalive ${on} ${ms}`),
    ref: () => calls.push("ref"),
    unref: () => calls.push("unref"),
  });
  const s = new net.Socket({ conn: asConn(conn) });
  assert.equal(s.setKeepAlive(true, 5000), s);
  assert.deepEqual(s.keepAlive, { enable: true, initialDelay: 5000 });
  assert.equal(s.setNoDelay(false), s);
  assert.equal(s.noDelay, false);
  s.unref();
  s.ref();
  assert.deepEqual(calls, ["keepalive true 5000", "unref", "ref"]);
  // without those methods (a connection of today's stream layer) they are recorded only
  const [b] = memPair();
  const t = new net.Socket({ conn: asConn(b) });
  t.setKeepAlive(true, 1000).unref().ref();
  assert.deepEqual(t.keepAlive, { enable: true, initialDelay: 1000 });
  s.destroy();
  t.destroy();
});

// ------------------------------------------------------------------ node:http over the adapter

test("net: node:http's server and client over the adapter — keep-alive, 1 MiB body, chunked reply", async () => {
  const body = pattern(1 << 20, 3);
  const httpServer = http.createServer((req, res) => {
    const h = createHash("sha256");
    let n = 0;
    req.on("data", (c: Buffer) => {
      h.update(c);
      n += c.length;
    });
    req.on("end", () => {
      res.write(`${req.method} ${req.url} ${n} `);
      res.write(h.digest("hex"));
      res.end(Buffer.from(pattern(200_000, n).toString("base64")));
    });
  });
  // a server that counts as listening: serveHttp lets the HTTP server's `listening` follow it
  class Listening extends net.Server {
    override get listening(): boolean {
      return true;
    }
  }
  const rdma = net.serveHttp(httpServer, new Listening());
  assert.equal((httpServer as { listening: boolean }).listening, true);
  // the adapter's pairs stand in for accepted connections: hand them over as a listener would
  let connections = 0;
  class PairAgent extends http.Agent {
    override createConnection(): net.Socket {
      connections++;
      const [client, server] = socketPair();
      rdma.emit("connection", server);
      return client;
    }
  }
  const agent = new PairAgent({ keepAlive: true, maxSockets: 1 });
  try {
    for (let i = 0; i < 3; i++) {
      const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.request({
          host: "10.0.2.15",
          port: 80,
          path: `/r${i}`,
          method: "POST",
          agent,
          headers: { "content-length": body.length },
        }, resolve);
        req.on("error", reject);
        req.end(body);
      });
      assert.equal(res.statusCode, 200);
      assert.equal(res.headers["transfer-encoding"], "chunked");
      const chunks: Buffer[] = [];
      for await (const c of res) chunks.push(c as Buffer);
      const text = Buffer.concat(chunks).toString();
      const want = `POST /r${i} ${body.length} ${sha(body)}` +
        pattern(200_000, body.length).toString("base64");
      assert.equal(text, want, "the request body arrived whole, the chunked reply too");
    }
    assert.equal(connections, 1, "three requests on one kept-alive connection");
  } finally {
    agent.destroy();
    httpServer.closeAllConnections?.();
  }
});
