/**
 * The client side of the RC echo sessions the cm and fault tests run against
 * `cm-rc-server.ts`, and the process measurements they report (open fds, RSS, JS heap, what
 * changed between two censuses of native objects).
 */

import assert from "node:assert/strict";
import process from "node:process";
import { cmConnect, native, type NativeCensus, QpState } from "../../lib.ts";
import { Endpoint } from "./endpoint.ts";
import { text } from "./spawn.ts";

const enc = (s: string) => new TextEncoder().encode(s);

/** Open file descriptors of this process (probed with fcntl: no file-system permission needed). */
export function openFds(): number {
  const libc = native().libc;
  let count = 0;
  for (let fd = 0; fd < 4096; fd++) if (libc.fcntl(fd, 1, /* F_GETFD */ 0) >= 0) count++;
  return count;
}

/** The kinds (and `blocks`, `bytes`) whose count differs between two censuses, with both counts. */
export function censusChanges(a: NativeCensus, b: NativeCensus): Record<string, [number, number]> {
  const out: Record<string, [number, number]> = {};
  for (const k of new Set([...Object.keys(a.objects), ...Object.keys(b.objects)])) {
    const x = a.objects[k] ?? 0, y = b.objects[k] ?? 0;
    if (x !== y) out[k] = [x, y];
  }
  if (a.blocks !== b.blocks) out.blocks = [a.blocks, b.blocks];
  if (a.bytes !== b.bytes) out.bytes = [a.bytes, b.bytes];
  return out;
}

/** Resident set size of this process in bytes. */
export function rss(): number {
  return process.memoryUsage().rss;
}

/** What {@link settledMemory} measured, in bytes. */
export interface Memory {
  /** Resident set size. */
  rss: number;
  /** JS heap in use. */
  heap: number;
  /** Memory the JS engine accounts outside its heap (ArrayBuffer backing stores and the like). */
  external: number;
  /** Whether a full collection ran first. */
  collected: boolean;
}

/**
 * RSS and JS memory after a full garbage collection where the runtime offers one (Bun always, Deno
 * when run with `--v8-flags=--expose-gc`, as scripts/test runs it), so that growth between two
 * calls is what is still held, not garbage waiting for the collector.
 */
export function settledMemory(): Memory {
  const g = globalThis as { gc?: () => void; Bun?: { gc(force: boolean): void } };
  let collected = true;
  if (g.Bun) g.Bun.gc(true);
  else if (g.gc) g.gc();
  else collected = false;
  const m = process.memoryUsage();
  return { rss: m.rss, heap: m.heapUsed, external: m.external, collected };
}

/** Two {@link settledMemory} readings as one line of a test's report. */
export function memoryGrowth(a: Memory, b: Memory): string {
  const mib = (n: number) => (n / (1 << 20)).toFixed(1);
  const how = b.collected ? "after a full GC" : "no forced GC";
  const pair = (what: string, k: "rss" | "heap" | "external") =>
    `${what} ${mib(a[k])} → ${mib(b[k])} MiB`;
  return `${pair("RSS", "rss")}, ${pair("JS heap", "heap")}, ${
    pair("external", "external")
  } (${how})`;
}

/** Connects to the echo server, sends `pings` pings and checks each pong. */
export async function session(address: string, port: number, tag: string, pings = 1) {
  let ep: Endpoint | undefined;
  const { id, event } = await cmConnect({
    hostname: address,
    port,
    privateData: enc(tag),
    timeout: 20_000,
    beforeConnect: (id) => {
      ep = new Endpoint(id); // QP on the id, receives posted before connect
    },
  });
  try {
    assert.equal(id.qp!.state, QpState.RTS);
    for (let i = 0; i < pings; i++) {
      await ep!.send(enc(`ping ${tag} ${i}`));
      const m = await ep!.recv();
      assert.equal(text(m.bytes), `pong ${tag} ${i}`);
    }
    return { id, event, ep: ep! };
  } catch (e) {
    id.close();
    ep?.close();
    throw e;
  }
}
