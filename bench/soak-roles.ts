/**
 * The soak's client and server processes (bench/soak.ts starts them): this library's cycles in
 * Deno and Bun and the same cycles over the runtime's own TCP, each process sampling its own
 * memory. A process loads what a program of its kind loads and nothing else: the library's entry
 * point (`cm.ts` for rdma_cm, `mod.ts` for streams) or `node:net`, and no `node:` module for its
 * own measuring (in Deno the first `node:` module sets up Node's compatibility layer, several MiB
 * a program that does not use it never holds: bench/results/2026-12-03-code-memory.md).
 *
 *   soak-roles.ts client|server|tcp-client|tcp-server KIND ADDRESS [PORT] CYCLES EVERY
 *
 * Prints one JSON line per sample, `{ready, port}` (servers) and a last `{done, ...}` line.
 *
 * @module
 */

import type { AddressInfo } from "node:net";
import { anonymousBytes, residentByMapping } from "./proc-memory.ts";
import { socketReader } from "./socket-reader.ts";
import { self as h } from "./process-native.ts";

const isBun = "Bun" in globalThis;
const MSG = 4096;

/** One sample of a client or server (bytes). */
export interface Sample {
  cycle: number;
  rss: number;
  /** anonymous memory (heaps, allocators, stacks, the device's queues) */
  anon?: number;
  /** the JS engine's heap (committed) and what it accounts outside it */
  heapTotal?: number;
  external?: number;
  /** glibc malloc: memory taken from the kernel (arenas + mmapped chunks), and in use */
  malloc?: number;
  mallocUsed?: number;
  /** census: live objects (total), native blocks and bytes */
  objects?: number;
  blocks?: number;
  bytes?: number;
}

function out(m: unknown): void {
  h.write(JSON.stringify(m) + "\n");
}

// ------------------------------------------------------------------------------------ measuring

/**
 * What each kind of client and server imports: the entry point a program of that kind imports
 * (`@rdma/verbs/cm` for rdma_cm, the package root for streams), not the test helpers' root (every
 * module and the `node:net` layer besides).
 */
type CmLib = typeof import("../cm.ts");
type StreamLib = typeof import("../mod.ts");
type Lib = CmLib | StreamLib;

/** The library as a program of `kind` imports it. */
async function importFor(kind: string): Promise<{ cm?: CmLib; stream?: StreamLib; lib: Lib }> {
  if (kind === "cm") {
    const cm = await import("../cm.ts");
    return { cm, lib: cm };
  }
  const stream = await import("../mod.ts");
  return { stream, lib: stream };
}

/** glibc's allocator statistics and `malloc_trim`, through bench/c/soak-probe.c. */
interface Probe {
  mallinfo(): void;
  trim(): void;
  out: BigUint64Array;
}

let probe: Probe | undefined;

/** Opens the allocator probe (`SOAK_PROBE`), before the first sample so it is in every one. */
async function openProbe(): Promise<void> {
  const path = h.env("SOAK_PROBE");
  if (!path) return;
  const out = new BigUint64Array(6);
  if (isBun) {
    const { dlopen, FFIType, ptr } = await import("bun:ffi");
    const lib = dlopen(path, {
      soak_mallinfo: { args: [FFIType.ptr], returns: FFIType.void },
      soak_trim: { args: [], returns: FFIType.i32 },
    }).symbols;
    const p = ptr(out);
    probe = { mallinfo: () => lib.soak_mallinfo(p), trim: () => void lib.soak_trim(), out };
  } else {
    const lib = Deno.dlopen(path, {
      soak_mallinfo: { parameters: ["buffer"], result: "void" },
      soak_trim: { parameters: [], result: "i32" },
    }).symbols;
    probe = { mallinfo: () => lib.soak_mallinfo(out), trim: () => void lib.soak_trim(), out };
  }
}

/** glibc malloc: arena bytes, mmapped bytes, in use, free (kept), trimmable top. */
function mallinfo(): { arena: number; mmapped: number; used: number; free: number; top: number } {
  const p = probe!;
  p.mallinfo();
  const [arena, mmapped, used, free, top] = [...p.out].map(Number);
  return { arena, mmapped, used, free, top };
}

function sample(cycle: number, lib?: Lib): Sample {
  const m = h.memory();
  const s: Sample = {
    cycle,
    rss: m.rss,
    anon: anonymousBytes(),
    heapTotal: m.heapTotal,
    external: m.external,
  };
  if (probe) {
    const mi = mallinfo();
    s.malloc = mi.arena + mi.mmapped;
    s.mallocUsed = mi.used + mi.mmapped;
  }
  if (lib) {
    const c = lib.nativeCensus();
    s.objects = c.total;
    s.blocks = c.blocks;
    s.bytes = c.bytes;
  }
  return s;
}

/** Resident memory by mapping (KiB), largest first. */
function mappings(top = 14): Record<string, number> {
  return Object.fromEntries([...residentByMapping()].sort((a, b) => b[1] - a[1]).slice(0, top));
}

/**
 * What the process holds at the end: after a full collection, per engine and allocator, by
 * mapping (KiB), and its RSS once the C allocator returned its free memory (`malloc_trim(0)`).
 * The engine's own statistics (`node:v8`, `bun:jsc`) are loaded only here, after the figures they
 * would change were read.
 */
async function diagnosis(lib?: Lib): Promise<Record<string, unknown>> {
  const collected = h.gc();
  const m = h.memory();
  const d: Record<string, unknown> = {
    collected,
    rss: m.rss,
    anon: anonymousBytes(),
    heap: m.heapUsed,
    heapTotal: m.heapTotal,
    external: m.external,
  };
  if (lib) d.census = lib.nativeCensus();
  d.mappingsKiB = mappings();
  if (probe) {
    d.malloc = mallinfo();
    probe.trim();
    d.rssTrimmed = h.memory().rss;
  }
  const v8 = await import("node:v8");
  const spaces: Record<string, number> = {};
  for (const s of v8.getHeapSpaceStatistics()) {
    if (s.physical_space_size > 0) spaces[s.space_name] = s.physical_space_size;
  }
  d.spaces = spaces;
  const hs = v8.getHeapStatistics();
  d.executable = hs.total_heap_size_executable;
  d.malloced = hs.malloced_memory;
  if (isBun) {
    const jsc = await import("bun:jsc");
    const s = jsc.heapStats();
    d.jsc = { heapSize: s.heapSize, heapCapacity: s.heapCapacity, extra: s.extraMemorySize };
    d.bunMemory = jsc.memoryUsage();
  }
  return d;
}

// ------------------------------------------------------------------------------------ our roles

const enc = new TextEncoder();
const dec = new TextDecoder();

async function ourClient(
  kind: string,
  address: string,
  port: number,
  cycles: number,
  every: number,
) {
  const { cm, stream, lib } = await importFor(kind);
  const { Endpoint } = cm ? await import("../tests/device/peers/endpoint.ts") : { Endpoint: null };
  const msg = new Uint8Array(MSG).map((_, i) => i & 0xff);
  const buf = new Uint8Array(MSG);
  const t0 = performance.now();
  const failed: string[] = [];
  for (let i = 1; i <= cycles; i++) {
    try {
      await ourCycle(i);
    } catch (e) {
      // a long-running program survives one failed connection: counted, and the loop goes on
      failed.push(`cycle ${i}: ${e instanceof Error ? e.message : String(e)}`);
      if (failed.length > MAX_FAILED_CYCLES) throw new Error(failed.join("; "));
    }
    if (i === 1 || i % every === 0) out(sample(i, lib));
  }
  const secs = (performance.now() - t0) / 1000;
  out({ done: true, secs, failed, end: await diagnosis(lib) });

  async function ourCycle(i: number): Promise<void> {
    if (kind === "cm") {
      let ep: InstanceType<NonNullable<typeof Endpoint>> | undefined;
      const tag = `c${i}`;
      const { id } = await cm!.cmConnect({
        hostname: address,
        port,
        privateData: enc.encode(tag),
        responderResources: 1,
        initiatorDepth: 1,
        timeout: 20_000,
        beforeConnect: (id) => {
          ep = new Endpoint!(id);
        },
      });
      await ep!.send(enc.encode(`ping ${tag} 0`));
      const m = await ep!.recv();
      if (dec.decode(m.bytes) !== `pong ${tag} 0`) {
        throw new Error(`bad reply ${dec.decode(m.bytes)}`);
      }
      try {
        await id.disconnect();
      } finally {
        ep!.close();
      }
    } else {
      const conn = await stream!.connect({ hostname: address, port, timeout: IO_TIMEOUT_MS });
      try {
        await conn.write(msg, IO);
        for (let got = 0; got < MSG;) {
          const n = await conn.read(buf.subarray(got), IO);
          if (n === null) throw new Error("end of stream before the echo");
          got += n;
        }
        if (buf[MSG - 1] !== msg[MSG - 1]) throw new Error("echo differs");
        await conn.closeWrite(IO);
        if ((await conn.read(buf, IO)) !== null) throw new Error("expected the end of the stream");
      } finally {
        await conn[Symbol.asyncDispose]();
      }
    }
  }
}

async function ourServer(kind: string, address: string, count: number, every: number) {
  const { cm, stream, lib } = await importFor(kind);
  const failed: string[] = [];
  if (cm) {
    const { Endpoint } = await import("../tests/device/peers/endpoint.ts");
    const listener = cm.cmListen({ hostname: address, port: 0, backlog: 32 });
    out({ ready: true, port: listener.addr.port });
    for (let i = 1; i <= count; i++) {
      const req = await acceptOrEnd(() => listener.accept({ timeout: SERVER_IDLE_MS }));
      if (req === null) break;
      const ep = new Endpoint(req);
      try {
        await req.accept(
          { privateData: enc.encode(`welcome:${i}`), responderResources: 1, initiatorDepth: 1 },
          { timeout: 20_000 },
        );
        const disconnected = req.waitDisconnected();
        const m = await ep.recv(60_000);
        // the pong's completion is not awaited before the disconnect: the client disconnects
        // once it has the pong, and on rxe a send whose ACK never came is retried endlessly
        // (retry count 7) until this QP leaves RTS at the disconnect (1 in ~900 cycles)
        const sent = ep.send(
          enc.encode(dec.decode(m.bytes).replace("ping", "pong")),
          undefined,
          60_000,
        );
        sent.catch(() => {}); // flushed by the disconnect, or ended by ep.close()
        await disconnected;
        await req.disconnect();
      } catch (e) {
        failed.push(`connection ${i}: ${e instanceof Error ? e.message : String(e)}`);
        if (failed.length > MAX_FAILED_CYCLES) throw new Error(failed.join("; "));
        if (!req.closed) req.close();
      } finally {
        ep.close();
      }
      if (i === 1 || i % every === 0) out(sample(i, lib));
    }
    listener.close();
  } else {
    const listener = stream!.listen({ hostname: address, port: 0 });
    out({ ready: true, port: listener.addr.port });
    const buf = new Uint8Array(1 << 16);
    for (let i = 1; i <= count; i++) {
      const conn = await acceptOrEnd(() => listener.accept({ timeout: SERVER_IDLE_MS }));
      if (conn === null) break;
      try {
        for (let n; (n = await conn.read(buf, IO)) !== null;) {
          await conn.write(buf.subarray(0, n), IO);
        }
        await conn.closeWrite(IO);
      } catch (e) {
        failed.push(`connection ${i}: ${e instanceof Error ? e.message : String(e)}`);
        if (failed.length > MAX_FAILED_CYCLES) throw new Error(failed.join("; "));
      } finally {
        await conn[Symbol.asyncDispose]();
      }
      if (i === 1 || i % every === 0) out(sample(i, lib));
    }
    listener.close();
  }
  out({ done: true, failed, end: await diagnosis(lib) });
}

/**
 * Failed cycles a run survives (each is counted and reported); more end it. The guest's
 * soft-RoCE loses a message or a CM exchange now and then over thousands of connections.
 */
const MAX_FAILED_CYCLES = 10;

/** A stream cycle's reads and writes give up after this long (the cycle then fails, counted). */
const IO_TIMEOUT_MS = 30_000;
const IO = { timeout: IO_TIMEOUT_MS };
/** A server that has had no connection for this long ends its loop (its client failed cycles). */
const SERVER_IDLE_MS = 90_000;

/** The next connection, or null when none came for {@link SERVER_IDLE_MS}. */
async function acceptOrEnd<T>(accept: () => Promise<T>): Promise<T | null> {
  try {
    return await accept();
  } catch (e) {
    if (e instanceof Error && e.name === "AbortedError") return null;
    throw e;
  }
}

// ------------------------------------------------------------------------------------ TCP roles

async function tcpClient(
  kind: string,
  address: string,
  port: number,
  cycles: number,
  every: number,
) {
  const net = await import("node:net");
  const msg = new Uint8Array(MSG).map((_, i) => i & 0xff);
  const t0 = performance.now();
  for (let i = 1; i <= cycles; i++) {
    const sock = net.connect({ host: address, port });
    sock.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      sock.once("connect", resolve);
      sock.once("error", reject);
    });
    const r = socketReader(sock);
    const payload = kind === "cm" ? enc.encode(`ping c${i} 0`) : msg;
    sock.write(payload);
    const got = new Uint8Array(payload.length);
    if ((await r.readFull(got)) !== payload.length) throw new Error("short echo");
    sock.end();
    await r.end();
    await new Promise<void>((resolve) => {
      if (sock.closed) resolve();
      else sock.once("close", () => resolve());
    });
    if (i === 1 || i % every === 0) out(sample(i));
  }
  const secs = (performance.now() - t0) / 1000;
  out({ done: true, secs, end: await diagnosis() });
}

async function tcpServer(_kind: string, address: string, count: number, every: number) {
  const net = await import("node:net");
  let served = 0;
  let finish: () => void;
  const finished = new Promise<void>((r) => (finish = r));
  const server = net.createServer((sock) => {
    sock.setNoDelay(true);
    sock.on("data", (d) => sock.write(d));
    sock.on("end", () => sock.end());
    sock.on("close", () => {
      served++;
      if (served === 1 || served % every === 0) out(sample(served));
      if (served === count) finish();
    });
  });
  await new Promise<void>((r) => server.listen(0, address, () => r()));
  out({ ready: true, port: (server.address() as AddressInfo).port });
  await finished;
  server.close();
  out({ done: true, end: await diagnosis() });
}

// ------------------------------------------------------------------------------------ main

const [role, kind, ...rest] = h.argv;
const num = (i: number) => Number(rest[i]);
await openProbe();
switch (role) {
  case "client":
    await ourClient(kind, rest[0], num(1), num(2), num(3));
    break;
  case "server":
    await ourServer(kind, rest[0], num(1), num(2));
    break;
  case "tcp-client":
    await tcpClient(kind, rest[0], num(1), num(2), num(3));
    break;
  case "tcp-server":
    await tcpServer(kind, rest[0], num(1), num(2));
    break;
  default:
    throw new Error(`unknown role ${role}: client, server, tcp-client or tcp-server`);
}
h.exit(0);
