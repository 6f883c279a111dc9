/**
 * The rsocket wire format and the stream state machine, without a device: two engines joined by
 * an in-memory model of an RC connection (RDMA WRITE [WITH IMMEDIATE] into registered memory
 * checked by address and rkey, inline SENDs into posted receives, RNR retry when no receive is
 * posted, in-order completions), driven with random interleavings. Samples: rsocket's defaults
 * and small rings/queues (wrap-around, credit stalls), both transports' message modes, a
 * simulated big-endian peer; iomap entries (inline and through the ring), riowrite's chunking,
 * unmapped offsets, the ordering of data after direct writes over 30 random rounds, notices.
 */

import assert from "node:assert/strict";
import { test } from "./harness.ts";
import {
  clampQueueDepth,
  decodeConnData,
  encodeConnData,
  iomapEntries,
  RS_CAP_NOTICES,
  RS_CONN_DATA_SIZE,
  RS_CONN_FLAG_IOMAP,
  RS_CONN_FLAG_NET,
  RS_IOMAP_MAX,
  RS_MAX_TRANSFER,
  RS_QP_CTRL_SIZE,
  RsCtrl,
  rsMsg,
  rsMsgData,
  rsMsgOp,
  RSOCKET_DEFAULTS,
  RsOp,
  scaleToValue,
  valueToScale,
} from "../stream/protocol.ts";
import { StreamEngine } from "../stream/_engine.ts";
import {
  type EngineConfig,
  ONE_SIDED_WR_ID,
  receiveBatch,
  receiveMemorySize,
  RECV_WR_ID,
  sendMemorySize,
  type StreamTransport,
  TARGET_MEMORY_SIZE,
  targetMemorySize,
  WR_HIGH_MSG_SEND,
  WR_HIGH_ONE_SIDED,
  WR_HIGH_RECV,
  WR_MSG_SEND,
  WR_RECV,
} from "../stream/_engine-contract.ts";
import { ProtocolError } from "../stream/errors.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { prng } from "./device/peers/stream-data.ts";

// ---------------------------------------------------------------- wire format

test("stream protocol: 32-bit messages", () => {
  assert.equal(rsMsg(RsOp.DATA, 65536), 0x00010000);
  assert.equal(rsMsg(RsOp.SGL, 384), 0x80000180);
  assert.equal(rsMsg(RsOp.CTRL, RsCtrl.DISCONNECT), 0xe0000000);
  assert.equal(rsMsg(RsOp.CTRL, RsCtrl.SHUTDOWN), 0xe0000002);
  assert.equal(rsMsg(RsOp.IOMAP_SGL, 5), 0xc0000005);
  assert.equal(rsMsgOp(0xe0000002), RsOp.CTRL);
  assert.equal(rsMsgData(0xe0000002), RsCtrl.SHUTDOWN);
  assert.equal(rsMsgOp(0x80000180), RsOp.SGL);
  assert.equal(rsMsgData(0x1fffffff), 0x1fffffff);
  assert.equal(rsMsg(RsOp.DATA, 0x3fffffff), 0x1fffffff, "the argument is 29 bits");
});

test("stream wr_ids: the tags are bits of the high half, what is fed back is small", () => {
  assert.equal(WR_MSG_SEND, WR_HIGH_MSG_SEND * 2 ** 32);
  assert.equal(WR_RECV, WR_HIGH_RECV * 2 ** 32);
  assert.equal(ONE_SIDED_WR_ID, WR_HIGH_ONE_SIDED * 2 ** 32);
  // a one-sided id is also "a receive or above" for the dispatch, which checks the larger first
  assert.ok(WR_HIGH_ONE_SIDED > WR_HIGH_RECV && WR_HIGH_RECV > WR_HIGH_MSG_SEND);
});

test("stream protocol: rs_conn_data layout (big-endian fields)", () => {
  const bytes = encodeConnData({
    version: 1,
    flags: 0,
    credits: 384,
    iomapSize: 0,
    targetSgl: { addr: 0x7f12_3456_7000, key: 0x1234, length: 2 },
    dataBuf: { addr: 0x7f12_3450_0000, key: 0xabcd, length: 65536 },
  });
  assert.equal(bytes.length, RS_CONN_DATA_SIZE);
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  assert.equal(
    hex,
    "01" + "00" + "0180" + "000000" + "00" + // version, flags, credits, reserved, iomap size
      "00007f1234567000" + "00001234" + "00000002" + // target SGL
      "00007f1234500000" + "0000abcd" + "00010000", // first data buffer
  );
  const back = decodeConnData(bytes);
  assert.equal(back.credits, 384);
  assert.deepEqual(back.targetSgl, { addr: 0x7f12_3456_7000, key: 0x1234, length: 2 });
  assert.deepEqual(back.dataBuf, { addr: 0x7f12_3450_0000, key: 0xabcd, length: 65536 });
  // transports pad private data: the tail is ignored
  const padded = new Uint8Array(56);
  padded.set(bytes);
  assert.deepEqual(decodeConnData(padded), back);
});

test("stream protocol: malformed connection data is a ProtocolError", () => {
  assert.throws(() => decodeConnData(new Uint8Array(20)), ProtocolError);
  assert.throws(() => decodeConnData(null), ProtocolError);
  const v2 = new Uint8Array(RS_CONN_DATA_SIZE);
  v2[0] = 2;
  assert.throws(() => decodeConnData(v2), /version 2/);
  const huge = new Uint8Array(RS_CONN_DATA_SIZE);
  huge[0] = 1;
  huge[8] = 0xff; // target SGL address above 2^53
  assert.throws(() => decodeConnData(huge), /53 bits/);
});

test("stream protocol: defaults and scales match rsocket", () => {
  assert.deepEqual({ ...RSOCKET_DEFAULTS }, {
    sendBufferSize: 131072,
    receiveBufferSize: 131072,
    sendQueueDepth: 384,
    receiveQueueDepth: 384,
    inlineSize: 64,
  });
  assert.equal(clampQueueDepth(384, 16384), 384);
  assert.equal(clampQueueDepth(4, 16384), 16);
  assert.equal(clampQueueDepth(100000, 1 << 20), 0xfffe);
  assert.equal(clampQueueDepth(384, 256), 256);
  for (const v of [0, 1, 64, 128]) assert.equal(scaleToValue(valueToScale(v)), v);
  assert.equal(scaleToValue(valueToScale(1024)), 1024);
});

// ---------------------------------------------------------------- an in-memory RC connection

interface Region {
  bytes: Uint8Array;
  addr: number;
  key: number;
}

type Wr =
  | {
    kind: "write";
    wrId: number;
    data: Uint8Array | null;
    from: number[];
    raddr: number;
    rkey: number;
    imm: number;
  }
  | { kind: "send"; wrId: number; data: Uint8Array };

interface Wc {
  recv: boolean;
  wrId: number;
  status: number;
  hasImm: boolean;
  imm: number;
}

let nextBase = 0x1000_0000;

class Side implements StreamTransport {
  readonly engine: StreamEngine;
  readonly sendMem: Uint8Array;
  readonly recvMem: Region;
  readonly target: Region;
  readonly sq: Wr[] = [];
  readonly rq: { wrId: number; off: number }[] = [];
  /** Receives held back by the transport (posted in batches, or by postReceives). */
  readonly held: { wrId: number; off: number }[] = [];
  readonly cq: Wc[] = [];
  readonly log: { imm: number; len: number; inline: boolean; wrId?: number }[] = [];
  /** Other registered memory the peer may RDMA-write into (iomapped buffers). */
  readonly regions: Region[] = [];
  peer!: Side;
  maxInFlightCtrl = 0;
  sendInFlight = 0;
  dead = false;

  constructor(readonly name: string, readonly config: EngineConfig) {
    this.sendMem = new Uint8Array(sendMemorySize(config));
    this.recvMem = {
      bytes: new Uint8Array(receiveMemorySize(config)),
      addr: nextBase,
      key: nextBase >>> 12,
    };
    nextBase += 0x1000_0000;
    this.target = {
      bytes: new Uint8Array(targetMemorySize(config)),
      addr: nextBase,
      key: nextBase >>> 12,
    };
    nextBase += 0x1000_0000;
    this.engine = new StreamEngine(config, {
      send: this.sendMem,
      recv: this.recvMem.bytes,
      recvAddr: this.recvMem.addr,
      recvKey: this.recvMem.key,
      target: this.target.bytes,
      targetAddr: this.target.addr,
      targetKey: this.target.key,
    }, this);
  }

  write(
    wrId: number,
    off1: number,
    len1: number,
    off2: number,
    len2: number,
    inline: boolean,
    raddrHigh: number,
    raddrLow: number,
    rkey: number,
    imm: number,
  ): void {
    const raddr = (raddrHigh >>> 0) * 2 ** 32 + (raddrLow >>> 0);
    assert.ok(this.sendInFlight < this.config.sendQueueDepth, `${this.name}: send queue overflow`);
    const total = len1 + len2;
    if (inline) assert.ok(total <= this.config.inlineSize, "inline beyond the granted size");
    if (len1 > 0) {
      assert.ok(off1 + len1 <= this.sendMem.length && off2 + len2 <= this.sendMem.length);
    }
    // inline data is copied when posted; other data is read when the WR executes
    const data = inline ? this.#gather(off1, len1, off2, len2) : null;
    this.sq.push({ kind: "write", wrId, data, from: [off1, len1, off2, len2], raddr, rkey, imm });
    this.sendInFlight++;
    this.log.push({ imm, len: total, inline });
    this.maxInFlightCtrl = Math.max(this.maxInFlightCtrl, this.engine.controlInFlight);
  }

  copy(dst: Uint8Array, to: number, src: Uint8Array, from: number, n: number): void {
    assert.ok(n > 64 && from + n <= src.length && to + n <= dst.length, "copy out of range");
    dst.set(src.subarray(from, from + n), to);
  }

  send(wrId: number, off: number, len: number): void {
    assert.ok(this.sendInFlight < this.config.sendQueueDepth, `${this.name}: send queue overflow`);
    assert.ok(len <= this.config.inlineSize);
    this.sq.push({ kind: "send", wrId, data: this.sendMem.slice(off, off + len) });
    this.sendInFlight++;
    this.maxInFlightCtrl = Math.max(this.maxInFlightCtrl, this.engine.controlInFlight);
  }

  writeDirect(
    wrId: number,
    off1: number,
    len1: number,
    off2: number,
    len2: number,
    inline: boolean,
    raddrHigh: number,
    raddrLow: number,
    rkey: number,
  ): void {
    this.write(wrId, off1, len1, off2, len2, inline, raddrHigh, raddrLow, rkey, -1);
    this.log[this.log.length - 1].wrId = wrId;
  }

  probe(wrId: number): void {
    assert.ok(this.sendInFlight < this.config.sendQueueDepth, `${this.name}: send queue overflow`);
    this.sq.push({
      kind: "write",
      wrId,
      data: null,
      from: [0, 0, 0, 0],
      raddr: 0,
      rkey: 0,
      imm: -1,
    });
    this.sendInFlight++;
    this.maxInFlightCtrl = Math.max(this.maxInFlightCtrl, this.engine.controlInFlight);
  }

  recv(wrId: number, off: number): void {
    assert.ok(wrId >= RECV_WR_ID);
    assert.ok(
      this.rq.length + this.held.length < this.config.receiveQueueDepth,
      `${this.name}: receive queue overflow`,
    );
    // as VerbsTransport: receives without SGE are held back and posted in batches
    if (off >= 0) this.rq.push({ wrId, off });
    else if (this.held.push({ wrId, off }) === receiveBatch(this.config.receiveQueueDepth)) {
      this.postReceives();
    }
  }

  postReceives(): void {
    this.rq.push(...this.held.splice(0));
  }

  #gather(off1: number, len1: number, off2: number, len2: number): Uint8Array {
    const out = new Uint8Array(len1 + len2);
    out.set(this.sendMem.subarray(off1, off1 + len1), 0);
    out.set(this.sendMem.subarray(off2, off2 + len2), len1);
    return out;
  }

  /** Executes up to `max` WRs in order; stops at an RNR (no receive posted at the peer). */
  execute(max: number): number {
    let done = 0;
    while (done < max && this.sq.length > 0) {
      const wr = this.sq[0];
      const needsRecv = wr.kind === "send" || wr.imm >= 0;
      if (needsRecv && this.peer.rq.length === 0) break; // RNR NAK: retried later
      if (wr.kind === "write") {
        const data = wr.data ?? this.#gather(wr.from[0], wr.from[1], wr.from[2], wr.from[3]);
        if (data.length > 0) {
          const region = [this.peer.recvMem, this.peer.target, ...this.peer.regions].find((r) =>
            r.key === wr.rkey
          );
          assert.ok(region, `${this.name}: RDMA WRITE with unknown rkey ${wr.rkey}`);
          const off = wr.raddr - region.addr;
          assert.ok(
            off >= 0 && off + data.length <= region.bytes.length,
            `${this.name}: RDMA WRITE outside the region (${off}+${data.length})`,
          );
          if (region === this.peer.recvMem) {
            assert.ok(
              off + data.length <= this.peer.config.receiveBufferSize,
              "write past the ring",
            );
          }
          region.bytes.set(data, off);
        }
        if (wr.imm >= 0) {
          const r = this.peer.rq.shift()!;
          this.peer.cq.push({ recv: true, wrId: r.wrId, status: 0, hasImm: true, imm: wr.imm });
        }
      } else {
        const r = this.peer.rq.shift()!;
        assert.ok(r.off >= 0, "a SEND needs a receive buffer");
        this.peer.recvMem.bytes.set(wr.data, r.off);
        this.peer.cq.push({ recv: true, wrId: r.wrId, status: 0, hasImm: false, imm: 0 });
      }
      this.sq.shift();
      this.cq.push({ recv: false, wrId: wr.wrId, status: 0, hasImm: false, imm: 0 });
      done++;
    }
    return done;
  }

  /** Polls up to `max` completions into the engine. */
  poll(max: number): number {
    const n = Math.min(max, this.cq.length);
    for (const wc of this.cq.splice(0, n)) {
      if (wc.recv) this.engine.completeRecv(wc.wrId % 2 ** 32, wc.status, wc.hasImm, wc.imm);
      else {
        this.sendInFlight--;
        this.engine.completeSend(Math.floor(wc.wrId / 2 ** 32), wc.wrId % 2 ** 32, wc.status);
      }
    }
    if (n > 0) this.engine.afterCompletions();
    return n;
  }

  /** The QP goes to error: every posted WR completes flushed. */
  flush(): void {
    for (const wr of this.sq.splice(0)) {
      this.cq.push({ recv: false, wrId: wr.wrId, status: 5, hasImm: false, imm: 0 });
    }
    for (const r of this.rq.splice(0)) {
      this.cq.push({ recv: true, wrId: r.wrId, status: 5, hasImm: false, imm: 0 });
    }
  }
}

function config(o: Partial<EngineConfig> = {}): EngineConfig {
  return { ...RSOCKET_DEFAULTS, messageSend: false, ...o };
}

/** Small rings and the smallest queues rsocket allows (16 WRs each way). */
function smallest(messageSend: boolean): EngineConfig {
  return config({
    sendBufferSize: 8192,
    receiveBufferSize: 6144,
    sendQueueDepth: 16,
    receiveQueueDepth: 16,
    messageSend,
  });
}

/** A transport that posts nothing (for the engine's constructor checks). */
const INERT: StreamTransport = {
  write() {},
  send() {},
  recv() {},
  postReceives() {},
  probe() {},
  writeDirect() {},
  copy() {},
};

function pair(ca: EngineConfig, cb: EngineConfig = ca): [Side, Side] {
  const a = new Side("A", ca);
  const b = new Side("B", cb);
  a.peer = b;
  b.peer = a;
  a.engine.postInitialReceives();
  b.engine.postInitialReceives();
  // connect: B accepts A's data, A gets B's in the reply (both as rdma_cm private data)
  const aData = encodeConnData(a.engine.localConnData());
  const bData = encodeConnData(b.engine.localConnData());
  b.engine.establish(decodeConnData(aData));
  a.engine.establish(decodeConnData(bData));
  return [a, b];
}

/** Moves WRs and completions in random steps. */
function step(sides: Side[], rand: () => number): void {
  for (const s of sides) {
    s.execute(1 + Math.floor(rand() * 8));
    s.poll(1 + Math.floor(rand() * 16));
  }
}

/** A byte stream with a known pattern, for checking what arrives. */
function pattern(seed: number, at: number, len: number, out: Uint8Array, off = 0): void {
  for (let i = 0; i < len; i++) out[off + i] = ((at + i) * 31 + seed * 7 + ((at + i) >>> 8)) & 0xff;
}

interface Flow {
  from: Side;
  to: Side;
  seed: number;
  total: number;
  sent: number;
  received: number;
  chunk: Uint8Array;
  chunkAt: number;
  chunkLen: number;
  sizes: () => number;
}

function flow(from: Side, to: Side, seed: number, total: number, sizes: () => number): Flow {
  return {
    from,
    to,
    seed,
    total,
    sent: 0,
    received: 0,
    chunk: new Uint8Array(0),
    chunkAt: 0,
    chunkLen: 0,
    sizes,
  };
}

/** Runs flows until every byte arrived and was checked; returns the steps taken. */
function run(flows: Flow[], sides: Side[], rand: () => number, readMax = 100_000): number {
  const buf = new Uint8Array(readMax);
  const want = new Uint8Array(readMax);
  let steps = 0;
  while (flows.some((f) => f.received < f.total)) {
    assert.ok(++steps < 2_000_000, "no progress");
    for (const f of flows) {
      // writer: one user write at a time, taken as far as the engine accepts it now
      if (f.sent < f.total) {
        if (f.chunkAt === f.chunkLen) {
          f.chunkLen = Math.min(f.total - f.sent, Math.max(1, f.sizes()));
          if (f.chunk.length < f.chunkLen) f.chunk = new Uint8Array(f.chunkLen);
          pattern(f.seed, f.sent, f.chunkLen, f.chunk);
          f.chunkAt = 0;
        }
        const n = f.from.engine.write(f.chunk, f.chunkAt, f.chunkLen - f.chunkAt);
        assert.ok(n >= 0, "the writer may still write");
        f.chunkAt += n;
        f.sent += n;
      }
      // reader: random read sizes
      const max = 1 + Math.floor(rand() * readMax);
      const n = f.to.engine.read(buf, 0, max);
      assert.ok(n >= 0, "no end of stream before everything arrived");
      if (n > 0) {
        pattern(f.seed, f.received, n, want);
        assert.deepEqual(buf.subarray(0, n), want.subarray(0, n), `bytes at ${f.received}`);
        f.received += n;
        f.to.engine.updateCredits();
      }
    }
    step(sides, rand);
  }
  return steps;
}

for (const iwarp of [false, true]) {
  const mode = iwarp ? "iWARP message sends" : "write with immediate";
  test(`stream engine (${mode}): random writes both directions arrive intact`, () => {
    const rand = prng(iwarp ? 7 : 3);
    // small rings and queues: wrap-around, SGL rewrites and credit stalls happen often
    const [a, b] = pair(smallest(iwarp));
    const sizes = () => rand() < 0.3 ? 1 + Math.floor(rand() * 64) : Math.floor(rand() * 20000);
    const flows = [flow(a, b, 1, 400_000, sizes), flow(b, a, 2, 300_000, sizes)];
    run(flows, [a, b], rand, 5000);
    for (const s of [a, b]) {
      assert.ok(s.maxInFlightCtrl <= RS_QP_CTRL_SIZE, "control reserve respected");
      assert.equal(s.engine.failed, false);
    }
  });

  test(`stream engine (${mode}): rsocket defaults, large writes, credits never overrun`, () => {
    const rand = prng(iwarp ? 11 : 5);
    const [a, b] = pair(config({ messageSend: iwarp }));
    const sizes = () => 1 + Math.floor(rand() * (1 << 20));
    run([flow(a, b, 3, 8 << 20, sizes), flow(b, a, 4, 4 << 20, sizes)], [a, b], rand);
    // every data message fits one target SGE and RS_MAX_TRANSFER
    for (const e of a.log) {
      assert.ok(e.len <= RS_MAX_TRANSFER);
      if (e.imm >= 0 && rsMsgOp(e.imm) === RsOp.DATA) assert.equal(rsMsgData(e.imm), e.len);
    }
  });
}

test("stream engine: first exchange looks like rsocket's", () => {
  const [a, b] = pair(config());
  // the first credit check advertises the second half of the ring into target SGL entry 1
  b.engine.updateCredits();
  assert.equal(b.log.length, 1);
  assert.equal(b.log[0].imm >>> 0, rsMsg(RsOp.SGL, 384));
  assert.equal(b.log[0].len, 16);
  assert.equal(b.log[0].inline, true);
  const wr = b.sq[0] as Extract<Wr, { kind: "write" }>;
  assert.equal(wr.raddr, a.target.addr + 16);
  assert.equal(wr.rkey, a.target.key);
  b.execute(1);
  const v = new DataView(a.target.bytes.buffer);
  assert.equal(Number(v.getBigUint64(16, true)), b.recvMem.addr + 65536);
  assert.equal(v.getUint32(24, true), b.recvMem.key);
  assert.equal(v.getUint32(28, true), 65536);
  // small writes go inline, larger ones from the send ring; the immediate is DATA | length
  assert.equal(a.engine.write(new Uint8Array(64), 0, 64), 64);
  assert.equal(a.engine.write(new Uint8Array(65), 0, 65), 65);
  assert.deepEqual(a.log.slice(-2), [
    { imm: 64, len: 64, inline: true },
    { imm: 65, len: 65, inline: false },
  ]);
  assert.equal(a.engine.sendCredits, 382);
  assert.equal(a.engine.sendBufferFree, 131072 - 129);
});

test("stream engine: the sender stops at zero credits and resumes on the grant", () => {
  const c = config({ receiveQueueDepth: 16 });
  const [a, b] = pair(c);
  const one = new Uint8Array(100);
  let sent = 0;
  while (a.engine.write(one, 0, 100) === 100) {
    sent++;
    a.execute(100);
    a.poll(100);
    b.poll(100); // B's credit checks run when it polls
    b.execute(100);
    a.poll(100);
  }
  assert.equal(sent, 16, "exactly the peer's receive queue depth");
  assert.equal(a.engine.sendCredits, 0);
  assert.equal(a.engine.canSend(), false);
  // B reads 8 messages: half the queue → a credit grant of rseqNo + 16
  const buf = new Uint8Array(100);
  for (let i = 0; i < 8; i++) assert.equal(b.engine.read(buf, 0, 100), 100);
  b.engine.updateCredits();
  const grant = b.log.at(-1)!;
  assert.equal(rsMsgOp(grant.imm), RsOp.SGL);
  assert.equal(rsMsgData(grant.imm), 8 + 16);
  b.execute(100);
  a.poll(100);
  assert.equal(a.engine.sendCredits, 8);
});

test("stream engine: one-way bulk over the smallest queues never starves the control path", () => {
  // A only writes, B only reads: B's grants and ring advertisements are control messages that
  // take A's receives, which A re-posts (held back in batches) while it never grants credits
  // itself; the batch must fit the queue or A's receives run out and both ends wait forever
  for (const messageSend of [false, true]) {
    const rand = prng(messageSend ? 13 : 17);
    const [a, b] = pair(smallest(messageSend));
    const steps = run([flow(a, b, 5, 1 << 20, () => 1 + Math.floor(rand() * 40000))], [a, b], rand);
    assert.ok(steps > 0);
    assert.equal(a.engine.failed, false);
  }
});

test("stream engine: receive rings that cross a 4 GiB boundary (the address words carry)", () => {
  // the peers' memory placed so that each receive ring straddles a multiple of 2^32: the
  // engine advances a target entry's address by its two 32-bit words
  const saved = nextBase;
  nextBase = 5 * 2 ** 32 - 3000;
  try {
    const rand = prng(13);
    const c = config({ sendBufferSize: 8192, receiveBufferSize: 6144, messageSend: false });
    const [a, b] = pair(c);
    assert.ok(a.recvMem.addr < 5 * 2 ** 32 && a.recvMem.addr + 6144 > 5 * 2 ** 32);
    const sizes = () => 1 + Math.floor(rand() * 5000);
    run([flow(a, b, 21, 200_000, sizes), flow(b, a, 22, 100_000, sizes)], [a, b], rand, 5000);
    assert.equal(a.engine.failed || b.engine.failed, false);
  } finally {
    nextBase = saved;
  }
});

test("stream engine: closeWrite gives the peer end of stream after the last byte", () => {
  const [a, b] = pair(config());
  const rand = prng(9);
  const data = new Uint8Array(200_000);
  pattern(5, 0, data.length, data);
  let off = 0;
  const got: number[] = [];
  const buf = new Uint8Array(70_000);
  let eof = false;
  let ctrlPosted = false;
  while (!eof) {
    if (off < data.length) off += a.engine.write(data, off, data.length - off);
    else if (!ctrlPosted) {
      const ctrl = a.engine.shutdown("write");
      assert.equal(ctrl, RsCtrl.SHUTDOWN);
      assert.equal(a.engine.write(data, 0, 1), -1, "no writes after closeWrite");
      ctrlPosted = a.engine.postControl(ctrl);
    }
    const n = b.engine.read(buf, 0, 1 + Math.floor(rand() * buf.length));
    if (n > 0) {
      for (let i = 0; i < n; i++) got.push(buf[i]);
      b.engine.updateCredits();
    } else if (n < 0) eof = true;
    step([a, b], rand);
  }
  assert.equal(got.length, data.length);
  assert.ok(got.every((v, i) => v === data[i]));
  assert.equal(b.engine.readable, false);
  assert.equal(b.engine.writable, true, "the peer can still answer");
  // the answer still flows the other way, then B's shutdown disconnects both
  assert.equal(b.engine.write(new Uint8Array([1, 2, 3]), 0, 3), 3);
  assert.equal(b.engine.shutdown("write"), RsCtrl.DISCONNECT);
  assert.ok(b.engine.postControl(RsCtrl.DISCONNECT));
  for (let i = 0; i < 20; i++) step([a, b], rand);
  assert.equal(a.engine.read(buf, 0, 10), 3);
  assert.equal(a.engine.read(buf, 0, 10), -1);
  assert.equal(a.engine.disconnected, true);
  assert.equal(b.engine.disconnected, true);
  assert.ok(a.engine.allSendsDone() && b.engine.allSendsDone());
});

test("stream engine: a big-endian peer gets its SGL entries and messages in its order", () => {
  for (const iwarp of [false, true]) {
    const rand = prng(13);
    const little = config({ messageSend: iwarp, receiveBufferSize: 8192, receiveQueueDepth: 16 });
    const big = { ...little, bigEndian: true };
    const [a, b] = pair(little, big);
    assert.equal(b.engine.localConnData().flags & RS_CONN_FLAG_NET, RS_CONN_FLAG_NET);
    const sizes = () => 1 + Math.floor(rand() * 5000);
    run([flow(a, b, 6, 100_000, sizes), flow(b, a, 8, 100_000, sizes)], [a, b], rand, 3000);
    // B's target SGL holds big-endian SGEs written by A
    const v = new DataView(b.target.bytes.buffer);
    const addr = Number(v.getBigUint64(0, false));
    assert.ok(addr >= a.recvMem.addr && addr <= a.recvMem.addr + 8192, `addr ${addr.toString(16)}`);
  }
});

test("stream engine: a failed send or a flushed receive fails the stream, data stays readable", () => {
  const [a, b] = pair(config());
  assert.equal(a.engine.write(new Uint8Array(1000).fill(7), 0, 1000), 1000);
  a.execute(10);
  b.poll(10);
  assert.equal(b.engine.bufferedBytes, 1000);
  b.flush(); // the peer vanished: B's QP is flushed
  b.poll(1000);
  assert.equal(b.engine.failed, true);
  assert.equal(b.engine.connected, false);
  const buf = new Uint8Array(2000);
  assert.equal(b.engine.read(buf, 0, 2000), 1000);
  assert.equal(b.engine.read(buf, 0, 2000), -1);
  assert.equal(b.engine.write(buf, 0, 1), -1);
  // a send failing while connected
  const [c, d] = pair(config());
  c.engine.write(new Uint8Array(10), 0, 10);
  const wr = c.sq.shift()!;
  c.sendInFlight--;
  c.engine.completeSend(Math.floor(wr.wrId / 2 ** 32), wr.wrId % 2 ** 32, 12 /* RETRY_EXC_ERR */);
  assert.equal(c.engine.failed, true);
  assert.equal(c.engine.errorStatus, 12);
  void d;
});

test("stream engine: a reset after an orderly disconnect changes nothing", () => {
  const [a, b] = pair(config());
  assert.ok(a.engine.postControl(a.engine.shutdown("both")));
  a.execute(10);
  b.poll(10);
  a.poll(10);
  assert.equal(a.engine.disconnected, true);
  assert.equal(b.engine.disconnected, true);
  b.engine.reset();
  assert.equal(b.engine.failed, false);
  const buf = new Uint8Array(1);
  assert.equal(b.engine.read(buf, 0, 1), -1);
});

test("stream engine: options below rsocket's floors are refused", () => {
  const mem = () => ({
    send: new Uint8Array(1 << 18),
    recv: new Uint8Array(1 << 18),
    recvAddr: 0x1000,
    recvKey: 1,
    target: new Uint8Array(TARGET_MEMORY_SIZE),
    targetAddr: 0x2000,
    targetKey: 2,
  });
  const t = INERT;
  assert.throws(
    () => new StreamEngine(config({ sendBufferSize: 1000 }), mem(), t),
    InvalidArgumentError,
  );
  assert.throws(
    () => new StreamEngine(config({ receiveBufferSize: 1001 }), mem(), t),
    InvalidArgumentError,
  );
  assert.throws(
    () => new StreamEngine(config({ sendQueueDepth: 4 }), mem(), t),
    InvalidArgumentError,
  );
  assert.throws(
    () => new StreamEngine(config({ messageSend: true, inlineSize: 0 }), mem(), t),
    /inline/,
  );
});

// ---------------------------------------------------------------- iomap (riomap / riowrite)

test("stream protocol: connection data carries the iomap flag, its scaled size, our capabilities", () => {
  const [a] = pair(config({ iomapSize: 1 }));
  const cd = a.engine.localConnData();
  assert.equal(cd.flags & RS_CONN_FLAG_IOMAP, RS_CONN_FLAG_IOMAP, "rsocket always sets it");
  assert.equal(cd.iomapSize, 1);
  assert.equal(cd.capabilities, RS_CAP_NOTICES);
  const bytes = encodeConnData(cd);
  assert.equal(bytes[1], RS_CONN_FLAG_IOMAP);
  assert.equal(bytes[4], RS_CAP_NOTICES, "the first reserved byte");
  assert.equal(bytes[7], 1);
  assert.deepEqual(decodeConnData(bytes), { ...cd, tag: 0 });
  // the connection tag in reserved bytes 5-6, big-endian
  const tagged = encodeConnData({ ...cd, tag: 0xbeef });
  assert.deepEqual([tagged[5], tagged[6]], [0xbe, 0xef]);
  assert.equal(decodeConnData(tagged).tag, 0xbeef);
  // C rsocket's data (reserved bytes zero) decodes with no capabilities and no tag
  bytes[4] = 0;
  assert.equal(decodeConnData(bytes).capabilities, 0);
  assert.equal(decodeConnData(bytes).tag, 0);
  // rsocket's RDMA_IOMAPSIZE rounding: exact to 128, then multiples of 256, at most 0x7f00
  assert.deepEqual([0, 1, 128, 129, 255, 256, 1000, 40000].map(iomapEntries), [
    0,
    1,
    128,
    128,
    128,
    256,
    768,
    RS_IOMAP_MAX,
  ]);
  assert.equal(valueToScale(768), 0x83);
  const mem = {
    send: new Uint8Array(1 << 18),
    recv: new Uint8Array(1 << 18),
    recvAddr: 0x1000,
    recvKey: 1,
    target: new Uint8Array(1 << 16),
    targetAddr: 0x2000,
    targetKey: 2,
  };
  const t = INERT;
  assert.throws(() => new StreamEngine(config({ iomapSize: 129 }), mem, t), /iomapSize/);
  assert.throws(
    () => new StreamEngine(config({ iomapSize: 768 }), { ...mem, target: new Uint8Array(64) }, t),
    /target memory/,
  );
});

/** Registers `len` bytes of `side`'s memory the peer may RDMA-write into. */
function region(side: Side, len: number): Region {
  const r = { bytes: new Uint8Array(len), addr: nextBase, key: nextBase >>> 12 };
  nextBase += 0x1000_0000;
  side.regions.push(r);
  return r;
}

/** Runs both sides until nothing moves. */
function settle(sides: Side[]): void {
  for (let moved = true; moved;) {
    moved = false;
    for (const s of sides) if (s.execute(1000) + s.poll(1000) > 0) moved = true;
  }
}

for (const iwarp of [false, true]) {
  const mode = iwarp ? "iWARP message sends" : "write with immediate";
  for (const inline of [64, 0]) {
    test(`stream engine iomap (${mode}, inline ${inline}): riomap entry, then riowrite lands`, () => {
      const c = config({ iomapSize: 1, messageSend: iwarp, inlineSize: Math.max(inline, 4) });
      const [a, b] = pair(c);
      settle([a, b]);
      assert.equal(a.engine.remoteIomapSize, 1);
      // A maps 100 KB of its memory at offset 5000 into B's table (entry 0)
      const buf = region(a, 100_000);
      const before = a.engine.sendCredits;
      a.engine.queueIomap(0, 5000, buf.addr, buf.key, buf.bytes.length);
      assert.equal(a.engine.iomapPending, false, "sent at once: a send was possible");
      assert.equal(a.engine.sendCredits, before - 1, "an iomap update takes a credit");
      const upd = a.log.at(-1)!;
      assert.equal(upd.len, 24);
      assert.equal(upd.inline, c.inlineSize >= 24, "inline when the QP allows 24 bytes");
      settle([a, b]);
      assert.deepEqual(b.engine.iomaps.entry(0), {
        offset: 5000,
        addr: buf.addr,
        key: buf.key,
        length: 100_000,
      });
      assert.ok(a.engine.allSendsDone());
      assert.equal(a.engine.sendBufferFree, c.sendBufferSize, "the 24 ring bytes came back");
      // B writes 300,000 bytes? No: only what is mapped. 80,000 bytes at offset 10,000
      const data = new Uint8Array(80_000);
      pattern(4, 0, data.length, data);
      const sqeBefore = b.engine.sendWrsFree;
      const credits = b.engine.sendCredits;
      let done = 0;
      let first = true;
      while (done < data.length) {
        const n = b.engine.ioWrite(data, done, data.length - done, 10_000 + done, first ? 2048 : 0);
        assert.ok(n >= 0);
        first = false;
        done += n;
        settle([a, b]);
      }
      assert.equal(b.engine.sendCredits, credits, "direct writes take no credit");
      assert.equal(b.engine.sendWrsFree, sqeBefore);
      assert.deepEqual(buf.bytes.subarray(5000, 85_000), data, "the bytes landed where mapped");
      assert.ok(buf.bytes.subarray(0, 5000).every((x) => x === 0));
      const sizes = b.log.filter((l) => l.wrId !== undefined && rsMsgOp(l.wrId) === RsOp.WRITE)
        .map((l) => l.len);
      assert.deepEqual(
        sizes,
        [2048, 4096, 8192, 16384, 32768, 16512],
        "riowrite's chunks double from 2 KiB (the last is what is left)",
      );
      assert.ok(b.log.every((l) => l.wrId === undefined || l.imm === -1), "no immediate");
      // offsets outside the mapping: -2, nothing taken
      assert.equal(b.engine.ioWrite(data, 0, 10, 4999, 2048), -2);
      assert.equal(b.engine.ioWrite(data, 0, 10, 105_000, 2048), -2);
      // a write running past the end of the entry stops there
      assert.equal(b.engine.ioWrite(data, 0, 100, 104_950, 2048), 50);
      assert.equal(b.engine.iomaps.find(104_999), 0);
      assert.equal(b.engine.iomaps.find(105_000), -1);
      // A clears the entry (length 0): B can no longer write there
      settle([a, b]);
      a.engine.queueIomap(0, 0, 0, 0, 0);
      settle([a, b]);
      assert.equal(b.engine.iomaps.entry(0), null);
      assert.equal(b.engine.ioWrite(data, 0, 10, 10_000, 2048), -2);
      assert.ok(a.engine.allSendsDone() && b.engine.allSendsDone());
      assert.equal(b.engine.sendBufferFree, c.sendBufferSize);
      assert.equal(a.engine.failed || b.engine.failed, false);
    });
  }

  test(`stream engine iomap (${mode}): data written after an iowrite arrives after it`, () => {
    const rand = prng(iwarp ? 21 : 23);
    const c = config({ iomapSize: 2, messageSend: iwarp, sendBufferSize: 16384 });
    const [a, b] = pair(c);
    const buf = region(a, 1 << 16);
    a.engine.queueIomap(1, 0, buf.addr, buf.key, buf.bytes.length);
    settle([a, b]);
    const src = new Uint8Array(1 << 16);
    const out = new Uint8Array(8);
    for (let round = 1; round <= 30; round++) {
      // B: write a random part of the buffer directly, then the range as an 8-byte message
      const off = Math.floor(rand() * 60_000);
      const len = 1 + Math.floor(rand() * (src.length - off));
      src.fill(round & 0xff, 0, len);
      let done = 0;
      let first = true;
      while (done < len) {
        const n = b.engine.ioWrite(src, done, len - done, off + done, first ? 2048 : 0);
        assert.ok(n >= 0, `round ${round}`);
        first = false;
        done += n;
        step([a, b], rand);
      }
      const msg = new Uint8Array(8);
      new DataView(msg.buffer).setUint32(0, off, true);
      new DataView(msg.buffer).setUint32(4, len, true);
      for (let w = 0; w < 8;) {
        w += b.engine.write(msg, w, 8 - w);
        step([a, b], rand);
      }
      // A: when the message is there, the bytes it names are there too
      let got = 0;
      while (got < 8) {
        const n = a.engine.read(out, got, 8 - got);
        if (n > 0) {
          got += n;
          a.engine.updateCredits();
        }
        step([a, b], rand);
      }
      const v = new DataView(out.buffer);
      const [o, l] = [v.getUint32(0, true), v.getUint32(4, true)];
      assert.deepEqual([o, l], [off, len]);
      assert.ok(buf.bytes.subarray(o, o + l).every((x) => x === (round & 0xff)), `round ${round}`);
    }
  });

  test(`stream engine iomap (${mode}): an entry queued without credits goes before later data`, () => {
    const c = config({ iomapSize: 1, messageSend: iwarp, receiveQueueDepth: 16 });
    const [a, b] = pair(c);
    settle([a, b]);
    // use up A's credits: B does not read
    const one = new Uint8Array(10);
    while (a.engine.write(one, 0, 10) === 10) settle([a, b]);
    assert.equal(a.engine.sendCredits, 0);
    const buf = region(a, 4096);
    a.engine.queueIomap(0, 0, buf.addr, buf.key, 4096);
    assert.equal(a.engine.iomapPending, true, "no credit: queued");
    assert.equal(a.engine.write(one, 0, 10), 0, "data waits behind the queued entry");
    settle([a, b]);
    assert.equal(b.engine.iomaps.entry(0), null);
    // B reads: credits come back; A's next write sends the entry first
    const rd = new Uint8Array(1000);
    while (b.engine.read(rd, 0, rd.length) > 0) b.engine.updateCredits();
    settle([a, b]);
    const n = a.engine.write(one, 0, 10);
    assert.equal(n, 10);
    assert.equal(a.engine.iomapPending, false);
    const kinds = a.log.slice(-2).map((l) => rsMsgOp(l.imm >= 0 ? l.imm : 0));
    if (!iwarp) assert.deepEqual(kinds, [RsOp.IOMAP_SGL, RsOp.DATA]);
    settle([a, b]);
    assert.deepEqual(b.engine.iomaps.entry(0), {
      offset: 0,
      addr: buf.addr,
      key: buf.key,
      length: 4096,
    });
  });

  test(`stream engine iomap (${mode}): a big-endian peer's table gets entries in its order`, () => {
    const little = config({ iomapSize: 1, messageSend: iwarp });
    const [a, b] = pair(little, { ...little, bigEndian: true });
    const buf = region(a, 4096);
    a.engine.queueIomap(0, 0x1234_5678_9a, buf.addr, buf.key, 4096);
    settle([a, b]);
    const v = new DataView(b.target.bytes.buffer, TARGET_MEMORY_SIZE);
    assert.equal(Number(v.getBigUint64(0, false)), 0x1234_5678_9a);
    assert.equal(Number(v.getBigUint64(8, false)), buf.addr);
    assert.equal(v.getUint32(16, false), buf.key);
    assert.equal(v.getUint32(20, false), 4096);
    assert.deepEqual(b.engine.iomaps.entry(0), {
      offset: 0x1234_5678_9a,
      addr: buf.addr,
      key: buf.key,
      length: 4096,
    });
    // B (big-endian) maps into A's table: A reads it in its own order
    const bb = region(b, 100);
    b.engine.queueIomap(0, 7, bb.addr, bb.key, 100);
    settle([a, b]);
    assert.deepEqual(a.engine.iomaps.entry(0), {
      offset: 7,
      addr: bb.addr,
      key: bb.key,
      length: 100,
    });
  });

  test(`stream engine iomap (${mode}): notices reach a peer of this library, credits return`, () => {
    const c = config({ messageSend: iwarp, receiveQueueDepth: 16 });
    const [a, b] = pair(c);
    settle([a, b]);
    // notices before anyone listens are kept
    assert.equal(a.engine.queueNotice(0xfffffff), true);
    settle([a, b]);
    assert.deepEqual(b.engine.takeNotices(), [0xfffffff]);
    assert.deepEqual(b.engine.takeNotices(), []);
    const seen: number[] = [];
    b.engine.onNotice = (arg) => seen.push(arg);
    // many more notices than credits: each one's credit comes back
    for (let i = 1; i <= 100; i++) {
      assert.equal(a.engine.queueNotice(i), true);
      settle([a, b]);
      a.engine.flushIomaps();
      settle([a, b]);
    }
    assert.deepEqual(seen, Array.from({ length: 100 }, (_, i) => i + 1));
    assert.equal(a.engine.iomapPending, false);
    assert.ok(a.engine.sendCredits > 0, "credits were granted back");
    assert.ok(a.engine.allSendsDone());
    assert.equal(a.engine.sendBufferFree, c.sendBufferSize);
    assert.equal(a.engine.sendWrsFree, c.sendQueueDepth - RS_QP_CTRL_SIZE);
    // a peer without the capability (C rsocket sends 0) gets none
    const [x, y] = pair(c);
    const cd = encodeConnData({ ...y.engine.localConnData(), capabilities: 0 });
    const z = new Side("Z", c);
    z.peer = x;
    z.engine.establish(decodeConnData(cd));
    assert.equal(z.engine.queueNotice(1), false);
  });
}
