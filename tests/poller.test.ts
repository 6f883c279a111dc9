/**
 * Host tests of the poller core, with eventfds (no RDMA device needed).
 */
import assert from "node:assert/strict";
import process from "node:process";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "./harness.ts";
import { native } from "../ffi/native.ts";
import { Poller } from "../poller/poller.ts";
import { AbortedError, ClosedError, InvalidArgumentError } from "../types/errors.ts";

const EFD_NONBLOCK = 0x800;
const n = native();
const cell = n.alloc(8, 8);
const cellView = new DataView(n.arrayBuffer(cell, 8));

function eventfd(): number {
  const fd = n.libc.eventfd(0, EFD_NONBLOCK);
  assert.ok(fd >= 0, "eventfd");
  return fd;
}
function signal(fd: number, value = 1n): void {
  cellView.setBigUint64(0, value, true);
  assert.equal(Number(n.libc.write(fd, cell, 8)), 8);
}
/** Reads the eventfd counter; 0n on EAGAIN. */
function drain(fd: number): bigint {
  if (Number(n.libc.read(fd, cell, 8)) !== 8) return 0n;
  return cellView.getBigUint64(0, true);
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("poller: a write to a watched eventfd wakes readable()", async () => {
  using poller = new Poller();
  const fd = eventfd();
  const watch = poller.register(fd);
  setTimeout(() => signal(fd, 7n), 20);
  await watch.readable({ timeout: 5000 });
  assert.equal(drain(fd), 7n);
  assert.equal(drain(fd), 0n, "drained until EAGAIN");
  assert.equal(poller.pending, 0);
  watch.close();
  n.libc.close(fd);
});

test("poller: readiness that arrived before register or while nobody waited is reported", async () => {
  using poller = new Poller();
  const fd = eventfd();
  signal(fd, 3n);
  const watch = poller.register(fd);
  await watch.readable({ timeout: 5000 });
  assert.equal(drain(fd), 3n);
  // an edge while nothing awaits stays on the ready list until the next wait
  signal(fd, 4n);
  await sleep(30);
  await watch.readable({ timeout: 5000 });
  assert.equal(drain(fd), 4n);
  n.libc.close(fd);
});

test("poller: onReadable callback runs on each edge while the watch is ref'd", async () => {
  using poller = new Poller();
  const fd = eventfd();
  let total = 0n;
  let calls = 0;
  const watch = poller.register(fd, () => {
    calls++;
    for (let v = drain(fd); v !== 0n; v = drain(fd)) total += v;
  });
  watch.ref();
  for (let i = 1; i <= 5; i++) {
    signal(fd, BigInt(i));
    await sleep(15);
  }
  const deadline = Date.now() + 5000;
  while (total < 15n && Date.now() < deadline) await sleep(5);
  assert.equal(total, 15n);
  assert.ok(calls >= 1 && calls <= 5, `calls ${calls}`);
  watch.unref();
  assert.equal(poller.pending, 0);
  n.libc.close(fd);
});

test("poller: timeout and AbortSignal reject with AbortedError and release the wait", async () => {
  using poller = new Poller();
  const fd = eventfd();
  const watch = poller.register(fd);
  const t0 = performance.now();
  await assert.rejects(watch.readable({ timeout: 50 }), AbortedError);
  assert.ok(performance.now() - t0 >= 45);
  const ac = new AbortController();
  const p = watch.readable({ signal: ac.signal });
  assert.equal(poller.pending, 1);
  setTimeout(() => ac.abort(new Error("stop")), 10);
  await assert.rejects(p, (e) => e instanceof AbortedError && /stop/.test(e.message));
  await assert.rejects(watch.readable({ signal: AbortSignal.abort() }), AbortedError);
  assert.equal(poller.pending, 0);
  // the poller still works after cancelled waits
  setTimeout(() => signal(fd), 10);
  await watch.readable({ timeout: 5000 });
  assert.equal(drain(fd), 1n);
  n.libc.close(fd);
});

test("poller: closing a watch or the poller rejects pending waits with ClosedError", async () => {
  const poller = new Poller();
  const a = eventfd();
  const b = eventfd();
  const wa = poller.register(a);
  const wb = poller.register(b);
  assert.throws(() => poller.register(a), InvalidArgumentError);
  const pa = wa.readable();
  wa.close();
  await assert.rejects(pa, ClosedError);
  await assert.rejects(wa.readable(), ClosedError);
  wa.close(); // idempotent
  const pb = wb.readable();
  poller.close();
  await assert.rejects(pb, ClosedError);
  assert.throws(() => poller.register(a), ClosedError);
  poller.close();
  n.libc.close(a);
  n.libc.close(b);
});

test("poller: many fds, each edge delivered to its own watch", async () => {
  using poller = new Poller({ maxEvents: 16 });
  const count = 300;
  const fds = Array.from({ length: count }, eventfd);
  const seen = new Array<bigint>(count).fill(0n);
  const watches = fds.map((fd, i) =>
    poller.register(fd, () => {
      for (let v = drain(fd); v !== 0n; v = drain(fd)) seen[i] += v;
    })
  );
  for (const w of watches) w.ref();
  const order = fds.map((_, i) => i).sort(() => Math.random() - 0.5);
  for (const i of order) signal(fds[i], BigInt(i + 1));
  const deadline = Date.now() + 10_000;
  while (seen.some((v, i) => v !== BigInt(i + 1)) && Date.now() < deadline) await sleep(5);
  assert.deepEqual(seen, fds.map((_, i) => BigInt(i + 1)));
  for (const w of watches) w.close();
  assert.equal(poller.pending, 0);
  assert.equal(poller.size, 0);
  for (const fd of fds) n.libc.close(fd);
});

test("poller: the default poller is shared and recreated after close", () => {
  const p = Poller.default();
  assert.equal(Poller.default(), p);
  assert.match(p.backend, /^(deno-nonblocking|bun-worker)$/);
  p.close();
  const q = Poller.default();
  assert.notEqual(q, p);
  assert.equal(q.closed, false);
});

/** This process's user+system CPU seconds (getrusage; /proc/self/stat needs --allow-all in Deno). */
function cpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

test("poller: an idle wait uses (almost) no CPU for 5 s", async () => {
  using poller = new Poller();
  const fd = eventfd();
  const watch = poller.register(fd);
  const c0 = cpuSeconds();
  const t0 = performance.now();
  await assert.rejects(watch.readable({ timeout: 5000 }), AbortedError);
  const wall = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds() - c0;
  process.stderr.write(
    `idle wait: ${(cpu / wall * 100).toFixed(2)}% of a core over ${wall.toFixed(1)} s\n`,
  );
  assert.ok(cpu / wall < 0.05, `idle CPU ${cpu}s over ${wall}s`); // target < 1%, asserted loosely
  n.libc.close(fd);
});

function runScript(source: string): { status: number | null; ms: number; out: string } {
  const dir = mkdtempSync(join(tmpdir(), "poller-"));
  const file = join(dir, "script.ts");
  writeFileSync(file, source);
  const isBun = "Bun" in globalThis;
  const args = isBun ? [file] : ["run", "-A", file];
  const t0 = performance.now();
  const r = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 20_000 });
  rmSync(dir, { recursive: true });
  return { status: r.status, ms: performance.now() - t0, out: `${r.stdout}${r.stderr}` };
}

const pollerUrl = new URL("../poller/poller.ts", import.meta.url).href;
const nativeUrl = new URL("../ffi/native.ts", import.meta.url).href;

test("poller: a process whose waits ended exits by itself", () => {
  const r = runScript(`
    import { Poller } from "${pollerUrl}";
    import { native } from "${nativeUrl}";
    const fd = native().libc.eventfd(0, 0x800);
    const w = Poller.default().register(fd);
    w.readable({ timeout: 200 }).catch((e) => console.log("ended:", e.name));
    const ac = new AbortController();
    w.readable({ signal: ac.signal }).catch((e) => console.log("ended:", e.name));
    setTimeout(() => ac.abort(), 300);
  `);
  assert.equal(r.status, 0, r.out);
  assert.equal(r.out.match(/ended: AbortedError/g)?.length, 2, r.out);
  assert.ok(r.ms < 15_000);
});

test("poller: a registered fd nobody awaits does not keep the process alive", () => {
  const r = runScript(`
    import { Poller } from "${pollerUrl}";
    import { native } from "${nativeUrl}";
    const fd = native().libc.eventfd(0, 0x800);
    Poller.default().register(fd, () => {});
    console.log("registered");
  `);
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /registered/);
});
