/**
 * Where a process's first connection puts its resident memory: RSS after each step of one client
 * (the runtime bare, the library imported, a device opened, one stream connection with one 64-byte
 * message each way, closed), beside the same client over the runtime's own TCP (`node:net`
 * imported, one connection, the same message), each step after a full collection, with the growth
 * of every mapping that grew by 200 KiB or more: which part is the runtime's own executable paged
 * in, which the shared libraries, which the anonymous memory the engine and the C allocator hold.
 * The peer is a child process of the same runtime (an echo server). Run it where there is an RDMA
 * device, once per runtime and kind, e.g. in the soft-RoCE VM:
 *
 *   scripts/softroce-vm -- node_modules/.bin/deno run -A --v8-flags=--expose-gc bench/rss-steps.ts rdma
 *   scripts/softroce-vm -- node_modules/.bin/bun bench/rss-steps.ts tcp
 *
 * Arguments: `rdma` (default) or `tcp`; --address IP (default $RDMA_GUEST_IP), --port N
 * (default 7461). Prints one line per step; no figure is asserted.
 *
 * @module
 */

import process from "node:process";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { residentByMapping } from "./proc-memory.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const kind = process.argv.includes("tcp") ? "tcp" : "rdma";
const address = arg("address", process.env.RDMA_GUEST_IP ?? "");
const port = Number(arg("port", "7461"));
const self = new URL(import.meta.url).pathname;

/** MiB of the `/proc/self/status` field `key`. */
function status(key: string): string {
  const kib = Number(
    new RegExp(`${key}:\\s+(\\d+)`).exec(readFileSync("/proc/self/status", "utf8"))![1],
  );
  return (kib / 1024).toFixed(1);
}

const gc = (globalThis as { gc?: () => void }).gc ??
  (() => (globalThis as unknown as { Bun: { gc(full: boolean): void } }).Bun.gc(true));
let before = new Map<string, number>();

/** Prints the step: RSS and its parts, and the mappings that grew or shrank by 200 KiB or more. */
function step(name: string): void {
  gc();
  const now = residentByMapping();
  const moved = [...now]
    .map(([k, v]) => [k, v - (before.get(k) ?? 0)] as const)
    .filter(([, d]) => Math.abs(d) >= 200)
    .sort((a, b) => b[1] - a[1])
    .map(([k, d]) => `${k} ${d > 0 ? "+" : ""}${d}`);
  before = now;
  console.log(
    `${kind} ${name}: rss ${status("VmRSS")} MiB (anon ${status("RssAnon")}, file ${
      status("RssFile")
    }, shmem ${status("RssShmem")}) | KiB: ${moved.join(", ")}`,
  );
}

async function server(): Promise<void> {
  if (kind === "tcp") {
    const net = await import("node:net");
    net.createServer((s) => s.on("data", (d) => s.write(d))).listen(port, address, () => {
      console.log("listening");
    });
    return;
  }
  const { listen } = await import("../mod.ts");
  const listener = listen({ hostname: address, port });
  console.log("listening");
  for await (const conn of listener) {
    (async () => {
      const buf = new Uint8Array(64);
      for (let n; (n = await conn.read(buf)) !== null;) await conn.write(buf.subarray(0, n));
    })().catch(() => {});
  }
}

async function client(): Promise<void> {
  step("bare");
  const argv = "Bun" in globalThis
    ? [self, "--role", "server", kind, "--address", address, "--port", String(port)]
    : ["run", "-A", self, "--role", "server", kind, "--address", address, "--port", String(port)];
  const peer = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve) => {
    peer.stdout!.on("data", (d) => String(d).includes("listening") && resolve());
  });
  const message = new Uint8Array(64);
  try {
    if (kind === "tcp") {
      const net = await import("node:net");
      step("imported");
      const s = net.connect(port, address);
      await new Promise((r) => s.once("connect", r));
      s.write(message);
      await new Promise((r) => s.once("data", r));
      step("connected once");
      s.destroy();
    } else {
      const lib = await import("../mod.ts");
      step("imported");
      lib.openDevice(process.env.RDMA_DEVICE ?? lib.listDevices()[0].name).close();
      step("device opened");
      const conn = await lib.connect({ hostname: address, port });
      await conn.write(message);
      await conn.read(new Uint8Array(64), { min: 64 });
      step("connected once");
      conn.close();
      await conn.released;
      step("closed");
    }
  } finally {
    peer.kill();
  }
}

if (!address) throw new Error("no address: run inside the VM or pass --address");
if (arg("role", "client") === "server") await server();
else {
  await client();
  process.exit(0);
}
