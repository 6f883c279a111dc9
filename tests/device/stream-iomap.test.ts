/**
 * One-sided memory on stream connections, on a real device, in the runtime that runs this file:
 *
 * - rsocket iomap against C `riostream`, both ways (C server ↔ our client, C client ↔ our
 *   server), data verified (`-T v`). Sampled: one custom run per direction, 300,000-byte
 *   transfers (chunks from 2 KiB up to 64 KiB, the 1 MiB rings wrapping) × 4 × 3
 *   iterations; the size sweep is the benchmark's (bench/iomap.ts).
 * - iomap/iowrite between two connections of this library in one process: a write spanning two
 *   mappings copied through the send ring and one sent zero copy from a local mapping, 20 rounds of random direct writes each followed by a stream message that names the
 *   range (the ordering rule: the bytes are there when the message is), unmapped offsets, a full
 *   table, iounmap clearing the peer's entry, close.
 * - remote buffers by token (in one process): random reads and writes through the staging area
 *   and zero copy (256 KiB exposed, 40 operations), 100 concurrent writes against 16 send WRs
 *   (backpressure), out-of-range offsets and lengths, a token without the access, a malformed
 *   token and one of another connection (all refused before posting: the connection stays
 *   usable), a revoked token (refused after the notice), memory deregistered behind the
 *   peer's back (a remote access error: both ends reset), and a peer process killed while a
 *   64 MiB read of its memory is under way (the read fails, the connection resets).
 * - the guide's one-sided example (docs/09-remote-memory.md) as a program.
 *
 * Process starts cost seconds in the emulated guest: the file starts 2 C tools, 2 of ours,
 * one peer process and the docs program.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { type DeviceEnv, deviceTest } from "../harness.ts";
import {
  account,
  isBun,
  killAll,
  ours,
  port,
  run,
  start,
  waitListening,
} from "./examples-common.ts";
import {
  ClosedError,
  connect,
  ConnectionResetError,
  InvalidArgumentError,
  InvalidTokenError,
  listen,
  NoIomapSlotError,
  type RdmaConn,
  RemoteAccessError,
  RevokedError,
  type StreamOptions,
  UnmappedOffsetError,
} from "../lib.ts";
import { prng } from "./peers/stream-data.ts";
import { spawnPeer } from "./peers/spawn.ts";
import { ROOT, runnableSnippets } from "../../scripts/check-docs.ts";

/** Two connected streams in this process: [accepted, connected]. */
async function pair(env: DeviceEnv, options: StreamOptions = {}): Promise<[RdmaConn, RdmaConn]> {
  const listener = listen({ hostname: env.address, port: 0, ...options });
  try {
    const accepted = listener.accept({ timeout: 30_000 });
    const c = await connect({ hostname: env.address, port: listener.addr.port, ...options });
    return [await accepted, c];
  } finally {
    listener.close();
  }
}

async function closeAll(...conns: RdmaConn[]): Promise<void> {
  for (const c of conns) c.close();
  await Promise.all(conns.map((c) => c.released));
}

/** Reads exactly `n` bytes. */
async function readExactly(conn: RdmaConn, n: number): Promise<Uint8Array> {
  const buf = new Uint8Array(n);
  const got = await conn.read(buf, { min: n });
  assert.equal(got, n);
  return buf;
}

function fill(buf: Uint8Array, seed: number): Uint8Array {
  const r = prng(seed);
  for (let i = 0; i < buf.length; i++) buf[i] = Math.floor(r() * 256);
  return buf;
}

// ------------------------------------------------------------------------ riostream interop

function results(stdout: string): string[] {
  return stdout.split("\n").filter((l) => /^custom\s+\S+\s+\S+\s+\S+\s+\S+\s+[\d.]+s\s/.test(l));
}

for (const cServer of [true, false]) {
  const label = cServer ? "C riostream server ← our client" : "our riostream server ← C client";
  deviceTest(`stream iomap: ${label}, -T v`, async (env) => {
    const p = String(port());
    const sizes = ["-S", "300000", "-C", "4", "-I", "3", "-T", "v"];
    const serverArgs = ["-b", env.address, "-p", p, ...sizes];
    const clientArgs = ["-s", env.address, "-p", p, ...sizes];
    const server = start(cServer ? ["riostream", ...serverArgs] : ours("riostream", serverArgs), {
      timeoutMs: 240_000,
    });
    try {
      await waitListening(server, Number(p));
      const client = await run(
        cServer ? ours("riostream", clientArgs) : ["riostream", ...clientArgs],
        { timeoutMs: 180_000 },
      );
      const srv = await server.ended;
      assert.equal(client.code, 0, account("client", client));
      assert.equal(srv.code, 0, account("server", srv));
      for (const [who, r] of [["client", client], ["server", srv]] as const) {
        assert.equal(results(r.stdout).length, 1, account(who, r));
        assert.doesNotMatch(r.stdout, /verification failed/);
        assert.match(
          r.stdout,
          /^name {6}bytes {3}xfers {3}iters {3}total {7}time {5}Gb\/sec {4}usec\/xfer$/m,
        );
      }
      console.log(`${label}\nclient:\n${client.stdout}server:\n${srv.stdout}`);
    } finally {
      killAll();
    }
  }, { timeout: 300_000 });
}

// ------------------------------------------------------------------------ iomap, ours ↔ ours

deviceTest(
  "stream iomap: iowrite lands in the peer's mappings, before later stream data",
  async (env) => {
    const [a, b] = await pair(env, { iomapSize: 2 });
    try {
      assert.equal(a.info.iomapSize, 2);
      assert.equal(b.info.remoteIomapSize, 2);
      // A maps two buffers back to back at offset 1000: [1000, 66536) and [66536, 590824)
      const m1 = a.iomap(65536, { offset: 1000 });
      const m2 = a.iomap(new Uint8Array(524288), { offset: 1000 + 65536 });
      assert.throws(() => a.iomap(16), NoIomapSlotError, "B offers two entries");
      await a.write(new Uint8Array([1])); // the entries go before this byte
      await readExactly(b, 1);
      // one write spanning both mappings
      const big = fill(new Uint8Array(150_000), 1);
      assert.equal(await b.iowrite(big, 2000), big.length);
      await b.write(new Uint8Array([2]));
      assert.deepEqual([...await readExactly(a, 1)], [2]);
      assert.deepEqual(m1.buffer.subarray(1000), big.subarray(0, 64536));
      assert.deepEqual(m2.buffer.subarray(0, 150_000 - 64536), big.subarray(64536));
      // from registered memory (a local mapping): no copy, one write per mapped range
      const local = b.iomap(600_000, { access: "none" });
      assert.equal(local.index, -1);
      fill(local.buffer, 5);
      assert.equal(await b.iowrite(local.buffer.subarray(0, 400_000), 3000), 400_000);
      await b.write(new Uint8Array([2]));
      assert.deepEqual([...await readExactly(a, 1)], [2]);
      assert.deepEqual(m1.buffer.subarray(2000), local.buffer.subarray(0, 63536));
      assert.deepEqual(
        m2.buffer.subarray(0, 400_000 - 63536),
        local.buffer.subarray(63536, 400_000),
      );
      // the ordering rule, 20 random rounds: a direct write, then a message naming its range
      const r = prng(2);
      const msg = new Uint8Array(12);
      const mv = new DataView(msg.buffer);
      for (let round = 0; round < 20; round++) {
        const off = 1000 + Math.floor(r() * 580_000);
        const len = 1 + Math.floor(r() * Math.min(590_824 - off, 100_000));
        const data = new Uint8Array(len).fill(round + 10);
        await b.iowrite(data, off);
        mv.setUint32(0, off, true);
        mv.setUint32(4, len, true);
        mv.setUint32(8, round + 10, true);
        await b.write(msg);
        const got = new DataView((await readExactly(a, 12)).buffer);
        const [o, l, v] = [got.getUint32(0, true), got.getUint32(4, true), got.getUint32(8, true)];
        for (let i = o; i < o + l; i++) {
          const at = i - 1000;
          const byte = at < 65536 ? m1.buffer[at] : m2.buffer[at - 65536];
          if (byte !== v) assert.fail(`round ${round}: byte at ${i} is ${byte}, not ${v}`);
        }
      }
      // refused before anything is sent
      await assert.rejects(b.iowrite(new Uint8Array(10), 999), UnmappedOffsetError);
      await assert.rejects(b.iowrite(new Uint8Array(10), 590_820), UnmappedOffsetError);
      await assert.rejects(b.iowrite(new Uint8Array(1), -1), InvalidArgumentError);
      assert.throws(() => a.iomap(100, { offset: 60_000 }), NoIomapSlotError);
      // iounmap clears B's entry: B's iowrite there now fails cleanly
      a.iounmap(m2);
      assert.equal(m2.closed, true);
      a.iounmap(m2); // idempotent for a handle
      await a.write(new Uint8Array([3]));
      await readExactly(b, 1);
      await assert.rejects(b.iowrite(new Uint8Array(10), 70_000), UnmappedOffsetError);
      assert.equal(await b.iowrite(new Uint8Array(10).fill(9), 1000), 10, "m1 still mapped");
      // a freed entry is reused; overlapping ranges are refused
      assert.throws(() => a.iomap(100, { offset: 2000 }), InvalidArgumentError);
      const m3 = a.iomap(100, { offset: 1_000_000 });
      assert.equal(m3.index, 1);
      // the stream is unharmed
      await b.write(new Uint8Array([4]));
      assert.deepEqual([...await readExactly(a, 1)], [4]);
    } finally {
      await closeAll(a, b);
    }
    await assert.rejects(b.iowrite(new Uint8Array(1), 0), ClosedError);
    assert.throws(() => a.iomap(10), ClosedError);
  },
);

// ------------------------------------------------------------------------ remote buffers

deviceTest("stream remote: reads and writes by token, staged and zero copy", async (env) => {
  const [a, b] = await pair(env);
  try {
    assert.ok(a.info.readDepth >= 1 && b.info.readDepth >= 1, JSON.stringify([a.info, b.info]));
    const size = 256 * 1024;
    const exposed = a.expose(size, { read: true, write: true });
    assert.equal(exposed.token.length, 32);
    fill(exposed.buffer, 3);
    await a.write(exposed.token);
    const remote = b.remote(await readExactly(b, 32));
    assert.equal(remote.length, size);
    assert.ok(remote.readable && remote.writable);
    // a local exposure of B: zero-copy source and destination (no remote access needed)
    const local = b.expose(size, { read: false, write: false });
    const mirror = exposed.buffer.slice();
    const r = prng(4);
    for (let i = 0; i < 40; i++) {
      const off = Math.floor(r() * size);
      const len = 1 + Math.floor(r() * (size - off));
      const zeroCopy = r() < 0.5;
      if (r() < 0.5) {
        const data = zeroCopy ? local.buffer.subarray(0, len) : new Uint8Array(len);
        fill(data, 100 + i);
        await remote.write(off, data);
        mirror.set(data, off);
        assert.deepEqual(exposed.buffer.subarray(off, off + len), data, `write ${i}`);
      } else {
        const got = zeroCopy
          ? await remote.read(off, local.buffer.subarray(size - len))
          : await remote.read(off, len);
        assert.equal(got.length, len);
        assert.deepEqual(got, mirror.subarray(off, off + len), `read ${i}`);
      }
    }
    // 100 concurrent writes of 64 KiB against 16 send WRs: all complete, all land
    const ops = [];
    for (let i = 0; i < 100; i++) {
      ops.push(remote.write((i % 4) * 65536, new Uint8Array(65536).fill(i)));
    }
    await Promise.all(ops);
    for (let q = 0; q < 4; q++) {
      const last = 96 + q; // the last write to each quarter
      assert.equal(exposed.buffer[q * 65536], last);
    }
    // many staged 1 MiB operations at once, reads among the writes, each in 256 KiB chunks
    // through 8 staging slots: all complete, and the writes land in call order
    const mib = 1 << 20;
    const wide = a.expose(mib, { read: true, write: true });
    await a.write(wide.token);
    const far = b.remote(await readExactly(b, 32));
    const sizes = await Promise.all(
      Array.from(
        { length: 24 },
        (_, i) =>
          i % 3 === 2
            ? far.read(0, mib).then((d) => d.length)
            : far.write(0, new Uint8Array(mib).fill(200 + i)).then(() => mib),
      ),
    );
    assert.deepEqual(sizes, new Array(24).fill(mib));
    assert.ok(wide.buffer.every((x) => x === 222), "the last write in call order lands last");
    // the stream still carries data both ways
    await b.write(new Uint8Array([7]));
    assert.deepEqual([...await readExactly(a, 1)], [7]);
  } finally {
    await closeAll(a, b);
  }
});

deviceTest(
  "stream remote: bad offsets, access, tokens and revocation are refused before posting",
  async (env) => {
    const [a, b] = await pair(env);
    const [c, d] = await pair(env);
    try {
      const ro = a.expose(new Uint8Array(4096).fill(5), { read: true });
      await a.write(ro.token);
      const token = await readExactly(b, 32);
      const remote = b.remote(token);
      await assert.rejects(remote.read(4000, 100), InvalidArgumentError);
      await assert.rejects(remote.read(-1, 1), InvalidArgumentError);
      await assert.rejects(remote.read(0, 4097), InvalidArgumentError);
      await assert.rejects(remote.write(0, new Uint8Array(1)), RemoteAccessError);
      assert.deepEqual([...await remote.read(4090, 6)], [5, 5, 5, 5, 5, 5]);
      // tokens: malformed, another version, another connection's
      assert.throws(() => b.remote(new Uint8Array(31)), InvalidTokenError);
      const v2 = token.slice();
      v2[0] = 2;
      assert.throws(() => b.remote(v2), InvalidTokenError);
      assert.throws(() => d.remote(token), InvalidTokenError, "a token of another connection");
      const other = c.expose(64);
      assert.throws(() => b.remote(other.token), InvalidTokenError);
      // revoked: the owner closes the handle; the notice reaches B before the next stream byte
      ro.close();
      ro.close(); // idempotent
      await a.write(new Uint8Array([1]));
      await readExactly(b, 1);
      assert.equal(remote.revoked, true);
      await assert.rejects(remote.read(0, 1), RevokedError);
      // none of this harmed the connection
      await b.write(new Uint8Array([2]));
      assert.deepEqual([...await readExactly(a, 1)], [2]);
      const again = a.expose(128, { write: true });
      await a.write(again.token);
      await b.remote(await readExactly(b, 32)).write(0, new Uint8Array(128).fill(6));
      assert.equal(again.buffer[127], 6);
    } finally {
      await closeAll(a, b, c, d);
    }
  },
);

deviceTest(
  "stream remote: memory deregistered behind the peer's back is a remote access error, both ends reset",
  async (env) => {
    const [a, b] = await pair(env);
    try {
      const h = a.expose(8192, { read: true, write: true });
      await a.write(h.token);
      const remote = b.remote(await readExactly(b, 32));
      await remote.write(0, new Uint8Array(10));
      h.mr.close(); // deregistered without the handle's notice
      if (env.transport === "ib") {
        // the responder's NAK fails the write itself
        const err = await remote.write(0, new Uint8Array(10)).then(() => null, (e) => e);
        assert.ok(err instanceof RemoteAccessError, `got ${err}`);
        assert.match(String((err as Error).cause), /REM_ACCESS_ERR|REM_INV_REQ|REM_OP_ERR/);
      } else {
        // iWARP: a write completes once sent (the refusal comes back as a TERMINATE that ends
        // the connection); a read waits for the answer, which is the refusal or the end
        const err = await remote.read(0, 10).then(() => null, (e) => e);
        console.log(`iWARP read of deregistered memory: ${err}`);
        assert.ok(
          err instanceof RemoteAccessError || err instanceof ConnectionResetError,
          `got ${err}`,
        );
      }
      const buf = new Uint8Array(1);
      await assert.rejects(b.read(buf, { timeout: 30_000 }), ConnectionResetError);
      await assert.rejects(a.read(buf, { timeout: 60_000 }), ConnectionResetError);
    } finally {
      await closeAll(a, b);
    }
  },
  { timeout: 180_000 },
);

deviceTest(
  "stream remote: a peer killed during a 64 MiB read: the read ends, the connection resets",
  async (env) => {
    const listener = listen({ hostname: env.address, port: 0 });
    const size = 64 << 20;
    const peer = spawnPeer("stream-expose-peer.ts", [
      env.address,
      String(listener.addr.port),
      String(size),
    ]);
    try {
      const conn = await listener.accept({ timeout: 60_000 });
      const remote = await conn.readRemote();
      assert.equal(remote.length, size);
      const head = await remote.read(0, 4096); // the peer filled it with its index pattern
      assert.equal(head[4095], 4095 & 0xff);
      const into = new Uint8Array(size);
      const t0 = performance.now();
      const reading = remote.read(0, into).then(() => null, (e) => e);
      await new Promise((r) => setTimeout(r, 300));
      peer.kill();
      // the read under way completes (the dead peer's memory stays pinned until its process is
      // torn down) or fails: with a remote access error (its memory went first) or a reset (its
      // QP went first, or the connection manager saw it leave); it does not hang
      const err = await reading;
      console.log(`the read ended after ${((performance.now() - t0) / 1000).toFixed(1)} s: ${err}`);
      if (err !== null) {
        assert.ok(
          err instanceof ConnectionResetError || err instanceof RemoteAccessError,
          `got ${err}`,
        );
      }
      // the connection learns that the peer is gone; later reads are refused before posting
      await assert.rejects(conn.read(new Uint8Array(1), { timeout: 60_000 }), ConnectionResetError);
      await assert.rejects(remote.read(0, 1), ConnectionResetError);
      conn.close();
      await conn.released;
    } finally {
      listener.close();
      peer.kill();
    }
  },
  { timeout: 180_000 },
);

// ------------------------------------------------------------------------ the guide's example

const EXAMPLE = "docs/09-remote-memory.md";

deviceTest("stream remote: the guide's one-sided example runs", async (env) => {
  const block = runnableSnippets().find((b) => b.file.endsWith(EXAMPLE));
  assert.ok(block, `no runnable block in ${EXAMPLE}`);
  const dir = mkdtempSync(join(tmpdir(), "remote-example-"));
  try {
    const file = join(dir, "one-sided.ts");
    const mod = pathToFileURL(join(ROOT, "mod.ts")).href;
    writeFileSync(file, block.code.replace(/from\s+"(?:jsr:)?@rdma\/verbs"/g, `from "${mod}"`));
    const argv = isBun
      ? [process.execPath, file, env.address]
      : [process.execPath, "run", "--allow-ffi", file, env.address];
    const r = await run(argv, { timeoutMs: 90_000 });
    console.log(r.stdout);
    assert.equal(r.code, 0, account(EXAMPLE, r));
    assert.match(r.stdout, /read back 262144 bytes, all 7: true/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, { timeout: 120_000 });
