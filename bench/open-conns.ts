/**
 * Memory per open connection: one client process opens `--n` stream connections to a server
 * process of the same runtime, one 64-byte message each way on each, and holds them all open;
 * the client's JS heap (after a full collection), resident set size, open fds and the library's
 * census (`nativeCensus()`: native objects and the native bytes the library holds, rings
 * included) are read before the first connection and after the last, and printed per connection.
 * Beside it the same over the runtime's own TCP (`node:net`). Rings: rsocket's default 128 KiB
 * each way, and `--buffer` bytes (default 4 KiB) to show what a connection costs beyond them.
 *
 *   deno run -A bench/open-conns.ts [--n 100] [--buffer 4096]      bun bench/open-conns.ts …
 *
 * Run it where there is an RDMA device (the soft-RoCE guest: `$RDMA_GUEST_IP`). Prints a markdown
 * table for the running runtime.
 *
 * @module
 */

import process from "node:process";
import net from "node:net";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { connect, listen, nativeCensus, type RdmaConn } from "../mod.ts";
import { runChild } from "./child.ts";

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
const BUFFER = Number(arg("buffer", "4096"));
const ring = Number(arg("ring", "0")); // 0: the defaults

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

const sizes = () => ring > 0 ? { sendBufferSize: ring, receiveBufferSize: ring } : {};

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
  const before = await reading();
  const held: (RdmaConn | net.Socket)[] = [];
  const msg = new Uint8Array(64);
  const buf = new Uint8Array(64);
  for (let i = 0; i < N; i++) {
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
  const after = await reading();
  console.log(JSON.stringify({ impl, n: N, ring, before, after }));
  for (const c of held) c instanceof net.Socket ? c.destroy() : c.close();
  process.exit(0);
}

function runtimeArgv(extra: string[]): string[] {
  return isBun
    ? [process.execPath, self, ...extra]
    : [process.execPath, "run", "-A", "--v8-flags=--expose-gc", self, ...extra];
}

async function measure(which: string, ringBytes: number): Promise<Record<string, number>> {
  const common = ["--impl", which, "--address", address, "--n", String(N)];
  if (ringBytes) common.push("--ring", String(ringBytes));
  let port = 0;
  let ready: () => void;
  const listening = new Promise<void>((r) => (ready = r));
  const srv = runChild(runtimeArgv(["--role", "server", ...common]), {
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
  const cli = await runChild(runtimeArgv(["--role", "client", "--port", String(port), ...common]), {
    timeoutMs: 600_000,
  }).done;
  srv.kill();
  const line = cli.stdout.split("\n").find((l) => l.startsWith("{"));
  if (!line) throw new Error(`client failed: ${cli.stderr}`);
  const r = JSON.parse(line) as { before: Reading; after: Reading };
  const per = (k: keyof Reading) => (r.after[k] - r.before[k]) / N;
  return {
    heap: per("heap"),
    rss: per("rss"),
    fds: per("fds"),
    objects: per("objects"),
    nativeBytes: per("nativeBytes"),
    rssBefore: r.before.rss,
  };
}

async function driver(): Promise<void> {
  const rt = isBun ? `Bun ${process.versions.bun}` : `Deno ${Deno.version.deno}`;
  const rows: [string, Record<string, number>][] = [
    ["TCP (`node:net`)", await measure("tcp", 0)],
    ["ours, 128 KiB rings (default)", await measure("rdma", 0)],
    [`ours, ${BUFFER} B rings`, await measure("rdma", BUFFER)],
  ];
  const kib = (b: number) => (b / 1024).toFixed(1);
  console.log(`\n${rt}, ${N} connections held open by one client process, per connection:\n`);
  console.log("| | JS heap (KiB) | RSS (KiB) | fds | native objects | native bytes held (KiB) |");
  console.log("|---|---|---|---|---|---|");
  for (const [name, r] of rows) {
    console.log(
      `| ${name} | ${kib(r.heap)} | ${kib(r.rss)} | ${r.fds.toFixed(1)} | ${
        r.objects.toFixed(1)
      } | ${kib(r.nativeBytes)} |`,
    );
  }
}

if (role === "server") await server();
else if (role === "client") await client(Number(arg("port", "0")));
else await driver();
