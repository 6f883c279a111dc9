/**
 * What a wait costs besides the wake-up itself, on the host (no RDMA device):
 *
 * 1. a WaitList wait alone (promise, list entry, deadline entry, abort listener): add, resolve,
 *    await — per option set;
 * 2. the same with the poller holding its waiter while the wait is pending (what every fd or
 *    completion wait does): adds the waiter's `want(true)`/`want(false)` per wait;
 * 3. a whole self-signalled wait through the poller (write the eventfd, await `readable()`,
 *    drain), per waiter kind: the wake through the runtime's event loop plus all of the above;
 * 4. a `cq.wait()`-style event wait (`awaitCompletions`, strategy "event", with a timeout) on a
 *    simulated CQ whose completion channel is an eventfd: arm, poll, wait, wake, poll.
 *
 * Every item runs once per round, rounds interleaved; prints the median and range per wait.
 *
 *   deno run -A bench/wakeup-cost.ts [rounds=5]      bun bench/wakeup-cost.ts [rounds=5]
 */
import process from "node:process";
import { native } from "../ffi/native.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { useWaiter, waiterKinds } from "../ffi/wait.ts";
import { awaitCompletions, Poller, WaitList, type WaitOptions } from "../poller/mod.ts";
import { closeWatchesOf } from "../poller/poller.ts";
import { numberArg, runtimeName } from "./wakeup-lib.ts";

const rounds = numberArg(0, 5);
const n = native();
const EFD_NONBLOCK = 0x800;
const cell = new NativeBlock(8, 8);
cell.view.setBigUint64(0, 1n, true);
const signal = (fd: number) => n.libc.write(fd, cell.ptr, 8);
const drain = (fd: number) => {
  while (Number(n.libc.read(fd, cell.ptr, 8)) === 8) { /* until EAGAIN */ }
  cell.view.setBigUint64(0, 1n, true);
};

interface Item {
  name: string;
  unit: "ns" | "µs";
  count: number;
  body: () => Promise<void>;
  close?: () => void;
  times: number[];
}
const items: Item[] = [];
function item(name: string, unit: "ns" | "µs", count: number, body: () => Promise<void>) {
  const it: Item = { name, unit, count, body, times: [] };
  items.push(it);
  return it;
}

const ac = new AbortController();
const optionSets: Array<[string, WaitOptions | undefined]> = [
  ["no options", undefined],
  ["timeout", { timeout: 60_000 }],
  ["signal", { signal: ac.signal }],
  ["signal + timeout", { signal: ac.signal, timeout: 60_000 }],
];

// 1. the WaitList alone
for (const [name, options] of optionSets) {
  const list = new WaitList();
  item(`1. WaitList add+resolve+await, ${name}`, "ns", 100_000, () => {
    const p = list.add(options);
    list.resolveAll();
    return p;
  });
}

// 2. + the poller's hold (waiter want(true)/want(false) per wait), per waiter kind
for (const kind of waiterKinds()) {
  useWaiter(kind);
  const poller = new Poller();
  useWaiter();
  const list = new WaitList(poller);
  item(`2. + poller hold [${poller.backend}]`, "ns", 20_000, () => {
    const p = list.add();
    list.resolveAll();
    return p;
  }).close = () => poller.close();
}

// 3. a whole self-signalled wait through the poller, per waiter kind
for (const kind of waiterKinds()) {
  for (const [name, options] of [optionSets[0], optionSets[1]]) {
    useWaiter(kind);
    const poller = new Poller();
    useWaiter();
    const fd = n.libc.eventfd(0, EFD_NONBLOCK);
    const watch = poller.register(fd);
    item(`3. self-signalled poller wait [${poller.backend}], ${name}`, "µs", 5_000, async () => {
      signal(fd);
      await watch.readable(options);
      drain(fd);
    }).close = () => {
      watch.close();
      poller.close();
      n.libc.close(fd);
    };
  }
}

// 4. a cq.wait()-style event wait on a simulated CQ
class Channel {
  readonly fd = n.libc.eventfd(0, EFD_NONBLOCK);
  events: object[] = [];
  getEvent(): object | null {
    const e = this.events.pop();
    if (e) return e;
    drain(this.fd);
    return null;
  }
}
class Cq {
  queued = 0;
  armed = false;
  constructor(readonly channel: Channel) {}
  poll(): number {
    const got = this.queued;
    this.queued = 0;
    return got;
  }
  requestNotify(): void {
    this.armed = true;
  }
  complete(): void {
    this.queued++;
    if (this.armed) {
      this.armed = false;
      this.channel.events.push(this);
      signal(this.channel.fd);
    }
  }
}
for (const kind of waiterKinds()) {
  useWaiter(kind);
  const poller = new Poller();
  useWaiter();
  const channel = new Channel();
  const cq = new Cq(channel);
  item(`4. cq.wait()-style event wait [${poller.backend}]`, "µs", 5_000, async () => {
    const p = awaitCompletions(cq, { strategy: "event", timeout: 60_000, poller });
    cq.complete();
    await p;
  }).close = () => {
    closeWatchesOf(channel);
    poller.close();
    n.libc.close(channel.fd);
  };
}

// interleaved rounds: every item once per round
for (let r = 0; r < rounds; r++) {
  for (const it of items) {
    const t0 = performance.now();
    for (let i = 0; i < it.count; i++) await it.body();
    it.times.push((performance.now() - t0) / it.count);
  }
}
for (const it of items) it.close?.();

const scale = (it: Item, ms: number) => it.unit === "ns" ? ms * 1e6 : ms * 1e3;
const digits = (it: Item) => it.unit === "ns" ? 0 : 2;
console.log(
  `${runtimeName}: cost of a wait besides the wake-up, per wait: median (range) of ${rounds} ` +
    `interleaved rounds`,
);
for (const it of items) {
  const xs = it.times.map((t) => scale(it, t)).sort((a, b) => a - b);
  const d = digits(it);
  console.log(
    `${it.name.padEnd(58)} ${xs[xs.length >> 1].toFixed(d).padStart(8)} ${it.unit}` +
      `  (${xs[0].toFixed(d)}–${xs[xs.length - 1].toFixed(d)})`,
  );
}
process.exit(0);
