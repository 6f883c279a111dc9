/**
 * Stream connections in each waiting strategy, both ends in this process, on a real device. A
 * blocked read or write waits by the connection's `strategy`: `"adaptive"` (the default) spins
 * for a learnt budget and then sleeps, `"event"` sleeps at once (the connection arms its CQ and is
 * woken by the CQ's event on the shared completion channel), `"busy"` polls in slices between
 * event-loop turns and never sleeps. For each, and for two ends in different strategies:
 *
 * - 300 round trips of 64 B, every byte checked;
 * - 1 MiB each way at once in writes of random size, checksums compared;
 * - a writer 512 KiB ahead of a reader that starts late (the writes block on credits, then go on);
 * - `closeWrite()` → the peer reads the end; `close()` → `released`; the census of native
 *   objects back where it was before the connections.
 *
 * And with `"event"`: eight connections at once on the one shared channel, each its own
 * ping-pong; a read that nothing answers times out with `AbortedError` and the connection then
 * works on; a read pending when the peer closes resolves with the end; a read pending when this
 * side closes rejects with `ClosedError`.
 *
 * Sizes are the same in CI and elsewhere: a few seconds per strategy in the emulated guest.
 */

import assert from "node:assert/strict";
import { type DeviceEnv, deviceTest } from "../harness.ts";
import {
  AbortedError,
  ClosedError,
  connect,
  listen,
  nativeCensus,
  type RdmaConn,
  type StreamOptions,
} from "../lib.ts";
import { censusChanges } from "./peers/session.ts";
import { Checksum, prng } from "./peers/stream-data.ts";

type Strategy = NonNullable<StreamOptions["strategy"]>;

const TIMEOUT = 120_000;

/** A connected pair: the client in `client` strategy, the accepted end in `server`'s. */
async function pair(
  env: DeviceEnv,
  client: Strategy,
  server: Strategy,
): Promise<[RdmaConn, RdmaConn]> {
  const listener = listen({ hostname: env.address, port: 0, strategy: server });
  try {
    const accepted = listener.accept({ timeout: 30_000 });
    const c = await connect({
      hostname: env.address,
      port: listener.addr.port,
      strategy: client,
      timeout: 30_000,
    });
    return [c, await accepted];
  } finally {
    listener.close();
  }
}

/** Closes both ends and waits until their native side is released. */
async function closeBoth(a: RdmaConn, b: RdmaConn): Promise<void> {
  a.close();
  b.close();
  await Promise.all([a.released, b.released]);
}

let warmed = false;

/**
 * Runs `body` and checks that the census of native objects is back where it was before it. The
 * first stream connection of a process makes what lives as long as the process (the poller,
 * function pointers): one connection is made and closed first, once.
 */
async function censusKept(env: DeviceEnv, body: () => Promise<void>): Promise<void> {
  if (!warmed) {
    const [a, b] = await pair(env, "adaptive", "adaptive");
    await a.write(new Uint8Array([1]));
    assert.equal(await b.read(new Uint8Array(1)), 1);
    await closeBoth(a, b);
    warmed = true;
  }
  const before = nativeCensus();
  await body();
  assert.deepEqual(censusChanges(before, nativeCensus()), {}, "the census is back");
}

/** Reads exactly `p.length` bytes (the end of the stream before that fails). */
async function readFull(conn: RdmaConn, p: Uint8Array): Promise<void> {
  assert.equal(await conn.read(p, { min: p.length, timeout: 30_000 }), p.length);
}

/** `n` round trips of 64 B from `a` to `b` and back, the bytes of each checked. */
async function pingPong(a: RdmaConn, b: RdmaConn, n: number, seed: number): Promise<void> {
  const out = new Uint8Array(64);
  const got = new Uint8Array(64);
  const back = new Uint8Array(64);
  const echo = (async () => {
    for (let i = 0; i < n; i++) {
      await readFull(b, got);
      await b.write(got);
    }
  })();
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < 64; j++) out[j] = (seed + i * 7 + j) & 0xff;
    await a.write(out);
    await readFull(a, back);
    assert.deepEqual(back, out, `round trip ${i}`);
  }
  await echo;
}

/** `n` reproducible random bytes. */
function bytes(n: number, seed: number): Uint8Array {
  const rand = prng(seed);
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = rand() * 256;
  return out;
}

/** The checksum of `data`. */
function checksum(data: Uint8Array): number {
  const sum = new Checksum();
  sum.update(data, data.length);
  return sum.value;
}

/** Writes `data` in writes of 1 B - 64 KiB (sizes from `seed`). */
async function writeAll(conn: RdmaConn, data: Uint8Array, seed: number): Promise<void> {
  const rand = prng(seed);
  for (let off = 0; off < data.length;) {
    const len = Math.min(data.length - off, 1 + Math.floor(rand() * 65536));
    assert.equal(await conn.write(data.subarray(off, off + len), { timeout: 30_000 }), len);
    off += len;
  }
}

/** Reads `n` bytes in reads of up to 16 KiB; their checksum. */
async function readAll(conn: RdmaConn, n: number): Promise<number> {
  const sum = new Checksum();
  const buf = new Uint8Array(16384);
  for (let left = n; left > 0;) {
    const got = await conn.read(buf.subarray(0, Math.min(left, buf.length)), { timeout: 30_000 });
    assert.ok(got !== null && got > 0, `the stream ended ${left} bytes early`);
    sum.update(buf, got);
    left -= got;
  }
  return sum.value;
}

const PAIRS: [Strategy, Strategy][] = [
  ["adaptive", "adaptive"],
  ["event", "event"],
  ["busy", "busy"],
  ["event", "busy"],
];

for (const [client, server] of PAIRS) {
  deviceTest(
    `stream strategies: ${client} ↔ ${server}: ping-pong, both ways at once, a late reader, the end, the census`,
    (env) =>
      censusKept(env, async () => {
        const [a, b] = await pair(env, client, server);
        await pingPong(a, b, 300, 3);
        await pingPong(b, a, 300, 5);

        const MiB = 1 << 20;
        const ab = bytes(MiB, 11);
        const ba = bytes(MiB, 13);
        const [, , abSum, baSum] = await Promise.all([
          writeAll(a, ab, 17),
          writeAll(b, ba, 19),
          readAll(b, MiB),
          readAll(a, MiB),
        ]);
        assert.equal(abSum, checksum(ab), "client → server");
        assert.equal(baSum, checksum(ba), "server → client");

        // the writer runs ahead of both rings and blocks until the reader, 100 ms late, drains
        const ahead = bytes(512 * 1024, 23);
        const writing = writeAll(a, ahead, 29);
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(await readAll(b, ahead.length), checksum(ahead), "after the late reader");
        await writing;

        await a.closeWrite();
        assert.equal(await b.read(new Uint8Array(8), { timeout: 30_000 }), null, "the end");
        await b.closeWrite();
        assert.equal(await a.read(new Uint8Array(8), { timeout: 30_000 }), null, "the end back");
        await closeBoth(a, b);
      }),
    { timeout: TIMEOUT },
  );
}

deviceTest(
  "stream strategies: event: eight connections at once on the shared channel, each its own ping-pong",
  (env) =>
    censusKept(env, async () => {
      const pairs: [RdmaConn, RdmaConn][] = [];
      for (let i = 0; i < 8; i++) pairs.push(await pair(env, "event", "event"));
      await Promise.all(pairs.map(([a, b], i) => pingPong(a, b, 100, 31 * i)));
      // and again with every other pair idle meanwhile
      await Promise.all(
        pairs.filter((_, i) => i % 2 === 0).map(([a, b], i) => pingPong(b, a, 100, i)),
      );
      await Promise.all(pairs.map(([a, b]) => closeBoth(a, b)));
    }),
  { timeout: TIMEOUT },
);

deviceTest(
  "stream strategies: event: a timed-out read, then a read ended by the peer and one by this side's close",
  (env) =>
    censusKept(env, async () => {
      const [a, b] = await pair(env, "event", "event");
      const t0 = performance.now();
      await assert.rejects(a.read(new Uint8Array(8), { timeout: 100 }), AbortedError);
      const waited = performance.now() - t0;
      assert.ok(waited >= 90 && waited < 20_000, `the timeout ended the wait (${waited} ms)`);
      // the connection sleeps and wakes as before
      await pingPong(a, b, 20, 41);

      // pending when the peer closes: the end
      const pending = a.read(new Uint8Array(8), { timeout: 30_000 });
      await new Promise((r) => setTimeout(r, 50));
      b.close();
      assert.equal(await pending, null);
      await b.released;

      // pending when this side closes: ClosedError
      const [c, d] = await pair(env, "event", "event");
      const mine = c.read(new Uint8Array(8), { timeout: 30_000 });
      await new Promise((r) => setTimeout(r, 50));
      c.close();
      await assert.rejects(mine, ClosedError);
      await closeBoth(c, d);
      await closeBoth(a, b);
    }),
  { timeout: TIMEOUT },
);
