/**
 * Faults on the wire between two hosts (`scripts/test --two-hosts`: two guests, each with its
 * own kernel and soft-RoCE device, joined by a link on which `tc netem` and `ip link` inject
 * faults): sequence-numbered messages over RC with 1 % and 10 % loss, and with delay and
 * reordering, all arrive once and in order; a link cut longer than the retry budget fails the outstanding sends with
 * RETRY_EXC_ERR and flushes the rest, every promise settles, the connection manager reports the
 * disconnect (`RDMA_FAULT_DREQ_GIVEUP=1` only: the CM gives up resending its DREQ after about
 * 100 s), and a new connection works once the link is back; a peer killed across the link is
 * noticed in bounded time; a stream with keepalive on reports a peer cut off without any
 * disconnect as ConnectionResetError to its pending read. Each prints its figures.
 *
 * `RDMA_FAULT_LOSS_MESSAGES` sets the message count of the loss runs (a quarter of it for the
 * reordering run): 1,000 by default, which
 * keeps CI short (100,000 took 4.5–5 minutes per loss rate per runtime in the emulated guests);
 * `RDMA_FAULT_LOSS_MESSAGES=100000 scripts/test --two-hosts` runs the full count.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { deviceTest, notOnIwarp } from "../harness.ts";
import {
  AccessFlags,
  cmConnect,
  type CmId,
  type CompletionQueue,
  connect,
  ConnectionResetError,
  KEEPALIVE_PROBES,
  type MemoryRegion,
  type ProtectionDomain,
  type QueuePair,
  WcOpcode,
  WcStatus,
  WorkCompletionError,
  WrOpcode,
} from "../lib.ts";
import { hasRemotePeer, peerAddress, spawnPeer } from "./peers/spawn.ts";

const MESSAGES = Number(process.env.RDMA_FAULT_LOSS_MESSAGES ?? 1_000);
const WINDOW = 32;
const needs = (env: Parameters<Parameters<typeof deviceTest>[1]>[0]) =>
  !hasRemotePeer()
    ? "needs a peer guest (scripts/test --two-hosts)"
    : notOnIwarp("netem runs")(env);

const NETEM = new URL("../hosts/netem.sh", import.meta.url).pathname;

/**
 * What each guest has applied since it was last cleared: a qdisc, a link down. A `peer` action
 * runs on the other guest through its agent and costs seconds in the emulated guests, so
 * {@link clear} undoes only what was done.
 */
const applied = { self: { qdisc: true, down: true }, peer: { qdisc: true, down: true } };

/** Applies a netem/link action on this guest (`self`) or the other (`peer`). */
function netem(where: "self" | "peer", ...action: string[]): void {
  const r = spawnSync(NETEM, [where, ...action], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`netem.sh ${where} ${action.join(" ")}: ${r.stderr}`);
  const a = applied[where];
  if (action[0] === "clear") a.qdisc = false;
  else if (action[0] === "up") a.down = false;
  else if (action[0] === "down") a.down = true;
  else if (action[0] !== "show") a.qdisc = true;
}

/** Both guests back to a clean link (only what was applied; at first, everything). */
function clear(): void {
  for (const w of ["self", "peer"] as const) {
    try {
      if (applied[w].qdisc) netem(w, "clear");
      if (applied[w].down) netem(w, "up");
    } catch {
      // best effort: the next test clears again
    }
  }
}

interface Client {
  id: CmId;
  pd: ProtectionDomain;
  cq: CompletionQueue;
  qp: QueuePair;
  mr: MemoryRegion;
  close(): void;
}

async function client(port: number, ackTimeout: number, retryCount = 7): Promise<Client> {
  let made: Omit<Client, "id" | "close"> | undefined;
  const { id } = await cmConnect({
    hostname: peerAddress(),
    port,
    retryCount,
    timeout: 60_000,
    beforeConnect: (id) => {
      id.setAckTimeout(ackTimeout);
      const ctx = id.context;
      const pd = ctx.allocPd();
      const ch = ctx.createCompChannel();
      const cq = ctx.createCq({ cqe: 256, channel: ch });
      const qp = id.createQp(pd, {
        sendCq: cq,
        cap: { maxSendWr: 64, maxRecvWr: 8, maxSendSge: 1, maxRecvSge: 1 },
      });
      const mr = pd.allocBuffer(WINDOW * 8 + 4096, { access: AccessFlags.LOCAL_WRITE });
      qp.postRecv({ wrId: 0xfffe, sg: [{ mr, offset: WINDOW * 8, length: 4096 }] });
      made = { pd, cq, qp, mr };
    },
  });
  const m = made!;
  return {
    id,
    ...m,
    close() {
      id.close();
      m.pd.close();
      m.cq.close();
      m.cq.channel?.close();
    },
  };
}

/** Sends `n` sequence-numbered messages with a window, then the end marker; returns the sink's counts. */
async function stream(c: Client, n: number): Promise<Record<string, number>> {
  const view = new DataView(c.mr.buffer.buffer, c.mr.buffer.byteOffset);
  let posted = 0, done = 0;
  const post = (seq: number) => {
    const slot = seq % WINDOW;
    view.setUint32(slot * 8, seq, true);
    view.setUint32(slot * 8 + 4, ~seq >>> 0, true);
    c.qp.postSend({
      wrId: seq,
      opcode: WrOpcode.SEND,
      sg: [{ mr: c.mr, offset: slot * 8, length: 8 }],
    });
  };
  let reply: string | null = null;
  const end = n; // the marker's slot is reused like any other
  while (posted < n && posted - done < WINDOW) post(posted++);
  while (done < n || reply === null) {
    const got = await c.cq.wait({ strategy: "event", timeout: 120_000 });
    for (let i = 0; i < got; i++) {
      const wc = c.cq.completion(i);
      wc.check();
      if (wc.opcode & WcOpcode.RECV) {
        reply = new TextDecoder().decode(c.mr.buffer.subarray(WINDOW * 8, WINDOW * 8 + wc.byteLen));
      } else if (wc.wrIdNumber < n) done++;
    }
    while (posted < n && posted - done < WINDOW) post(posted++);
    if (done === n && posted === n) {
      posted++;
      const slot = end % WINDOW;
      view.setUint32(slot * 8, 0xffffffff, true);
      view.setUint32(slot * 8 + 4, 0, true);
      c.qp.postSend({ wrId: 0xffffffff, sg: [{ mr: c.mr, offset: slot * 8, length: 8 }] });
    }
  }
  return JSON.parse(reply);
}

/** The wire conditions of the sequence runs: netem actions applied on both guests. */
const WIRES: { name: string; action: string[]; messages: number }[] = [
  { name: "1% loss both ways", action: ["loss", "1%"], messages: MESSAGES },
  { name: "10% loss both ways", action: ["loss", "10%"], messages: MESSAGES },
  {
    // every frame delayed by 2 ms ± 1 ms, a quarter of them sent at once: they overtake
    name: "2 ms ± 1 ms delay with 25% reordered both ways",
    action: ["netem", "delay", "2ms", "1ms", "reorder", "25%", "50%"],
    messages: Math.ceil(MESSAGES / 4),
  },
];

for (const wire of WIRES) {
  deviceTest(
    `fault wire: ${wire.messages} sequence-numbered messages over RC with ${wire.name} arrive once, in order`,
    async () => {
      const peer = spawnPeer("seq-sink.ts", [peerAddress(), "1"]);
      try {
        const { port } = await peer.next((m) => "ready" in m, 120_000) as { port: number };
        const c = await client(port, 14);
        try {
          netem("self", ...wire.action);
          netem("peer", ...wire.action);
          const t0 = performance.now();
          const counts = await stream(c, wire.messages);
          const secs = (performance.now() - t0) / 1000;
          clear();
          assert.deepEqual(
            { inOrder: counts.inOrder, outOfOrder: counts.outOfOrder, corrupt: counts.corrupt },
            { inOrder: wire.messages, outOfOrder: 0, corrupt: 0 },
          );
          console.log(
            `fault wire: ${wire.messages} messages with ${wire.name} in ${secs.toFixed(1)} s ` +
              `(${(wire.messages / secs).toFixed(0)} msg/s): all delivered once, in order`,
          );
          await c.id.disconnect({ timeout: 30_000 });
        } finally {
          clear();
          c.close();
        }
        await peer.next((m) => "done" in m, 60_000);
      } finally {
        clear();
        peer.kill();
      }
    },
    { needs, timeout: 1_800_000 },
  );
}

const DREQ_GIVEUP = process.env.RDMA_FAULT_DREQ_GIVEUP === "1";

deviceTest(
  "fault wire: a link cut beyond the retry budget fails and flushes every send, " +
    (DREQ_GIVEUP ? "cm reports the disconnect, " : "") + "a new connection works after",
  async () => {
    const peer = spawnPeer("seq-sink.ts", [peerAddress(), "2"]);
    try {
      const { port } = await peer.next((m) => "ready" in m, 120_000) as { port: number };
      // ACK timeout 4.096 µs × 2^14 ≈ 67 ms, 2 retries: the budget is well under a second
      const c = await client(port, 14, 2);
      try {
        const src = c.mr;
        await c.qp.send({ wrId: 1, sg: [{ mr: src, offset: 0, length: 8 }] }); // the link works
        // cut at the far end: our frames leave and vanish, nothing comes back (a local link
        // down is different: rxe cannot transmit and completes with LOC_QP_OP_ERR at once)
        netem("peer", "down");
        const t0 = performance.now();
        const sends = Array.from(
          { length: 16 },
          (_, i) =>
            c.qp.send({ wrId: 100 + i, sg: [{ mr: src, offset: (i % WINDOW) * 8, length: 8 }] }),
        );
        const results = await Promise.allSettled(sends);
        const ms = performance.now() - t0;
        const statuses = results.map((r) =>
          r.status === "rejected" && r.reason instanceof WorkCompletionError ? r.reason.status : -1
        );
        assert.equal(
          statuses[0],
          WcStatus.RETRY_EXC_ERR,
          "the first outstanding send exhausts its retries",
        );
        assert.ok(
          statuses.slice(1).every((s) =>
            s === WcStatus.WR_FLUSH_ERR || s === WcStatus.RETRY_EXC_ERR
          ),
          `the rest flush: ${statuses}`,
        );
        // the DREQ is lost on the cut link: the CM resends it (~4.8 s apart on RoCE, 15 times)
        // and then reports DISCONNECTED on its own, about 100 s later (measured: 102 s, whether
        // the link came back meanwhile or not). RDMA_FAULT_DREQ_GIVEUP=1 (bench/reliability.sh)
        // waits for that; the suite closes the id instead
        if (DREQ_GIVEUP) {
          const d0 = performance.now();
          await c.id.disconnect({ timeout: 150_000, close: false });
          const disconnectMs = performance.now() - d0;
          const seen = await c.id.waitDisconnected({ timeout: 1 }).then(() => true, () => false);
          assert.ok(seen, `the CM reported DISCONNECTED (waited ${disconnectMs.toFixed(0)} ms)`);
          console.log(
            `fault wire: DISCONNECTED ${disconnectMs.toFixed(0)} ms after rdma_disconnect with ` +
              "the link still cut (the CM gave up resending its DREQ)",
          );
        }
        c.id.close();
        netem("peer", "up");
        console.log(
          `fault wire: link cut detected after ${ms.toFixed(0)} ms (RETRY_EXC_ERR, then ` +
            `${statuses.length - 1} flushed)`,
        );
      } finally {
        netem("peer", "up");
        c.close();
      }
      // the link is back: a new connection delivers again
      const c2 = await client(port, 14);
      try {
        const counts = await stream(c2, 1000);
        assert.equal(counts.inOrder, 1000);
        await c2.id.disconnect({ timeout: 30_000 });
      } finally {
        c2.close();
      }
    } finally {
      clear();
      peer.kill();
    }
  },
  { needs, timeout: 600_000 },
);

deviceTest(
  "fault wire: a peer process killed across the link is noticed in bounded time",
  async () => {
    const peer = spawnPeer("seq-sink.ts", [peerAddress(), "1"]);
    let c: Client | undefined;
    try {
      const { port } = await peer.next((m) => "ready" in m, 120_000) as { port: number };
      c = await client(port, 14, 2);
      await c.qp.send({ wrId: 1, sg: [{ mr: c.mr, offset: 0, length: 8 }] });
      peer.kill();
      await peer.exited;
      const t0 = performance.now();
      const seen = await Promise.race([
        c.id.waitDisconnected({ timeout: 60_000 }).then(() => "DISCONNECTED"),
        (async () => {
          for (let i = 0;; i++) {
            await c!.qp.send({ wrId: 2 + i, sg: [{ mr: c!.mr, offset: 0, length: 8 }] }, {
              timeout: 60_000,
            });
          }
        })().catch((e) => (e as Error).name),
      ]);
      const ms = performance.now() - t0;
      assert.ok(["DISCONNECTED", "WorkCompletionError", "ClosedError"].includes(seen), seen);
      console.log(
        `fault wire: killed peer across the link noticed after ${ms.toFixed(0)} ms (${seen})`,
      );
    } finally {
      c?.close();
      peer.kill();
    }
  },
  { needs, timeout: 300_000 },
);

deviceTest(
  "fault wire: stream keepalive turns a peer cut off without a disconnect into ConnectionResetError",
  async () => {
    const peer = spawnPeer("stream-peer.ts", ["echo", peerAddress(), "1"]);
    try {
      const { port } = await peer.next((m) => "ready" in m, 120_000) as { port: number };
      const conn = await connect({ hostname: peerAddress(), port, timeout: 60_000 });
      try {
        const buf = new Uint8Array(64);
        assert.equal(await conn.write(buf.fill(7)), 64);
        assert.equal(await conn.read(buf, { min: 64 }), 64, "the link works: one echo");
        const idleMs = 1000;
        conn.setKeepAlive(true, idleMs);
        // bounded, so that the link comes back up (finally) whatever happens
        const reading = conn.read(buf, { timeout: 60_000 }).then(() => null, (e: unknown) => e);
        // nothing is in flight and the peer stays silent: only the keepalive probe can fail
        netem("peer", "down");
        const t0 = performance.now();
        const err = await reading;
        const ms = performance.now() - t0;
        assert.ok(err instanceof ConnectionResetError, `the pending read failed with ${err}`);
        // the first probe after one idle period, then at most KEEPALIVE_PROBES periods unanswered
        const bound = (KEEPALIVE_PROBES + 2) * idleMs + 5_000;
        assert.ok(ms < bound, `reported after ${ms.toFixed(0)} ms, more than ${bound} ms`);
        console.log(
          `fault wire: keepalive (idle ${idleMs} ms) reported the cut-off peer after ` +
            `${ms.toFixed(0)} ms: ${(err as Error).message}`,
        );
      } finally {
        netem("peer", "up");
        conn.close();
        await conn.released;
      }
    } finally {
      clear();
      peer.kill();
    }
  },
  { needs, timeout: 300_000 },
);
