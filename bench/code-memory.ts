/**
 * What loading code costs a process, apart from running it: anonymous memory (`RssAnon`) and the
 * engine's heap after importing one module, each import in a fresh process of the running
 * runtime, after full collections and a 1 s settle. The modules: the library's entry points,
 * `node:net` (what the TCP twin of a client loads), and generated ones of about the same size
 * whose functions are never called (3,000 exported functions, the same not exported, a class of
 * 3,000 methods, one 300 KB string). It shows how much of a first connection's memory is the code
 * a program loads (issue: the RSS of a process that connected once, beside its TCP twin).
 *
 *   deno run -A --v8-flags=--expose-gc bench/code-memory.ts [rounds=3]
 *   bun bench/code-memory.ts [rounds=3]
 *
 * Prints one row per module: the median over the rounds (interleaved, after one uncounted) and
 * the range. Host or guest; no device is opened.
 *
 * @module
 */

// No `node:` import at the top: the measured child loads nothing but the module it measures and
// this process's own calls (the parent's `node:` modules would otherwise be counted for free in
// the `node:net` row).
import { self } from "./process-native.ts";

const isBun = self.runtime === "bun";
const args = self.argv;

/** KiB of anonymous memory this process holds. */
function anonKiB(): number {
  return Number(/RssAnon:\s+(\d+)/.exec(self.readText("/proc/self/status"))![1]);
}

/** A full collection, then `ms` of quiet (the allocators return what they free lazily). */
async function settle(ms: number): Promise<void> {
  self.gc();
  await new Promise((r) => setTimeout(r, ms));
  self.gc();
}

/** Bytes of the engine's heap in use. */
async function heapBytes(): Promise<number> {
  if (!isBun) return Deno.memoryUsage().heapUsed;
  const { heapStats } = await import("bun:jsc");
  return heapStats().heapSize;
}

if (args[0] === "--child") {
  // one import, measured from inside a fresh process
  await settle(300);
  const anon = anonKiB(), heap = await heapBytes();
  if (args[1] !== "none") await import(args[1]);
  await settle(1000);
  self.write(
    JSON.stringify({ anon: anonKiB() - anon, heap: (await heapBytes() - heap) / 1024 }) + "\n",
  );
  self.exit(0);
}

const { execFileSync } = await import("node:child_process");
const { mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
const { tmpdir } = await import("node:os");
const { join } = await import("node:path");
const { fileURLToPath } = await import("node:url");

const rounds = Number(args[0] ?? 3);
const dir = mkdtempSync(join(tmpdir(), "code-memory-"));
const body = (i: number) =>
  `(a, b) { const x = a + b * ${i}; if (x > 10) return x - ${i}; ` +
  `return [a, b, x].map((v) => v * 2).join(","); }`;
const generated: [string, string][] = [
  [
    "3,000 exported functions",
    Array.from({ length: 3000 }, (_, i) => `export function f${i}${body(i)}\n`).join(""),
  ],
  [
    "3,000 functions, not exported",
    Array.from({ length: 3000 }, (_, i) => `function f${i}${body(i)}\n`).join("") +
    "export const first = f0;\n",
  ],
  [
    "a class of 3,000 methods",
    `export class C {\n${
      Array.from({ length: 3000 }, (_, i) => `  f${i}${body(i)}\n`).join("")
    }}\n`,
  ],
  ["one 300 KB string", `export const s = "${"x".repeat(300_000)}";\n`],
];
const here = (path: string) => fileURLToPath(new URL(path, import.meta.url).href);
const modules: [string, string, number][] = [
  ["nothing", "none", 0],
  ["node:net", "node:net", 0],
  ["verbs.ts", here("../verbs.ts"), 0],
  ["cm.ts", here("../cm.ts"), 0],
  ["mod.ts", here("../mod.ts"), 0],
];
for (const [i, [name, source]] of generated.entries()) {
  const file = join(dir, `gen${i}.js`);
  writeFileSync(file, source);
  modules.push([name, file, source.length]);
}

const script = fileURLToPath(import.meta.url);
const argv = (spec: string) =>
  isBun
    ? [(globalThis as unknown as { process: { execPath: string } }).process.execPath, [
      script,
      "--child",
      spec,
    ]] as const
    : [Deno.execPath(), ["run", "-A", "--v8-flags=--expose-gc", script, "--child", spec]] as const;

const results = modules.map(() => ({ anon: [] as number[], heap: [] as number[] }));
// round 0 is not counted: a module's first load fills the runtime's caches (Deno's transpile and
// code cache), which costs that process many times a later load's memory
for (let r = 0; r <= rounds; r++) {
  for (const [k, [, spec]] of modules.entries()) {
    const [cmd, cmdArgs] = argv(spec);
    const out = execFileSync(cmd, [...cmdArgs], { encoding: "utf8" }).trim().split("\n").pop()!;
    const { anon, heap } = JSON.parse(out);
    if (r === 0) continue;
    results[k].anon.push(anon);
    results[k].heap.push(heap);
  }
}
rmSync(dir, { recursive: true });

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const range = (xs: number[]) => `${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}`;
const version = isBun
  ? `bun ${(globalThis as unknown as { Bun: { version: string } }).Bun.version}`
  : `deno ${Deno.version.deno}`;
console.log(
  `code-memory: ${version}, ${rounds} interleaved rounds after one uncounted, one fresh process ` +
    "per import",
);
console.log("");
console.log(
  "| imported | source KB | anonymous KiB added (range) | engine heap KiB added (range) |",
);
console.log("|---|---|---|---|");
for (const [k, [name, , size]] of modules.entries()) {
  const { anon, heap } = results[k];
  console.log(
    `| ${name} | ${size ? (size / 1000).toFixed(0) : "—"} | ${median(anon).toFixed(0)} (${
      range(anon)
    }) | ${median(heap).toFixed(0)} (${range(heap)}) |`,
  );
}
