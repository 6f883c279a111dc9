/**
 * Where the stream's steady state allocates, by call site (Deno): two connections in this
 * process, a warm-up, then `--rounds` rounds of one loop under V8's sampling heap profiler with
 * collected objects kept in the profile (so short-lived garbage counts), the sampled bytes per
 * round summed by the innermost frames. Loops:
 *
 * - `empty`: `tryRead` with nothing to read (one CQ poll);
 * - `pair`: `tryWrite(64 B)` + `tryRead` until the 64 B arrived (the synchronous API);
 * - `promise`: `await write(64 B)` + `await read(p, { min: 64 })` (the caller's own awaits included);
 * - `promise64k`: the same with 64 KiB (a read that may have to wait for the rest);
 * - `cycle`: one whole connection (connect and accept, 4 KiB each way, close both and await their
 *   release): what a connection costs the JS heap (200 rounds after 50).
 *
 * The profiler samples every 16 bytes on average: figures under a few bytes per round are noise.
 * Bun has no sampling heap profiler; bench/stream.ts measures its heap growth instead. Run it where
 * there is an RDMA device, e.g. in the soft-RoCE guest:
 *
 *   scripts/softroce-vm -- node_modules/.bin/deno run -A --v8-flags=--expose-gc bench/alloc-sites.ts
 *
 * Options: --warm N (default 40000: the guest's optimizing compiler needs thousands of rounds),
 * --rounds N (default 3000), --address IP (default $RDMA_GUEST_IP), --top N (default 6),
 * --loops a,b (default all five), --survivors (count only what outlived a young-generation
 * collection: what makes V8 grow its young generation and fills the old one), --strategy S (the
 * connections' strategy; `event`: every wait sleeps on the completion channel).
 *
 * @module
 */

import process from "node:process";
import { Session } from "node:inspector";
import { connect, listen, type RdmaConn } from "../stream/mod.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const address = arg("address", process.env.RDMA_GUEST_IP ?? "");
const WARM = Number(arg("warm", "40000"));
const ROUNDS = Number(arg("rounds", "3000"));
const TOP = Number(arg("top", "6"));
const LOOPS = arg("loops", "empty,pair,promise,promise64k,cycle").split(",");
const SURVIVORS = process.argv.includes("--survivors");

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

const session = new Session();
session.connect();
function post<T>(method: string, params: object = {}): Promise<T> {
  return new Promise((resolve, reject) =>
    session.post(method, params, (e: Error | null, r?: object) => (e ? reject(e) : resolve(r as T)))
  );
}

type Loop = (n: number) => Promise<void>;

/** One connection per round, both ends in this process (the `cycle` loop). */
function cycles(): Loop {
  const l = listen({ hostname: address, port: 0 });
  const msg = new Uint8Array(4096);
  const buf = new Uint8Array(4096);
  const min = { min: 4096 };
  return async (n) => {
    for (let i = 0; i < n; i++) {
      const [a, b] = await Promise.all([
        l.accept(),
        connect({ hostname: address, port: l.addr.port }),
      ]);
      await b.write(msg);
      await a.read(buf, min);
      await a.write(buf);
      await b.read(buf, min);
      await Promise.all([a[Symbol.asyncDispose](), b[Symbol.asyncDispose]()]);
    }
  };
}

function loops(a: RdmaConn, b: RdmaConn): Record<string, Loop> {
  const src = new Uint8Array(64);
  const dst = new Uint8Array(64);
  const min = { min: 64 };
  const src64k = new Uint8Array(65536);
  const dst64k = new Uint8Array(65536);
  const min64k = { min: 65536 };
  return {
    empty: (n) => {
      for (let i = 0; i < n; i++) b.tryRead(dst);
      return Promise.resolve();
    },
    pair: async (n) => {
      for (let i = 0; i < n; i++) {
        while (a.tryWrite(src) === 0);
        let got = 0;
        for (let spins = 0; got < 64 && spins < 1_000_000; spins++) got += b.tryRead(dst) ?? 0;
        if (got < 64) await b.read(dst.subarray(got), { min: 64 - got });
      }
    },
    promise: async (n) => {
      for (let i = 0; i < n; i++) {
        await a.write(src);
        await b.read(dst, min);
      }
    },
    promise64k: async (n) => {
      for (let i = 0; i < n; i++) {
        await a.write(src64k);
        await b.read(dst64k, min64k);
      }
    },
  };
}

/** `file:line function` of a frame, the path shortened to its last two parts. */
function frame(n: ProfileNode): string {
  const f = n.callFrame;
  const file = f.url.split("/").slice(-2).join("/") || "(native)";
  return `${f.functionName || "(anonymous)"} ${file}:${f.lineNumber + 1}`;
}

async function sites(
  loop: Loop,
  rounds: number,
): Promise<{ total: number; top: [string, number][] }> {
  await post("HeapProfiler.enable");
  await post("HeapProfiler.startSampling", {
    samplingInterval: 16,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: !SURVIVORS,
  });
  await loop(rounds);
  const { profile } = await post<{ profile: { head: ProfileNode } }>("HeapProfiler.stopSampling");
  const by = new Map<string, number>();
  let total = 0;
  const walk = (node: ProfileNode, stack: string[]) => {
    const here = [frame(node), ...stack].slice(0, 3);
    if (node.selfSize > 0 && !node.callFrame.url.includes("inspector")) {
      const key = here.join(" < ");
      by.set(key, (by.get(key) ?? 0) + node.selfSize);
      total += node.selfSize;
    }
    for (const c of node.children) walk(c, here);
  };
  walk(profile.head, []);
  const top = [...by].sort((x, y) => y[1] - x[1]).slice(0, TOP);
  return { total, top };
}

if (!address) throw new Error("no address: pass --address IP or set RDMA_GUEST_IP");
// --strategy: the connections' strategy (default the library's; `event`: every wait sleeps)
const strategy = arg("strategy", "") as "" | "event" | "busy" | "adaptive";
const strategyOption = strategy ? { strategy } : {};
const l = listen({ hostname: address, port: 0, ...strategyOption });
const [a, b] = await Promise.all([
  l.accept(),
  connect({ hostname: address, port: l.addr.port, ...strategyOption }),
]);
l.close();
console.log(
  `bench/alloc-sites (deno ${Deno.version.deno}): warm-up ${WARM}, ${ROUNDS} rounds` +
    (SURVIVORS ? ", only what survived a scavenge" : ""),
);
const all: [string, Loop, number, number][] = [
  ...Object.entries(loops(a, b)).map(([k, f]) =>
    [k, f, WARM, ROUNDS] as [string, Loop, number, number]
  ),
  ["cycle", cycles(), 50, 200],
];
for (const [name, loop, warm, rounds] of all) {
  if (!LOOPS.includes(name)) continue;
  await loop(warm);
  const { total, top } = await sites(loop, rounds);
  console.log(`\n${name}: ${(total / rounds).toFixed(1)} B per round (sampled)`);
  for (const [k, v] of top) console.log(`  ${(v / rounds).toFixed(1).padStart(8)} B  ${k}`);
}
await a[Symbol.asyncDispose]();
await b[Symbol.asyncDispose]();
session.disconnect();
