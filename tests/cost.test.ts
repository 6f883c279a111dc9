/**
 * Operation cost counting (ffi/cost.ts), in a child process of the running runtime because
 * counting is chosen when the library loads: with `RDMA_VERBS_COUNT=1` every FFI call is counted
 * under its symbol (a prepared call under its op's name), without it nothing is; and in Deno a
 * count allocates (next to) nothing, so that the bench's heap rows are the library's own.
 */
import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { HEAP_BYTES_PER, HEAP_FLAGS, moduleUrl, runScript } from "./script.ts";

interface Counted {
  counting: boolean;
  calls: Record<string, number>;
  ffiCalls: number;
  bytesPerCall: number | null;
}

/** Runs the probe with `RDMA_VERBS_COUNT` set to `count`. */
function probe(count: "0" | "1"): Counted {
  const r = runScript(
    `
    import { native } from "${moduleUrl("ffi/native.ts")}";
    import { costCounts, COUNTING, resetCostCounts } from "${moduleUrl("ffi/cost.ts")}";
    const n = native();
    const abs = n.libc.dlsym(n.libc.dlopen(null, 2), n.pointerOf(n.cstringBytes("abs")));
    const p = n.prepareCall(abs, { args: ["i32"], result: "i32", c: "int abs(int j)" }, [-7]);
    const events = n.alloc(16);
    // epoll_wait on no epoll fd: EINVAL at once
    const loop = (k) => { let x = 0; for (let i = 0; i < k; i++) x += p.call() + n.libc.epoll_wait(-1, events, 0, 0); return x; };
    loop(20000);
    resetCostCounts();
    loop(1000);
    const { calls, ffiCalls } = costCounts();
    ${HEAP_BYTES_PER}
    // in optimized code (unoptimized code boxes every fraction); two calls per round
    const bytesPerCall = globalThis.gc && !("Bun" in globalThis)
      ? (await heapBytesPer(loop, 50000)) / 2
      : null;
    console.log(JSON.stringify({ counting: COUNTING, calls, ffiCalls, bytesPerCall }));
  `,
    {
      v8Flags: HEAP_FLAGS,
      env: { RDMA_VERBS_COUNT: count },
    },
  );
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  return JSON.parse(r.lastLine);
}

test("cost counting: every FFI call counted by name with RDMA_VERBS_COUNT=1, none without", () => {
  const on = probe("1");
  assert.equal(on.counting, true);
  assert.equal(on.calls.abs, 1000, JSON.stringify(on.calls)); // a prepared call, by its C name
  assert.equal(on.calls.epoll_wait, 1000, JSON.stringify(on.calls)); // a bound (hot) symbol
  assert.equal(on.ffiCalls, 2000);
  if (on.bytesPerCall !== null) {
    // a Map holding the µs boxed each update: 18 bytes per call before the typed counters
    assert.ok(on.bytesPerCall < 8, `${on.bytesPerCall} heap bytes per counted call`);
  }
  const off = probe("0");
  assert.equal(off.counting, false);
  assert.deepEqual(off.calls, {});
  assert.equal(off.ffiCalls, 0);
});
