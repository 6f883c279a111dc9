/**
 * The JS heap by kind of object, for the memory benches: what a connection (or any step) leaves
 * on the heap, by constructor or function name. Deno: a V8 heap snapshot (`node:v8`), nodes summed
 * by type and name (objects by constructor, closures by function name; strings, code and numbers
 * each as one kind). Bun: a JavaScriptCore heap snapshot, cells summed by class name. A snapshot
 * collects first, so a reading counts what is reachable. A reading is kept in a file, not on the
 * heap, so that it is not itself counted by the next one.
 *
 * @module
 */

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import v8 from "node:v8";

/** Count and bytes of one kind of heap object. */
export interface HeapKind {
  count: number;
  bytes: number;
}

/** V8 node types whose names say nothing about who made them: one kind each. */
const LUMPED = new Set(["string", "concatenated string", "sliced string", "number", "code"]);

function add(by: Map<string, HeapKind>, kind: string, bytes: number): void {
  const k = by.get(kind);
  if (k) {
    k.count++;
    k.bytes += bytes;
  } else by.set(kind, { count: 1, bytes });
}

interface V8Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
  nodes: number[];
  strings: string[];
}

function v8Kinds(): Map<string, HeapKind> {
  const dir = mkdtempSync(join(tmpdir(), "heap-by-type-"));
  try {
    const file = v8.writeHeapSnapshot(join(dir, "h.heapsnapshot"));
    const s = JSON.parse(readFileSync(file, "utf8")) as V8Snapshot;
    const fields = s.snapshot.meta.node_fields;
    const types = s.snapshot.meta.node_types[0];
    const [fType, fName, fSize] = ["type", "name", "self_size"].map((f) => fields.indexOf(f));
    const by = new Map<string, HeapKind>();
    for (let i = 0; i < s.nodes.length; i += fields.length) {
      const type = types[s.nodes[i + fType]];
      if (type === "synthetic") continue;
      const name = s.strings[s.nodes[i + fName]].replace(/ @\d+$/, ""); // "@id": one per node
      const kind = LUMPED.has(type) ? `(${type})` : type === "object" ? name : `(${type}) ${name}`;
      add(by, kind.length > 60 ? kind.slice(0, 57) + "..." : kind, s.nodes[i + fSize]);
    }
    return by;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface JscSnapshot {
  nodes: number[];
  nodeClassNames: string[];
}

function jscKinds(): Map<string, HeapKind> {
  const bun = (globalThis as unknown as { Bun: { generateHeapSnapshot(): JscSnapshot } }).Bun;
  const s = bun.generateHeapSnapshot();
  const by = new Map<string, HeapKind>();
  // nodes: [id, size, class name index, flags] per cell
  for (let i = 0; i < s.nodes.length; i += 4) {
    add(by, s.nodeClassNames[s.nodes[i + 2]], s.nodes[i + 1]);
  }
  return by;
}

/** Reads the heap's reachable objects by kind; returns the file the reading is kept in. */
export function heapByType(): string {
  const by = "Bun" in globalThis ? jscKinds() : v8Kinds();
  const file = join(mkdtempSync(join(tmpdir(), "heap-reading-")), "kinds.json");
  writeFileSync(file, JSON.stringify([...by]));
  return file;
}

function load(file: string): Map<string, HeapKind> {
  const by = new Map<string, HeapKind>(JSON.parse(readFileSync(file, "utf8")));
  rmSync(dirname(file), { recursive: true, force: true });
  return by;
}

/**
 * What grew between two readings (removed once compared), per `per` units (e.g. connections), the `top` kinds by bytes:
 * `[kind, count per unit, bytes per unit]`.
 */
export function heapGrowth(
  beforeFile: string,
  afterFile: string,
  per: number,
  top = 25,
): [string, number, number][] {
  const before = load(beforeFile), after = load(afterFile);
  const rows: [string, number, number][] = [];
  for (const [kind, a] of after) {
    const b = before.get(kind) ?? { count: 0, bytes: 0 };
    if (a.count !== b.count || a.bytes !== b.bytes) {
      rows.push([kind, (a.count - b.count) / per, (a.bytes - b.bytes) / per]);
    }
  }
  return rows.sort((x, y) => y[2] - x[2]).slice(0, top);
}
