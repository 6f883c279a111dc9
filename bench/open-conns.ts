/**
 * Memory per open connection: one client process opens `--warm` stream connections to a server
 * process of the same runtime (one 64-byte message each way on each), then `--n` more, and holds
 * them all open; the client's JS heap (after a full collection), resident set size, open fds and
 * the library's census (`nativeCensus()`: native objects and the native bytes the library holds,
 * rings included) are read after the first `--warm` and after the last, and printed per
 * connection of the `--n`, with the mappings whose resident memory grew most (stderr).
 * Beside it the same client in C over rsocket (bench/c/open-conns.c, against the same server) and
 * over the runtime's own TCP (`node:net`). Sizes: rsocket's defaults (128 KiB rings, 384-deep
 * queues), `--buffer` bytes of ring (default 4 KiB) to show what a connection costs beyond its
 * rings, and then also 16-deep queues (the least a stream takes) to show the device's queues.
 * `--only rdma,c,tcp` runs only those clients; `--by-type` also prints the JS heap's growth per
 * connection by kind of object (bench/heap-by-type.ts; heap snapshots, slow, and they grow the
 * C heap and the engine's heap for good, so that run prints no table of readings).
 *
 *   deno run -A bench/open-conns.ts [--n 100] [--warm 10] [--buffer 4096] [--by-type] [--only rdma]
 *   bun bench/open-conns.ts …
 *
 * Run it where there is an RDMA device (the soft-RoCE guest: `$RDMA_GUEST_IP`). Prints a markdown
 * table for the running runtime.
 *
 * @module
 */

import process from "node:process";
import net from "node:net";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { connect, listen, nativeCensus, type RdmaConn } from "../mod.ts";
import { runChild } from "./child.ts";
import { residentByMapping } from "./proc-memory.ts";
import { heapByType, heapGrowth } from "./heap-by-type.ts";

const isBun = "Bun" in globalThis;
const self = fileURLToPath(import.meta.url);
const argv = process.argv.slice(2);

function arg(name: string, fallback: string): string {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : fallback;
}

const role = arg("role", "driver");
const impl = arg("impl", "rdma");
const address = arg("address", process.env.RDMA_GUEST_IP ?? "127.0.0.1");
const N = Number(arg("n", "100"));
// connections opened before the first reading: what the first ones page in once (the runtime's
// code, the libraries' first allocations) is not a connection's cost
const WARM = Number(arg("warm", "10"));
const BUFFER = Number(arg("buffer", "4096"));
const ring = Number(arg("ring", "0")); // 0: the defaults
const queue = Number(arg("queue", "0")); // 0: the defaults
// also print the JS heap's growth per connection by kind of object (heap snapshots: slow)
const BY_TYPE = argv.includes("--by-type");

/** A full collection (Deno: started with `--expose-gc`). */
function collect(): void {
  const g = globalThis as { gc?: () => void; Bun?: { gc(force: boolean): void } };
  for (let i = 0; i < 3; i++) g.Bun ? g.Bun.gc(true) : g.gc?.();
}

/** Kernel-reported resident memory in bytes. */
function rss(): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"));
  return Number(m![1]) * 1024;
}

interface Reading {
  heap: number;
  rss: number;
  fds: number;
  objects: number;
  nativeBytes: number;
}

async function reading(): Promise<Reading> {
  await new Promise((r) => setTimeout(r, 50));
  collect();
  const census = nativeCensus();
  return {
    heap: process.memoryUsage().heapUsed,
    rss: rss(),
    fds: readdirSync("/proc/self/fd").length,
    objects: census.total,
    nativeBytes: census.bytes,
  };
}

const sizes = () => ({
  ...(ring > 0 ? { sendBufferSize: ring, receiveBufferSize: ring } : {}),
  ...(queue > 0 ? { sendQueueDepth: queue, receiveQueueDepth: queue } : {}),
});

/** The server: accepts, echoes the first 64 bytes of each connection, holds it until killed. */
async function server(): Promise<void> {
  const held: unknown[] = [];
  if (impl === "tcp") {
    const s = net.createServer((sock) => {
      held.push(sock);
      sock.setNoDelay(true);
      sock.on("data", (d) => sock.write(d));
    });
    await new Promise<void>((r) => s.listen(0, address, r));
    console.log(`port ${(s.address() as net.AddressInfo).port}`);
    return;
  }
  const l = listen({ hostname: address, port: 0, ...sizes() });
  console.log(`port ${l.addr.port}`);
  const buf = new Uint8Array(64);
  for (;;) {
    const c = await l.accept();
    held.push(c);
    void (async () => {
      await c.read(buf, { min: 64 });
      await c.write(buf);
    })();
  }
}

/** The client: readings before and after opening N connections, as one JSON line. */
async function client(port: number): Promise<void> {
  const held: (RdmaConn | net.Socket)[] = [];
  const msg = new Uint8Array(64);
  const buf = new Uint8Array(64);
  const open = async (count: number) => {
    for (let i = 0; i < count; i++) {
      if (impl === "tcp") {
        const s = net.connect({ host: address, port, noDelay: true });
        await new Promise<void>((resolve, reject) => {
          s.once("error", reject);
          s.once("connect", () => s.write(msg));
          s.once("data", () => resolve());
        });
        held.push(s);
      } else {
        const c = await connect({ hostname: address, port, ...sizes() });
        await c.write(msg);
        await c.read(buf, { min: 64 });
        held.push(c);
      }
    }
  };
  await open(WARM);
  const before = await reading();
  const mapsBefore = residentByMapping();
  const kindsBefore = nativeCensus().objects;
  const heapBefore = BY_TYPE ? heapByType() : null;
  await open(N);
  const after = await reading();
  const heap = heapBefore ? heapGrowth(heapBefore, heapByType(), N) : undefined;
  // the census's objects per connection, by kind
  const kinds = Object.entries(nativeCensus().objects)
    .map(([k, v]) => [k, (v - (kindsBefore[k] ?? 0)) / N])
    .filter(([, v]) => v !== 0);
  // KiB per connection by mapping, the six that grew most
  const grown = [...residentByMapping()].map(([k, v]) => [k, (v - (mapsBefore.get(k) ?? 0)) / N])
    .sort((a, b) => (b[1] as number) - (a[1] as number)).slice(0, 6);
  console.log(JSON.stringify({ impl, n: N, ring, before, after, grown, kinds, heap }));
  for (const c of held) c instanceof net.Socket ? c.destroy() : c.close();
  process.exit(0);
}

function runtimeArgv(extra: string[]): string[] {
  return isBun
    ? [process.execPath, self, ...extra]
    : [process.execPath, "run", "-A", "--v8-flags=--expose-gc", self, ...extra];
}

/** What one connection costs the client, from its readings before and after (null: not read). */
type PerConnection = Record<keyof Reading, number | null>;

function perConnection(before: Partial<Reading>, after: Partial<Reading>): PerConnection {
  const per = (k: keyof Reading) =>
    before[k] === undefined || after[k] === undefined ? null : (after[k]! - before[k]!) / N;
  return {
    heap: per("heap"),
    rss: per("rss"),
    fds: per("fds"),
    objects: per("objects"),
    nativeBytes: per("nativeBytes"),
  };
}

/** The C client (rsocket), built once. */
let cClient: string | undefined;
function cClientPath(): string {
  if (cClient) return cClient;
  const dir = mkdtempSync(join(tmpdir(), "open-conns-"));
  cClient = join(dir, "open-conns");
  execFileSync("cc", ["-O2", "-o", cClient, join(dirname(self), "c", "open-conns.c"), "-lrdmacm"]);
  return cClient;
}

/** Runs a server (our stream server for `rdma` and `c`), then the client; its cost per connection. */
async function measure(which: string, ringBytes: number, depth: number): Promise<PerConnection> {
  const serverImpl = which === "tcp" ? "tcp" : "rdma";
  const common = ["--address", address, "--n", String(N), "--warm", String(WARM)];
  if (BY_TYPE) common.push("--by-type");
  if (ringBytes) common.push("--ring", String(ringBytes));
  if (depth) common.push("--queue", String(depth));
  let port = 0;
  let ready: () => void;
  const listening = new Promise<void>((r) => (ready = r));
  const srv = runChild(runtimeArgv(["--role", "server", "--impl", serverImpl, ...common]), {
    timeoutMs: 600_000,
    onLine: (l) => {
      if (l.startsWith("port ")) {
        port = Number(l.slice(5));
        ready();
      }
    },
  });
  await Promise.race([listening, srv.done]);
  if (!port) throw new Error(`server did not start: ${(await srv.done).stderr}`);
  const argv = which === "c"
    ? [
      cClientPath(),
      address,
      String(port),
      String(WARM),
      String(N),
      String(ringBytes),
      String(depth),
    ]
    : runtimeArgv(["--role", "client", "--impl", which, "--port", String(port), ...common]);
  const cli = await runChild(argv, { timeoutMs: 600_000 }).done;
  srv.kill();
  const line = cli.stdout.split("\n").find((l) => l.startsWith("{"));
  if (!line) throw new Error(`client failed: ${cli.stderr}`);
  const r = JSON.parse(line) as {
    before: Partial<Reading>;
    after: Partial<Reading>;
    grown?: [string, number][];
    kinds?: [string, number][];
    heap?: [string, number, number][];
  };
  if (r.kinds?.length) {
    const parts = r.kinds.map(([k, v]) => `${k} ${v}`).join(", ");
    console.error(
      `${which} ${ringBytes || "default"} ${depth || "default"}: objects per connection: ${parts}`,
    );
  }
  if (r.grown) {
    const parts = r.grown.map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ");
    console.error(
      `${which} ${ringBytes || "default"} ${
        depth || "default"
      }: KiB per connection by mapping: ${parts}`,
    );
  }
  if (r.heap) {
    console.error(
      `${which} ${ringBytes || "default"} ${depth || "default"}: JS heap per connection:`,
    );
    console.error("| kind | objects | bytes |\n|---|---|---|");
    for (const [k, n, b] of r.heap) console.error(`| ${k} | ${n.toFixed(2)} | ${b.toFixed(0)} |`);
  }
  return perConnection(r.before, r.after);
}

async function driver(): Promise<void> {
  const rt = isBun ? `Bun ${process.versions.bun}` : `Deno ${Deno.version.deno}`;
  const small = `${BUFFER} B rings`;
  const only = arg("only", "");
  const plan: [string, string, number, number][] = [
    ["TCP (`node:net`)", "tcp", 0, 0],
    ["C rsocket, defaults (128 KiB rings, 384-deep queues)", "c", 0, 0],
    ["ours, defaults", "rdma", 0, 0],
    [`C rsocket, ${small}`, "c", BUFFER, 0],
    [`ours, ${small}`, "rdma", BUFFER, 0],
    [`C rsocket, ${small}, 16-deep queues`, "c", BUFFER, 16],
    [`ours, ${small}, 16-deep queues`, "rdma", BUFFER, 16],
  ];
  const rows: [string, PerConnection][] = [];
  for (const [name, which, ringBytes, depth] of plan) {
    if (!only || only.split(",").includes(which)) {
      rows.push([name, await measure(which, ringBytes, depth)]);
    }
  }
  if (BY_TYPE) {
    // a heap snapshot grows the C heap and the engine's heap for good: the readings around it are
    // not what a connection costs
    console.log(
      `\n${rt}: the JS heap by kind is above (stderr); run without --by-type for the table`,
    );
    return;
  }
  const kib = (b: number | null) => (b === null ? "—" : (b / 1024).toFixed(1));
  const one = (v: number | null) => (v === null ? "—" : v.toFixed(1));
  console.log(`\n${rt}, ${N} connections held open by one client process, per connection:\n`);
  console.log(
    "| client | JS heap (KiB) | RSS (KiB) | fds | native objects | native bytes held (KiB) |",
  );
  console.log("|---|---|---|---|---|---|");
  for (const [name, r] of rows) {
    console.log(
      `| ${name} | ${kib(r.heap)} | ${kib(r.rss)} | ${one(r.fds)} | ${one(r.objects)} | ${
        kib(r.nativeBytes)
      } |`,
    );
  }
}

if (role === "server") await server();
else if (role === "client") await client(Number(arg("port", "0")));
else await driver();
