/**
 * Cost of one function-pointer call (the path of the inline verbs) on the running
 * runtime: the prepared call used on the hot path, the generic bound call, and in
 * Deno each of its paths (the trampoline, libffi, the UnsafeFnPointer fallback); a plain
 * exported-symbol call for reference. The function called is libc's `int abs(int)`: an `int`
 * result, like every post and poll.
 *
 *   deno run -A bench/fnptr.ts      bun bench/fnptr.ts
 */

import { native } from "../ffi/native.ts";
import type { Native } from "../types/native.ts";

const ITERS = 1_000_000;
const spec = { args: ["i32"], result: "i32", c: "int abs(int j)" } as const;

function timeIt(label: string, fn: () => unknown, iters = ITERS): number {
  for (let i = 0; i < 10_000; i++) fn(); // warm up (JIT, fast-call paths)
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) fn();
  const ns = ((performance.now() - t0) * 1e6) / iters;
  console.log(`${label.padEnd(44)} ${ns.toFixed(1).padStart(8)} ns/call`);
  return ns;
}

function run(n: Native, label: string): void {
  const abs = n.libc.dlsym(n.libc.dlopen(null, 2), n.pointerOf(n.cstringBytes("abs")))!;
  const prepared = n.prepareCall(abs, spec, [-7]);
  const bound = n.fnPointer(abs, spec);
  if (prepared.call() !== 7 || bound(-7) !== 7) throw new Error("abs broken");
  timeIt(`${label}: prepared call (hot path)`, () => prepared.call());
  timeIt(`${label}: bound call with arguments`, () => bound(-7), ITERS / 10);
}

const n = native();
console.log(`runtime ${n.runtime}, function-pointer path ${n.fnPointerPath}`);
const word = n.alloc(8);
timeIt(`${n.runtime}: exported symbol strlen("") for reference`, () => n.libc.strlen(word));
run(n, `${n.runtime} ${n.fnPointerPath}`);
if (n.runtime === "deno") {
  const { createNative } = await import("../ffi/deno.ts");
  for (const paths of [{ trampoline: false }, { trampoline: false, libffi: false as const }]) {
    const other = createNative(paths);
    run(other, `deno ${other.fnPointerPath}`);
  }
}
