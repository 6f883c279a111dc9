/**
 * Host tests of completion waiting, the WR tracker and event streams, against a simulated CQ
 * whose completion channel is an eventfd (no RDMA device needed). The simulation keeps the
 * verbs rules: one-shot arming, an event only for a completion that lands while armed.
 */
import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { native } from "../ffi/native.ts";
import { now } from "../ffi/clock.ts";
import {
  awaitCompletions,
  CompletionPump,
  completions,
  eventStream,
  nextEvent,
  Poller,
  type Strategy,
  WorkRequestTracker,
} from "../poller/mod.ts";
import {
  cancelCompletionWaits,
  DEFAULT_SPIN_MICROS,
  SpinBudget,
  WakeCost,
} from "../poller/completions.ts";
import { closeWatchesOf } from "../poller/poller.ts";
import { HEAP_BYTES_PER, HEAP_FLAGS, moduleUrl, runScript } from "./script.ts";
import { AbortedError, ClosedError, WorkCompletionError } from "../types/errors.ts";

const n = native();
const cell = n.alloc(8, 8);
const cellView = new DataView(n.arrayBuffer(cell, 8));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Wc {
  wrId: bigint;
  status: number;
  opcode: number;
  byteLen: number;
  qpNum: number;
  vendorErr: number;
  solicited: boolean;
  immData: number;
  wcFlags: number;
}

class FakeChannel {
  readonly fd = n.libc.eventfd(0, 0x800);
  readonly events: FakeCq[] = [];
  acks = 0;
  getEvent(): FakeCq | null {
    const cq = this.events.shift();
    if (cq) {
      this.acks++;
      return cq;
    }
    n.libc.read(this.fd, cell, 8); // reset the counter; the next event writes a new edge
    return null;
  }
  signal(cq: FakeCq): void {
    this.events.push(cq);
    cellView.setBigUint64(0, 1n, true);
    n.libc.write(this.fd, cell, 8);
  }
  close(): void {
    n.libc.close(this.fd);
  }
}

class FakeCq {
  readonly queue: Wc[] = [];
  readonly polled: Wc[] = [];
  armed: "all" | "solicited" | null = null;
  arms = 0;
  polls = 0;
  /** Test hooks run inside the poller's own cycle. */
  afterArm?: () => void;
  afterEmptyPoll?: () => void;
  constructor(readonly channel: FakeChannel | null) {}
  poll(max = 16): number {
    this.polls++;
    const got = this.queue.splice(0, max);
    this.polled.length = 0;
    this.polled.push(...got);
    if (got.length === 0) this.afterEmptyPoll?.();
    return got.length;
  }
  completion(i: number): Wc {
    return this.polled[i];
  }
  requestNotify(solicitedOnly = false): void {
    this.armed = solicitedOnly ? "solicited" : "all";
    this.arms++;
    this.afterArm?.();
  }
  complete(wc: Partial<Wc> & { wrId: bigint }): void {
    const full: Wc = {
      status: 0,
      opcode: 0,
      byteLen: 0,
      qpNum: 1,
      vendorErr: 0,
      solicited: false,
      immData: 0,
      wcFlags: 0,
      ...wc,
    };
    this.queue.push(full);
    if (this.armed === "all" || (this.armed === "solicited" && full.solicited)) {
      this.armed = null;
      this.channel?.signal(this);
    }
  }
}

async function deliverAll(strategy: Strategy, total: number): Promise<void> {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  let produced = 0;
  const producer = (async () => {
    while (produced < total) {
      const burst = 1 + Math.floor(Math.random() * 64);
      for (let i = 0; i < burst && produced < total; i++) cq.complete({ wrId: BigInt(produced++) });
      if (Math.random() < 0.3) await sleep(Math.random() < 0.5 ? 0 : 2);
      else await new Promise((r) => queueMicrotask(() => r(undefined)));
    }
  })();
  let next = 0n;
  for await (const got of completions(cq, { strategy, poller, timeout: 10_000 })) {
    for (let i = 0; i < got; i++) {
      assert.equal(cq.completion(i).wrId, next, "each completion once, in CQ order");
      next++;
    }
    if (next === BigInt(total)) break;
  }
  await producer;
  assert.equal(next, BigInt(total));
  assert.equal(cq.queue.length, 0);
  closeWatchesOf(channel);
  channel.close();
}

for (const strategy of ["event", "adaptive", "busy"] as const) {
  test(`completions (${strategy}): 20,000 in random bursts and gaps, each once, in order`, () =>
    deliverAll(strategy, 20_000));
}

test("completions: a completion landing between arm and drain, or after the drain, still wakes", async () => {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  let next = 0n;
  let wr = 0n;
  // interleave posting with the poller's own cycle
  cq.afterArm = () => {
    if (Math.random() < 0.3) cq.complete({ wrId: wr++ });
  };
  cq.afterEmptyPoll = () => {
    if (Math.random() < 0.3) cq.complete({ wrId: wr++ });
  };
  const timer = setInterval(() => cq.complete({ wrId: wr++ }), 1);
  try {
    while (next < 3000n) {
      const got = await awaitCompletions(cq, { poller, strategy: "event", timeout: 5000 });
      for (let i = 0; i < got; i++) assert.equal(cq.completion(i).wrId, next++);
    }
  } finally {
    clearInterval(timer);
  }
  assert.ok(channel.acks > 0);
  closeWatchesOf(channel);
  channel.close();
});

test("completions: an event wait drains after each arm, and not again while the CQ stays armed", async () => {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  const wait = () => awaitCompletions(cq, { poller, strategy: "event", timeout: 5000 });
  // the first wait: poll, arm, drain (empty), wait; the event: arm again, poll (one)
  let p = wait();
  assert.deepEqual([cq.polls, cq.arms], [2, 1]);
  cq.complete({ wrId: 1n });
  assert.equal(await p, 1);
  assert.deepEqual([cq.polls, cq.arms], [3, 2]);
  // armed since, no event: the wait's own poll is the drain (C's loop polls once, too)
  p = wait();
  assert.deepEqual([cq.polls, cq.arms], [4, 2]);
  cq.complete({ wrId: 2n });
  assert.equal(await p, 1);
  assert.deepEqual([cq.polls, cq.arms], [5, 3]);
  // a completion between that poll and the wait still raises the event (it is armed)
  cq.afterEmptyPoll = () => cq.complete({ wrId: 3n });
  assert.equal(await wait(), 1);
  assert.equal(cq.completion(0).wrId, 3n);
  closeWatchesOf(channel);
  channel.close();
});

test("completions: solicited-only arming wakes only for a solicited completion", async () => {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  let woke = false;
  const p = awaitCompletions(cq, { poller, solicitedOnly: true, timeout: 5000 }).then((got) => {
    woke = true;
    return got;
  });
  await sleep(5);
  assert.equal(cq.armed, "solicited");
  cq.complete({ wrId: 1n });
  await sleep(30);
  assert.equal(woke, false, "an unsolicited completion does not wake a solicited-only wait");
  cq.complete({ wrId: 2n, solicited: true });
  assert.equal(await p, 2);
  assert.deepEqual(cq.polled.map((w) => w.wrId), [1n, 2n]);
  closeWatchesOf(channel);
  channel.close();
});

test("completions: abort, timeout and cancelCompletionWaits settle waits with typed errors", async () => {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  await assert.rejects(awaitCompletions(cq, { poller, timeout: 20 }), AbortedError);
  await assert.rejects(
    awaitCompletions(cq, { poller, strategy: "busy", timeout: 20 }),
    AbortedError,
  );
  const ac = new AbortController();
  const p = awaitCompletions(cq, { poller, signal: ac.signal });
  ac.abort();
  await assert.rejects(p, AbortedError);
  assert.equal(poller.pending, 0);
  const q = awaitCompletions(cq, { poller });
  const it = completions(cq, { poller });
  const r = it.next();
  await sleep(5);
  cancelCompletionWaits(cq);
  await assert.rejects(q, ClosedError);
  assert.deepEqual(await r, { value: undefined, done: true });
  await assert.rejects(awaitCompletions(cq, { poller }), ClosedError);
  assert.equal(poller.pending, 0);
  await assert.rejects(
    awaitCompletions(new FakeCq(null), { poller, strategy: "event" }),
    /needs a CQ created with a completion channel/,
  );
  closeWatchesOf(channel);
  channel.close();
});

test("completions: a wait woken without completions keeps its deadline and names its whole timeout", async () => {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  setTimeout(() => channel.signal(cq), 30); // an event, but nothing to poll
  const t0 = performance.now();
  await assert.rejects(
    awaitCompletions(cq, { poller, strategy: "event", timeout: 120 }),
    (e: Error) =>
      e instanceof AbortedError && /completion wait timed out after 120 ms/.test(e.message),
  );
  const ms = performance.now() - t0;
  assert.ok(ms >= 110 && ms < 2000, `took ${ms} ms`);
  assert.ok(cq.arms >= 2, "re-armed after the empty wake-up");
  closeWatchesOf(channel);
  channel.close();
});

test("completions: busy waiting lets timers run", async () => {
  const cq = new FakeCq(null);
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  setTimeout(() => cq.complete({ wrId: 9n }), 50);
  assert.equal(await awaitCompletions(cq, { strategy: "busy", timeout: 5000 }), 1);
  clearInterval(timer);
  assert.ok(ticks >= 5, `timers ran ${ticks} times while busy-waiting`);
});

test("completions: a spin lasts its budget by the clock, also after a spin that was preempted", async () => {
  const cq = new FakeCq(null);
  const stall = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until) { /* a preempted pass */ }
  };
  // spin 1: its second poll takes 5 ms (the process was preempted there), its third finds the
  // completion; pass-counting spins learnt ~1.7 ms per pass from that and made the next one short
  let polls = 0;
  cq.afterEmptyPoll = () => {
    if (++polls === 2) stall(5);
    if (polls === 2) cq.complete({ wrId: 1n });
  };
  assert.equal(await awaitCompletions(cq, { strategy: "busy", spinMicros: 10_000 }), 1);
  // spin 2: the completion lands 3 ms in; an 8 ms spin catches it without an event-loop turn
  const start = performance.now();
  cq.afterEmptyPoll = () => {
    if (performance.now() - start >= 3) cq.complete({ wrId: 2n });
  };
  let turned = false;
  const timer = setTimeout(() => turned = true, 0);
  assert.equal(await awaitCompletions(cq, { strategy: "busy", spinMicros: 8000 }), 1);
  clearTimeout(timer);
  assert.equal(turned, false, "caught within the spin, before any event-loop turn");
  const ms = performance.now() - start;
  assert.ok(ms >= 3 && ms < 8, `caught 3 ms in: ${ms.toFixed(2)} ms`);
});

test("tracker: promises per wr_id resolve with the record or reject with the WC status", async () => {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  const untracked: bigint[] = [];
  using pump = new CompletionPump(cq, { poller, onUntracked: (wc) => untracked.push(wc.wrId) });
  const ok = pump.track(1n);
  const bad = pump.track(2n);
  const late = pump.track(3n);
  const withImm = pump.track(5n);
  await assert.rejects(pump.track(1n), /already tracked/);
  setTimeout(() => {
    cq.complete({ wrId: 5n, opcode: 129, immData: 0xabcd, wcFlags: 2 });
    cq.complete({ wrId: 7n });
    cq.complete({ wrId: 2n, status: 10, vendorErr: 0x88, qpNum: 42 });
    cq.complete({ wrId: 1n, byteLen: 64, opcode: 128 });
  }, 5);
  const rec = await ok;
  assert.equal(rec.wrId, 1n);
  assert.equal(rec.byteLen, 64);
  assert.equal(rec.opcode, 128);
  assert.equal(rec.immData, undefined, "no WITH_IMM flag: no immediate data");
  const imm = await withImm;
  assert.equal(imm.immData, 0xabcd);
  assert.equal(imm.wcFlags, 2);
  await assert.rejects(bad, (e) => {
    assert.ok(e instanceof WorkCompletionError);
    assert.equal(e.status, 10);
    assert.equal(e.statusName, "IBV_WC_REM_ACCESS_ERR");
    assert.equal(e.vendorErr, 0x88);
    assert.equal(e.wrId, 2n);
    assert.equal(e.qpNum, 42);
    return true;
  });
  assert.deepEqual(untracked, [7n]);
  pump.close();
  await assert.rejects(late, ClosedError);
  await assert.rejects(pump.track(5n), ClosedError);
  await sleep(5);
  assert.equal(poller.pending, 0, "a closed pump stops waiting");
  closeWatchesOf(channel);
  channel.close();
});

test("tracker: an aborted tracked wait is forgotten and the pump stops when idle", async () => {
  using poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  const pump = new CompletionPump(cq, { poller });
  await assert.rejects(pump.track(1n, { timeout: 20 }), AbortedError);
  assert.equal(pump.tracker.pending, 0);
  await sleep(10);
  assert.equal(poller.pending, 0, "nothing pending: the pump no longer waits");
  const t = new WorkRequestTracker();
  const p = t.track(4n);
  t.close();
  await assert.rejects(p, ClosedError);
  closeWatchesOf(channel);
  channel.close();
});

test("event streams: drain until null, then wait for the next edge", async () => {
  using poller = new Poller();
  const fd = n.libc.eventfd(0, 0x800);
  const pending: string[] = [];
  const read = () => pending.shift() ?? null;
  const push = (s: string) => {
    pending.push(s);
    cellView.setBigUint64(0, 1n, true);
    n.libc.write(fd, cell, 8);
  };
  push("a");
  push("b");
  setTimeout(() => push("c"), 10);
  const got: string[] = [];
  for await (const ev of eventStream(fd, read, { poller, timeout: 5000 })) {
    got.push(ev);
    if (got.length === 3) break;
  }
  assert.deepEqual(got, ["a", "b", "c"]);
  assert.equal(poller.size, 0, "the stream's own watch is closed when it ends");
  setTimeout(() => push("d"), 10);
  assert.equal(await nextEvent(fd, read, { poller, timeout: 5000 }), "d");
  await assert.rejects(nextEvent(fd, read, { poller, timeout: 20 }), AbortedError);
  assert.equal(poller.pending, 0);
  n.libc.close(fd);
});

test("completions: closing the poller rejects pending completion waits with ClosedError", async () => {
  const poller = new Poller();
  const channel = new FakeChannel();
  const cq = new FakeCq(channel);
  const p = awaitCompletions(cq, { poller, strategy: "event" });
  await sleep(5);
  poller.close();
  await assert.rejects(p, (e) => e instanceof ClosedError && /Poller/.test(e.message));
  await assert.rejects(awaitCompletions(cq, { poller, strategy: "event" }), ClosedError);
  channel.close();
});

test("SpinBudget: learns from hits, shrinks on misses, probes only answers within reach", () => {
  const wake = new WakeCost();
  wake.note(300); // a wake-up costs about 300 µs here
  const b = new SpinBudget(undefined, 1000, undefined, wake); // probes up to 5,000 µs
  assert.equal(b.micros, DEFAULT_SPIN_MICROS);
  b.hit(300); // a later answer raises the budget at once, with a margin
  assert.ok(b.micros >= 300 && b.micros <= 1000, `after a 300 µs hit: ${b.micros}`);
  const covering = b.micros;
  b.hit(100); // earlier answers lower it slowly
  assert.ok(b.micros < covering && b.micros > 100, `after a 100 µs hit: ${b.micros}`);
  b.miss();
  assert.ok(b.micros < covering, "a miss shrinks it");
  // waits that end far beyond reach (an idle peer) never make a probe
  for (let i = 0; i < 20; i++) {
    b.miss();
    b.late(60_000, b.micros, true);
    assert.ok(b.micros <= covering, `no probe for a 60 ms wait: ${b.micros}`);
  }
  assert.ok(b.micros >= DEFAULT_SPIN_MICROS / 4, "never below the floor");
  // waits that end within reach but later than a wake-up after the spin (a peer that was asleep
  // too, or a slow one): every 4th makes one probe that long
  const seen: number[] = [];
  for (let i = 0; i < 8; i++) {
    b.miss();
    b.late(2400, 20, true);
    seen.push(b.micros);
  }
  assert.equal(seen.filter((m) => m === 3000).length, 2, `two probes of 2,400 × 1.25: ${seen}`);
  b.hit(2000); // a hit beyond the steady maximum is capped
  assert.equal(b.micros, 1000);
  // the misses after it spin up to 1.5x the arrival learnt from it, within the probe limit, and
  // shrink from there back under the maximum
  const after: number[] = [];
  for (let i = 0; i < 6; i++) {
    b.miss();
    after.push(b.micros);
  }
  assert.ok(after[0] > 1000 && after[0] <= 5000, `a miss after a 2,000 µs hit: ${after}`);
  assert.ok(after.every((m, i) => i === 0 || m < after[i - 1]), `then shrinking: ${after}`);
  assert.ok(after[5] <= 1000, `back under the maximum: ${after}`);
  // however late a spin caught its answer, the misses after it spin at most the probe limit
  b.hit(9000);
  b.miss();
  assert.equal(b.micros, 5000, "capped at the probe limit");
  const fixed = new SpinBudget(50);
  fixed.miss();
  fixed.late(100, 50, true);
  fixed.hit(900);
  assert.equal(fixed.micros, 50, "a fixed budget never changes");
});

test("SpinBudget: while most spins hit, it spins at least four wake-ups' worth", () => {
  const wake = new WakeCost();
  assert.equal(wake.micros, Infinity, "no estimate before the first wait");
  const b = new SpinBudget(undefined, 1000, undefined, wake);
  b.hit(40);
  assert.ok(b.micros < 100, `one hit is no conversation yet: ${b.micros}`);
  // slept 200 µs beyond a 50 µs spin: a wake-up costs at most 200 µs here
  b.miss();
  b.late(250, 50, true);
  assert.equal(wake.micros, 200);
  // a wait that ended without sleeping says nothing of wake-ups
  b.late(1300, 1290, false);
  assert.equal(wake.micros, 200);
  for (let i = 0; i < 20; i++) b.hit(40);
  assert.equal(b.micros, 800, "most spins hit: 4 x 200 µs");
  b.miss();
  assert.equal(b.micros, 800, "one miss in a conversation keeps the floor");
  // the floor never exceeds the maximum
  wake.note(10); // (the least of the window)
  const c = new SpinBudget(undefined, 30, undefined, wake);
  for (let i = 0; i < 20; i++) c.hit(5);
  assert.equal(c.micros, 30);
  // misses in a row (an idle or slow peer) end the conversation: the budget shrinks again
  for (let i = 0; i < 10; i++) {
    b.miss();
    b.late(60_000, b.micros, true);
  }
  assert.ok(b.micros < 100, `no floor once most spins miss: ${b.micros}`);
  // waited(): the wait after the recorded miss; only a wait that woke up teaches the wake-up
  const w = new WakeCost();
  const e = new SpinBudget(undefined, 1000, undefined, w);
  e.miss(now() - 3, 1000); // started 3 ms ago (the library's clock), spun 1 ms
  e.waited(); // found its completion when it armed: no wake-up
  assert.equal(w.micros, Infinity);
  e.miss(now() - 3, 1000);
  e.woke();
  e.waited();
  assert.ok(w.micros >= 2000 && w.micros < 2500, `slept ~2 ms beyond the spin: ${w.micros}`);
  e.waited(); // nothing missed since
  assert.ok(w.micros < 2500);
  // the estimate follows the least of the last windows
  for (let i = 0; i < 2 * WakeCost.WINDOW; i++) wake.note(900);
  assert.equal(wake.micros, 900, "an old low sample ages out");
});

test("SpinBudget: learning from hits and misses allocates nothing (Deno's optimized code)", () => {
  const r = runScript(
    `
    import { now } from "${moduleUrl("ffi/clock.ts")}";
    import { SpinBudget } from "${moduleUrl("poller/completions.ts")}";
    const b = new SpinBudget(undefined, 400);
    // what a stream's spin does per message: a hit with the spin's duration, now and then a miss
    // and its wait (a function per message, as there: one loop doing it all inline would measure
    // the interpreter while the compiler replaces the running loop)
    const spin = (i) => {
      const start = now();
      const spun = (now() - start) * 1000 + (i & 7);
      if (i % 3) b.hit(spun);
      else { b.miss(start, spun); b.waited(); }
    };
    const loop = (k) => { for (let i = 0; i < k; i++) spin(i); };
    ${HEAP_BYTES_PER}
    // the least of three: the compiler's tiering can add to a window, never take from it
    let bytes = Infinity;
    for (let r = 0; r < 3; r++) bytes = Math.min(bytes, await heapBytesPer(loop, 200000));
    console.log(JSON.stringify({ bytes }));
  `,
    { v8Flags: HEAP_FLAGS },
  );
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  const { bytes } = JSON.parse(r.lastLine);
  // 11 bytes per step (16 per hit) while micros and #arrival were declared without a value
  assert.ok(bytes < 1, `${bytes} heap bytes per spin learnt from`);
}, {
  // JSC keeps a double in the value itself: a field store never allocates there
  skip: "Bun" in globalThis && "V8's field representations only (JSC holds doubles in the value)",
});
