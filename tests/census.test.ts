/**
 * The census of native objects (ffi/census.ts) on the host: native blocks, prepared calls, bound
 * function pointers, pollers and their watches counted while alive and back to the start once
 * released. The device objects are counted by their common base class; their census over many
 * connections is tests/device/census.test.ts.
 */
import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { nativeCensus } from "../mod.ts";
import { native } from "../ffi/native.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { Poller } from "../poller/poller.ts";

test("native blocks are counted (blocks and bytes) until freed", () => {
  const before = nativeCensus();
  const a = new NativeBlock(100, 64); // rounded up to the alignment: 128 bytes
  const b = NativeBlock.from(new Uint8Array(3)); // 8-byte alignment: 8 bytes
  const mid = nativeCensus();
  assert.equal(mid.blocks - before.blocks, 2);
  assert.equal(mid.bytes - before.bytes, 128 + 8);
  a.free();
  a.free(); // idempotent: counted once
  b.free();
  assert.deepEqual(nativeCensus(), before);
  NativeBlock.with(40, () => {
    assert.equal(nativeCensus().blocks, before.blocks + 1);
  });
  assert.deepEqual(nativeCensus(), before);
});

test("prepared calls are counted until freed; a function pointer is bound once", () => {
  const n = native();
  const self = n.libc.dlopen(null, 2);
  const strlen = n.libc.dlsym(self, n.pointerOf(n.cstringBytes("strlen")))!;
  const spec = { args: ["pointer"], result: "usize", c: "size_t strlen(const char *s)" } as const;
  const text = NativeBlock.from(n.cstringBytes("census"));
  try {
    const first = n.fnPointer(strlen, spec);
    const before = nativeCensus();
    assert.ok((before.objects.FnPointer ?? 0) >= 1);
    // the same function and signature: the same binding, nothing new alive
    assert.equal(n.fnPointer(strlen, spec), first);
    const calls = [1, 2, 3].map(() => n.prepareCall(strlen, spec, [text.ptr]));
    for (const c of calls) assert.equal(Number(c.call()), 6);
    const mid = nativeCensus();
    assert.equal((mid.objects.PreparedCall ?? 0) - (before.objects.PreparedCall ?? 0), 3);
    assert.equal(mid.objects.FnPointer, before.objects.FnPointer, "prepared calls share a binding");
    for (const c of calls) {
      c.free();
      c.free();
    }
    assert.deepEqual(nativeCensus(), before);
  } finally {
    text.free();
  }
});

test("a poller and its watches are counted until closed", async () => {
  const before = nativeCensus();
  const poller = new Poller();
  const n = native();
  const fd = n.libc.eventfd(0, 0o4000 /* EFD_NONBLOCK */);
  try {
    const watch = poller.register(fd);
    const mid = nativeCensus();
    assert.equal((mid.objects.Poller ?? 0) - (before.objects.Poller ?? 0), 1);
    assert.equal((mid.objects.FdWatch ?? 0) - (before.objects.FdWatch ?? 0), 1);
    watch.close();
    assert.equal(nativeCensus().objects.FdWatch, before.objects.FdWatch);
    poller.register(fd); // closed with its poller
  } finally {
    poller.close();
    n.libc.close(fd);
  }
  // the poller's blocks are freed once its waiter has stopped
  for (let i = 0; i < 50 && nativeCensus().blocks !== before.blocks; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.deepEqual(nativeCensus(), before);
});

test("the census is a sorted snapshot without the kinds that have none alive", () => {
  const c = nativeCensus();
  const kinds = Object.keys(c.objects);
  assert.deepEqual(kinds, [...kinds].sort());
  for (const k of kinds) assert.ok(c.objects[k] > 0, k);
  assert.equal(c.total, Object.values(c.objects).reduce((a, b) => a + b, 0));
});
