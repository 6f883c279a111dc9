/**
 * The layer rule, enforced: imports only go down (`types → ffi → poller → verbs → cm → stream →
 * net`), `net/` reaches the stream layer through its public module and otherwise only `types/`,
 * `types/` is pure, only `ffi/` knows the runtime, examples use the public entry points only, the
 * entry points (`mod.ts`, `verbs.ts`, `cm.ts`) only re-export, and `verbs.ts` loads no layer above
 * verbs, `cm.ts` none above cm.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "./harness.ts";
import { ENTRY_POINTS } from "../scripts/check-docs.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const LAYERS = ["types", "ffi", "poller", "verbs", "cm", "stream", "net"] as const;

function files(dir: string): string[] {
  const abs = join(ROOT, dir);
  try {
    statSync(abs);
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const name of readdirSync(abs)) {
    const p = join(abs, name);
    if (statSync(p).isDirectory()) out.push(...files(relative(ROOT, p)));
    else if (name.endsWith(".ts")) out.push(relative(ROOT, p));
  }
  return out;
}

/** Every relative module specifier a file imports or re-exports (static and dynamic). */
function imports(file: string): string[] {
  const src = readFileSync(join(ROOT, file), "utf8");
  const out: string[] = [];
  for (const m of src.matchAll(/(?:import|export)\s[^"']*?from\s+["']([^"']+)["']/g)) {
    out.push(m[1]);
  }
  for (const m of src.matchAll(/^\s*import\s+["']([^"']+)["']/gm)) out.push(m[1]);
  for (const m of src.matchAll(/import\(\s*["']([^"']+)["']\s*\)/g)) out.push(m[1]);
  for (const m of src.matchAll(/new URL\(\s*["']([^"']+\.ts)["']/g)) out.push(m[1]);
  return out;
}

function layerOf(file: string): number {
  return LAYERS.indexOf(file.split("/")[0] as typeof LAYERS[number]);
}

test("layers: library imports only go down (types → ffi → poller → verbs → cm → stream → net)", () => {
  const wrong: string[] = [];
  let checked = 0;
  for (const layer of LAYERS) {
    for (const file of files(layer)) {
      for (const spec of imports(file)) {
        if (!spec.startsWith(".")) continue;
        const target = relative(ROOT, resolve(ROOT, dirname(file), spec));
        checked++;
        const to = layerOf(target);
        if (to < 0 || to > layerOf(file)) wrong.push(`${file} imports ${target}`);
      }
    }
  }
  assert.ok(checked > 100, `only ${checked} imports found: the scan is broken`);
  assert.deepEqual(wrong, [], "imports that run upward or out of the library");
});

test("layers: net/ imports stream/ through its public module, and types/, nothing else", () => {
  const wrong: string[] = [];
  let checked = 0;
  for (const file of files("net")) {
    for (const spec of imports(file)) {
      if (!spec.startsWith(".")) continue;
      const target = relative(ROOT, resolve(ROOT, dirname(file), spec));
      checked++;
      const ok = target.startsWith("net/") || target === "stream/mod.ts" ||
        target.startsWith("types/");
      if (!ok) wrong.push(`${file} imports ${target}`);
    }
  }
  assert.ok(checked >= 5, `only ${checked} imports found in net/: the scan is broken`);
  assert.deepEqual(wrong, []);
});

test("layers: types/ is pure and only ffi/ knows the runtime", () => {
  const runtime = /\bDeno\.|["']bun:|\bBun\.|["']Bun["'] in globalThis/;
  const wrong: string[] = [];
  for (const layer of LAYERS) {
    if (layer === "ffi") continue;
    for (const file of files(layer)) {
      const code = readFileSync(join(ROOT, file), "utf8")
        .replace(/\/\*[\s\S]*?\*\//g, "")
        .replace(/^\s*\/\/.*$/gm, "");
      if (runtime.test(code)) wrong.push(file);
    }
  }
  assert.deepEqual(wrong, [], "files outside ffi/ that name a runtime");
});

test("layers: below net/ nothing imports a node: module (in Deno that sets up Node's compatibility layer at start-up); Bun's loader aside", () => {
  const wrong: string[] = [];
  for (const layer of LAYERS) {
    if (layer === "net") continue;
    for (const file of files(layer)) {
      if (file === "ffi/bun.ts") continue;
      const node = imports(file).filter((s) => s.startsWith("node:"));
      if (node.length) wrong.push(`${file}: ${node.join(", ")}`);
    }
  }
  for (const file of ["examples/_common/cli.ts", "examples/_common/args.ts"]) {
    const node = imports(file).filter((s) => s.startsWith("node:"));
    if (node.length) wrong.push(`${file}: ${node.join(", ")}`);
  }
  assert.deepEqual(wrong, []);
});

test("layers: examples import the public entry points only; the entry points only re-export", () => {
  const wrong: string[] = [];
  for (const file of files("examples")) {
    for (const spec of imports(file)) {
      if (!spec.startsWith(".")) continue;
      const target = relative(ROOT, resolve(ROOT, dirname(file), spec));
      const entry = (ENTRY_POINTS as readonly string[]).includes(target);
      if (!entry && !target.startsWith("examples/")) wrong.push(`${file} → ${target}`);
    }
  }
  assert.deepEqual(wrong, [], "examples that reach past the entry points");
  for (const entry of ENTRY_POINTS) {
    const src = readFileSync(join(ROOT, entry), "utf8").replace(/\/\*\*[\s\S]*?\*\//g, "");
    for (const line of src.split("\n").filter((l) => l.trim() && !l.trim().startsWith("//"))) {
      assert.match(line, /^(export\b|\s|\})/, `${entry} does more than re-export: ${line}`);
    }
  }
});

test("layers: verbs.ts loads nothing above verbs/, cm.ts nothing above cm/ (what they leave out)", () => {
  const reach = (entry: string): Set<string> => {
    const seen = new Set<string>();
    const todo = [entry];
    while (todo.length) {
      const f = todo.pop()!;
      if (seen.has(f)) continue;
      seen.add(f);
      for (const spec of imports(f)) {
        if (spec.startsWith(".")) todo.push(relative(ROOT, resolve(ROOT, dirname(f), spec)));
      }
    }
    return seen;
  };
  const above = (entry: string, top: string) =>
    [...reach(entry)].filter((f) => layerOf(f) > LAYERS.indexOf(top as typeof LAYERS[number]));
  assert.deepEqual(above("verbs.ts", "verbs"), [], "verbs.ts reaches above verbs/");
  assert.deepEqual(above("cm.ts", "cm"), [], "cm.ts reaches above cm/");
  assert.ok(reach("mod.ts").has("stream/mod.ts"), "mod.ts has the streams");
});

test(
  "layers: every library module can be the first one imported (no import cycle through a base class)",
  () => {
    // a subclass module reached again while its base class's module is still being evaluated
    // throws "Cannot access … before initialization": import each module alone, in a fresh process
    const skip = /ffi\/(bun|deno|wait-bun|wait-deno|wait-uring|epoll-worker)\.ts$/;
    const mods = LAYERS.flatMap((l) => files(l)).filter((f) => !skip.test(f));
    const wrong: string[] = [];
    for (const f of mods) {
      const r = spawnSync("deno", ["eval", `await import(${JSON.stringify(join(ROOT, f))})`], {
        encoding: "utf8",
      });
      if (r.status !== 0) {
        wrong.push(`${f}: ${(r.stderr.match(/\w*Error[^\n]*/) ?? [r.stderr])[0]}`);
      }
    }
    assert.deepEqual(wrong, []);
  },
  { timeout: 300_000 },
);

test("layers: no library file over 900 lines, verbs/qp-ex.ts and cm/id.ts at most 600 (generated layouts aside)", () => {
  const limit = (f: string) => f === "verbs/qp-ex.ts" || f === "cm/id.ts" ? 600 : 900;
  const over = LAYERS.flatMap((l) => files(l))
    .filter((f) => !f.startsWith("types/layouts/"))
    .map((f) => [f, readFileSync(join(ROOT, f), "utf8").split("\n").length - 1] as const)
    .filter(([f, n]) => n > limit(f))
    .map(([f, n]) => `${f}: ${n} lines (at most ${limit(f)})`);
  assert.deepEqual(over, []);
});

/**
 * V8 keeps the source of every module it loaded, two bytes per character when one character of
 * the file is outside Latin-1: 119 dashes and arrows in comments cost a Deno process 0.34 MiB of
 * heap and 0.8 MiB of RSS (bench/results/2026-11-27-contention.md).
 */
test("layers: every shipped module is Latin-1 (V8 then keeps its source one byte per character)", () => {
  const shipped = [...LAYERS, "examples"].flatMap((d) => files(d))
    .concat(readdirSync(ROOT).filter((f) => f.endsWith(".ts")));
  const wide = shipped.flatMap((f) => {
    const lines = readFileSync(join(ROOT, f), "utf8").split("\n");
    const i = lines.findIndex((l) => /[\u0100-\u{10ffff}]/u.test(l));
    return i < 0 ? [] : [`${f}:${i + 1}: ${lines[i].trim()}`];
  });
  assert.deepEqual(wide, []);
});

/**
 * V8's young-generation collector keeps a weak map's value, and all it reaches, alive until a full
 * collection: a map keyed by a per-connection object whose value reaches the object promoted each
 * closed connection whole (docs/06-lifetimes.md). Every weak map of the library is listed here with
 * why its entries cannot do that; state private to a class lives in private fields instead.
 */
const WEAK_MAPS: Record<string, string> = {
  "ffi/deno.ts cifs": "keys are the static symbol tables' specs",
  "ffi/deno.ts trampolines": "keys are the loaders' Natives (one per process, more in tests)",
  "poller/poller.ts ownedBy": "deleted when the owner closes its watches",
  "poller/poller.ts ownerOf": "deleted when the watch closes",
  "poller/completions.ts states": "deleted when the CQ's waits are cancelled (it closed)",
  "poller/completions.ts cancelled": "values are null, or an error the caller gave",
  "verbs/mr.ts holds": "values are numbers",
  "verbs/_objects.ts byContext": "keys are contexts; deleted when the context closes",
  "cm/_ids.ts idsOf": "deleted when the channel closes",
  "stream/_device-limits.ts byContext": "keys are contexts; values are numbers",
  "stream/_stream-cq.ts byPoller":
    "keys are pollers (the default one, those a program makes); a value's channels and handlers go when their last stream closes",
};

test("layers: every weak map of the library is one whose entries go when their key closes", () => {
  const found = LAYERS.flatMap((l) => files(l)).flatMap((f) =>
    [...readFileSync(join(ROOT, f), "utf8").matchAll(/const (\w+) = new WeakMap\b/g)]
      .map((m) => `${f} ${m[1]}`)
  );
  assert.deepEqual(found.sort(), Object.keys(WEAK_MAPS).sort());
});

/**
 * A closure that an object's constructor stores keeps the object, and all it reaches, alive
 * through Deno's young-generation collections while the constructor runs unoptimized (most do:
 * one QP per connection never gets hot), so closed connections were promoted whole
 * (docs/06-lifetimes.md). Classes hand out module-level functions shared by all their objects, or
 * bound methods, instead; the few stored closures left are listed here with why they may.
 */
const CONSTRUCTOR_CLOSURES: Record<string, string> = {
  "ffi/build.ts this.call": "captures the bound function and its arguments, not the object",
  "ffi/wait-bun.ts this.#worker.onmessage": "one waiter per poller, which lives as long",
  "ffi/wait-bun.ts this.#handlers": "one waiter per poller, which lives as long",
  "poller/poller.ts this.#waiterOptions": "one per poller, which lives as long",
};

/** The bodies of the constructors in `src` (from the `{` after the parameters to its `}`). */
function constructorBodies(src: string): string[] {
  const bodies: string[] = [];
  for (const m of src.matchAll(/\n\s*constructor\(/g)) {
    let i = m.index! + m[0].length - 1;
    for (let depth = 0;; i++) {
      if (src[i] === "(") depth++;
      else if (src[i] === ")" && --depth === 0) break;
    }
    const open = src.indexOf("{", i);
    let end = open;
    for (let depth = 0;; end++) {
      if (src[end] === "{") depth++;
      else if (src[end] === "}" && --depth === 0) break;
    }
    bodies.push(src.slice(open, end));
  }
  return bodies;
}

test("layers: constructors store no closures", () => {
  const found = LAYERS.flatMap((l) => files(l)).flatMap((f) =>
    constructorBodies(readFileSync(join(ROOT, f), "utf8")).flatMap((body) =>
      [...body.matchAll(/\n\s*((?:this|\w+)(?:\.#?\w+)+) = ([^;]*);/g)]
        // an arrow or function expression stored, not one passed to a call made right away
        .filter(([, , rhs]) => /=>|\bfunction\b/.test(rhs) && !/^[\w.#]+\(/.test(rhs))
        .map(([, target]) => `${f} ${target}`)
    )
  );
  assert.deepEqual(found.sort(), Object.keys(CONSTRUCTOR_CLOSURES).sort());
});
