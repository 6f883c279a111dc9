/**
 * The long soak: many connection cycles, one after another, of one client process against a
 * server process, with the client's resident set size and the library's census of native objects
 * (`nativeCensus()`) sampled every `--every` cycles without forcing a collection — for this
 * library in Deno and in Bun, beside the same cycles in C (bench/c/soak.c: librdmacm and
 * libibverbs, the same calls in the same order; rsocket for streams) and over each runtime's own
 * TCP (`node:net`), all in one run. Two kinds of cycle:
 *
 * - `cm`: rdma_cm connect (PD, completion channel, CQ, RC QP and a registered buffer made on the
 *   id, receives posted before connect), one message each way, disconnect, everything closed
 *   (tests/device/peers/endpoint.ts, as the cm tests use it); the process imports `cm.ts`;
 * - `stream`: `connect()`, 4 KiB written and echoed back, `closeWrite()`, the end of the stream
 *   read, `close()` and `released` awaited; the process imports `mod.ts`.
 *
 * The TCP loop makes the same cycle over `node:net` (the cm cycle's message is the same ping).
 * The clients and servers are bench/soak-roles.ts: each process loads the library's entry point
 * for its kind (or `node:net`) and measures itself without loading any other `node:` module.
 * After the cycles each client reports what it holds after a full collection, what the engine
 * keeps (V8's heap spaces, JSC's heap), what the C allocator keeps (glibc's `mallinfo2`, through
 * bench/c/soak-probe.c) and its RSS after `malloc_trim(0)`.
 *
 * A failed cycle (a lost message or CM exchange: the guest's soft-RoCE drops one now and then over
 * thousands of connections) is counted, reported with its reason and skipped, as a long-running
 * server survives one failed connection; more than 10 end the run. Every wait of a cycle is
 * bounded (a stream's reads and writes by 30 s), and the C loops bound theirs the same way
 * (poll/rpoll with a timeout before each blocking call).
 *
 * Writes bench/results/soak.md (the table), soak.svg (RSS over the cycles, one panel per kind)
 * and soak.json (every sample). Run it where there is an RDMA device, e.g. in the soft-RoCE VM:
 *
 *   scripts/softroce-vm --timeout 20000 -- node_modules/.bin/deno run -A bench/soak.ts
 *
 * Options: --cycles N (default 10000), --every N (default 100), --kinds cm,stream,
 * --impls c,deno,bun,deno-tcp,bun-tcp, --address IP (default $RDMA_GUEST_IP), --out DIR
 * (default bench/results), --name NAME (files NAME.md/.svg/.json, default soak), --keep (keep
 * what NAME.json holds for the kinds and implementations not run now: re-running one of them),
 * --deno-v8-flags F (more V8 flags for every Deno process, e.g. `--max-semi-space-size=1`).
 *
 * @module
 */

import process from "node:process";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Sample } from "./soak-roles.ts";

const self = fileURLToPath(import.meta.url);
/** The client and server processes (this library's, and the TCP loops). */
const roles = fileURLToPath(new URL("./soak-roles.ts", import.meta.url).href);
const dec = new TextDecoder();

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

// ------------------------------------------------------------------------------------ the driver

/** One implementation of the cycles: how to start its server and client. */
interface Impl {
  readonly name: string;
  readonly color: string;
  readonly dash?: string;
  argv(role: "server" | "client", kind: string, rest: string[]): string[];
}

/** A running process that reports JSON lines. */
function start(argv: string[], env: Record<string, string>) {
  const child: ChildProcess = spawn(argv[0], argv.slice(1), {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  const lines: Record<string, unknown>[] = [];
  let waiters: (() => void)[] = [];
  let pending = "";
  let stderr = "";
  child.stdout!.on("data", (d: Uint8Array) => {
    pending += dec.decode(d);
    for (let nl; (nl = pending.indexOf("\n")) >= 0;) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      try {
        lines.push(JSON.parse(line));
      } catch {
        process.stderr.write(`${argv[0]}: ${line}\n`);
      }
      for (const w of waiters) w();
      waiters = [];
    }
  });
  child.stderr!.on("data", (d: Uint8Array) => (stderr += dec.decode(d)));
  const exited = new Promise<number | null>((r) => {
    child.on("exit", (code) => {
      for (const w of waiters) w();
      waiters = [];
      r(code);
    });
  });
  let code: number | null | undefined;
  exited.then((c) => (code = c));
  return {
    lines,
    exited,
    stderr: () => stderr,
    kill: () => child.kill("SIGKILL"),
    async next(pred: (m: Record<string, unknown>) => boolean, timeoutMs: number) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const m = lines.find(pred);
        if (m) return m;
        if (code !== undefined) throw new Error(`${argv.join(" ")} exited (${code}): ${stderr}`);
        if (Date.now() > end) throw new Error(`${argv.join(" ")}: timed out: ${stderr}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 1000);
        });
      }
    },
  };
}

/** An implementation whose run of one kind failed as a whole. */
interface Failure {
  kind: string;
  impl: string;
  why: string;
}

interface Run {
  kind: string;
  impl: string;
  cycles: number;
  secs: number;
  client: Sample[];
  server: Sample[];
  clientEnd: Record<string, unknown>;
  serverEnd: Record<string, unknown>;
  /** Cycles that failed and were skipped (client's, then server's), with their reasons. */
  failed: string[];
}

async function drive(): Promise<void> {
  const cycles = Number(arg("cycles", "10000"));
  const every = Number(arg("every", "100"));
  const kinds = arg("kinds", "cm,stream").split(",");
  const wanted = arg("impls", "c,deno,bun,deno-tcp,bun-tcp").split(",");
  const address = arg("address", process.env.RDMA_GUEST_IP ?? "");
  const outDir = arg("out", join(self, "..", "results"));
  const name = arg("name", "soak");
  if (!address) throw new Error("no address: pass --address IP or set RDMA_GUEST_IP");
  const dir = mkdtempSync(join(tmpdir(), "soak-"));
  const cbin = join(dir, "soak");
  const c = join(self, "..", "c");
  execFileSync("cc", ["-O2", "-o", cbin, join(c, "soak.c"), "-lrdmacm", "-libverbs"]);
  const probe = join(dir, "libsoak-probe.so");
  execFileSync("cc", ["-O2", "-shared", "-fPIC", "-o", probe, join(c, "soak-probe.c")]);
  const bin = join(self, "..", "..", "node_modules", ".bin");
  const v8 = arg("deno-v8-flags", "");
  const deno = [
    join(bin, "deno"),
    "run",
    "-A",
    `--v8-flags=--expose-gc${v8 ? "," + v8 : ""}`,
    roles,
  ];
  const bun = [join(bin, "bun"), roles];
  const IMPLS: Impl[] = [
    {
      name: "C",
      color: "#444",
      argv: (role, kind, rest) => [cbin, `${kind === "cm" ? "cm" : "rs"}-${role}`, ...rest],
    },
    { name: "Deno", color: "#1a7f37", argv: (role, kind, rest) => [...deno, role, kind, ...rest] },
    { name: "Bun", color: "#c2410c", argv: (role, kind, rest) => [...bun, role, kind, ...rest] },
    {
      name: "Deno TCP",
      color: "#1a7f37",
      dash: "5,4",
      argv: (role, kind, rest) => [...deno, `tcp-${role}`, kind, ...rest],
    },
    {
      name: "Bun TCP",
      color: "#c2410c",
      dash: "5,4",
      argv: (role, kind, rest) => [...bun, `tcp-${role}`, kind, ...rest],
    },
  ];
  const impls = IMPLS.filter((i) => wanted.includes(i.name.toLowerCase().replace(" ", "-")));
  let runs: Run[] = [];
  let failures: Failure[] = [];
  for (const kind of kinds) {
    for (const impl of impls) {
      console.error(`soak: ${kind} × ${cycles}, ${impl.name} ...`);
      try {
        const run = await soakOne(impl, kind, address, cycles, every, probe);
        runs.push(run);
        console.error(`soak: ${kind} ${impl.name}: ${summary(run)}`);
      } catch (e) {
        // one implementation failing leaves the others' figures
        const why = e instanceof Error ? e.message : String(e);
        failures.push({ kind, impl: impl.name, why });
        console.error(`soak: ${kind} ${impl.name} failed: ${why}`);
      }
    }
  }
  mkdirSync(outDir, { recursive: true });
  let allKinds = kinds;
  if (process.argv.includes("--keep")) {
    // what an earlier run wrote stays, but for the implementations and kinds run now
    const redone = (x: { kind: string; impl: string }) =>
      kinds.includes(x.kind) && impls.some((i) => i.name === x.impl);
    try {
      const old = JSON.parse(readFileSync(join(outDir, `${name}.json`), "utf8")) as {
        cycles: number;
        runs: Run[];
        failures?: Failure[];
      };
      if (old.cycles !== cycles) throw new Error(`it ran ${old.cycles} cycles, this ${cycles}`);
      runs = [...old.runs.filter((r) => !redone(r)), ...runs];
      failures = [...(old.failures ?? []).filter((f) => !redone(f)), ...failures];
      allKinds = [...new Set([...old.runs.map((r) => r.kind), ...kinds])];
    } catch (e) {
      console.error(`soak: --keep: nothing kept from ${name}.json (${(e as Error).message})`);
    }
  }
  const order = (r: { kind: string; impl: string }) =>
    allKinds.indexOf(r.kind) * 100 + IMPLS.findIndex((i) => i.name === r.impl);
  runs.sort((a, b) => order(a) - order(b));
  failures.sort((a, b) => order(a) - order(b));
  const shown = IMPLS.filter((i) => runs.some((r) => r.impl === i.name));
  writeFileSync(
    join(outDir, `${name}.json`),
    JSON.stringify({ cycles, every, runs, failures }, null, 1),
  );
  writeFileSync(join(outDir, `${name}.md`), report(runs, cycles, every, name, failures, v8));
  writeFileSync(join(outDir, `${name}.svg`), chart(runs, shown, allKinds));
  console.error(`soak: wrote ${join(outDir, name)}.md, .svg and .json`);
}

/** Runs one implementation's server and client; fails when either fails or a cycle hangs. */
async function soakOne(
  impl: Impl,
  kind: string,
  address: string,
  cycles: number,
  every: number,
  probe: string,
): Promise<Run> {
  const env = { SOAK_PROBE: probe, NO_COLOR: "1" };
  const server = start(impl.argv("server", kind, [address, String(cycles), String(every)]), env);
  // a server that fails ends the run (its client would wait for it forever)
  const serverFailed = server.exited.then((code) =>
    code === 0 ? new Promise<never>(() => {}) : Promise.reject(
      new Error(`the server exited with ${code}: ${server.stderr().slice(-2000)}`),
    )
  );
  serverFailed.catch(() => {});
  try {
    const ready = await Promise.race([server.next((m) => "ready" in m, 120_000), serverFailed]);
    const t0 = performance.now();
    const client = start(
      impl.argv("client", kind, [address, String(ready.port), String(cycles), String(every)]),
      env,
    );
    try {
      // no sample for 10 minutes: the client hangs
      let seen = 0;
      let done: Record<string, unknown> | undefined;
      while (!done) {
        const m = await Promise.race([
          client.next((m) => "done" in m || ("cycle" in m && Number(m.cycle) > seen), 600_000),
          serverFailed,
        ]);
        if ("done" in m) done = m;
        else seen = Number(m.cycle);
      }
      const wall = (performance.now() - t0) / 1000;
      const sdone = await server.next((m) => "done" in m, 120_000);
      await Promise.all([client.exited, server.exited]);
      const samples = (p: { lines: Record<string, unknown>[] }, key: string) =>
        p.lines.filter((m) => key in m || "cycle" in m).map((m) =>
          ({ ...m, cycle: Number(m.cycle ?? m[key]) }) as Sample
        );
      return {
        kind,
        impl: impl.name,
        cycles,
        secs: Number(done.secs ?? wall),
        client: samples(client, "cycle"),
        server: samples(server, "served"),
        clientEnd: (done.end ?? { rss: done.rss }) as Record<string, unknown>,
        serverEnd: (sdone.end ?? { rss: sdone.rss }) as Record<string, unknown>,
        failed: [
          ...((done.failed ?? []) as string[]).map((f) => `client ${f}`),
          ...((sdone.failed ?? []) as string[]).map((f) => `server ${f}`),
        ],
      };
    } finally {
      client.kill();
    }
  } finally {
    server.kill();
  }
}

const MiB = 1 << 20;
const mib = (b: number) => (b / MiB).toFixed(1);

/** RSS growth per cycle (KiB) between the samples nearest to cycles `a` and `b`. */
function slope(s: Sample[], a: number, b: number): number {
  const at = (c: number) =>
    s.reduce((best, x) => Math.abs(x.cycle - c) < Math.abs(best.cycle - c) ? x : best);
  const x = at(a), y = at(b);
  return y.cycle === x.cycle ? 0 : (y.rss - x.rss) / 1024 / (y.cycle - x.cycle);
}

function summary(r: Run): string {
  const s = r.client;
  const first = s[0], last = s[s.length - 1];
  return `RSS ${mib(first.rss)} → ${mib(last.rss)} MiB in ${r.secs.toFixed(0)} s`;
}

function report(
  runs: Run[],
  cycles: number,
  every: number,
  name: string,
  failures: Failure[],
  v8Flags = "",
): string {
  const lines = [
    `# Soak: ${cycles} connection cycles per implementation`,
    "",
    ...(v8Flags ? [`Every Deno process ran with \`--v8-flags=--expose-gc,${v8Flags}\`.`, ""] : []),
    `Client RSS sampled after cycle 1 and every ${every} cycles without a forced collection, with`,
    "its parts: anonymous memory, glibc malloc's (arenas and mmapped chunks), the JS heap",
    "(committed); and the census (`nativeCensus()`: live objects, native blocks and bytes). Growth",
    'per cycle by quarter of the run, in KiB. "settled" is after a full collection at the end;',
    '"trimmed" after `malloc_trim(0)` on top of it.',
    "",
    "| kind | impl | RSS after cycle 1 → end (MiB) | growth: RSS, anon, malloc, JS heap (MiB) | KiB/cycle by quarter | last half KiB/cycle | census objects, blocks, bytes: cycle 1 → end | settled → trimmed (MiB) | server RSS (MiB) | cycles/s |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ];
  const grow = (a: Sample, b: Sample, k: keyof Sample) =>
    a[k] === undefined || b[k] === undefined ? "—" : mib(b[k]! - a[k]!);
  for (const r of runs) {
    const s = r.client;
    const first = s[0], last = s[s.length - 1];
    const n = last.cycle;
    const q = [0, 1, 2, 3].map((k) =>
      slope(s, Math.max(1, (k * n) / 4), ((k + 1) * n) / 4).toFixed(1)
    );
    const census = first.objects === undefined
      ? "—"
      : `${first.objects}, ${first.blocks}, ${first.bytes} → ${last.objects}, ${last.blocks}, ${last.bytes}`;
    const e = r.clientEnd;
    const settled = typeof e.rss === "number"
      ? `${mib(e.rss)}${typeof e.rssTrimmed === "number" ? ` → ${mib(e.rssTrimmed)}` : ""}`
      : "—";
    const sv = r.server.length
      ? `${mib(r.server[0].rss)} → ${mib(r.server[r.server.length - 1].rss)}`
      : "—";
    const parts = ["rss", "anon", "malloc", "heapTotal"] as const;
    lines.push(
      `| ${r.kind} | ${r.impl} | ${mib(first.rss)} → ${mib(last.rss)} | ${
        parts.map((k) => grow(first, last, k)).join(", ")
      } | ${q.join(", ")} | ${slope(s, n / 2, n).toFixed(2)} | ${census} | ${settled} | ${sv} | ${
        r.secs ? (n / r.secs).toFixed(1) : "—"
      } |`,
    );
  }
  for (const f of failures) lines.push("", `Failed: ${f.kind} ${f.impl}: ${f.why}`);
  for (const r of runs) {
    if (r.failed?.length) {
      lines.push(
        "",
        `Cycles that failed and were skipped, ${r.kind} ${r.impl}: ${r.failed.join("; ")}`,
      );
    }
  }
  lines.push("", `![RSS over the cycles](${name}.svg)`, "");
  lines.push("What each client held after cycle 1 and at the end (after a full collection):", "");
  lines.push("```");
  for (const r of runs) {
    lines.push(`${r.kind} ${r.impl}, cycle 1: ${JSON.stringify(r.client[0])}`);
    lines.push(`${r.kind} ${r.impl}, end: ${JSON.stringify(r.clientEnd)}`);
  }
  lines.push("```", "");
  return lines.join("\n");
}

/** One panel per kind: client RSS (MiB) over the cycles, one line per implementation. */
function chart(runs: Run[], impls: Impl[], kinds: string[]): string {
  const W = 900, H = 380, pad = 55, panel = (W - (kinds.length + 1) * pad) / kinds.length;
  const o: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
  ];
  const ymax = Math.max(8, ...runs.flatMap((r) => r.client.map((s) => s.rss / MiB))) * 1.1;
  kinds.forEach((kind, k) => {
    const x0 = pad + k * (panel + pad), y0 = H - pad, h = H - 2 * pad;
    const rs = runs.filter((r) => r.kind === kind);
    const xmax = Math.max(1, ...rs.flatMap((r) => r.client.map((s) => s.cycle)));
    const lx = (c: number) => x0 + (c / xmax) * panel;
    const ly = (v: number) => y0 - (v / ymax) * h;
    o.push(
      `<text x="${x0 + panel / 2}" y="${pad - 25}" text-anchor="middle" font-size="13">${
        kind === "cm" ? "rdma_cm connections" : "stream connections"
      }: client RSS (MiB)</text>`,
      `<line x1="${x0}" y1="${y0}" x2="${x0 + panel}" y2="${y0}" stroke="#999"/>`,
      `<line x1="${x0}" y1="${y0}" x2="${x0}" y2="${y0 - h}" stroke="#999"/>`,
      `<text x="${x0 + panel / 2}" y="${y0 + 30}" text-anchor="middle">cycles</text>`,
    );
    for (let t = 0; t <= 4; t++) {
      const c = (xmax * t) / 4, v = (ymax * t) / 4;
      o.push(
        `<text x="${lx(c)}" y="${y0 + 14}" text-anchor="middle">${Math.round(c)}</text>`,
        `<text x="${x0 - 4}" y="${ly(v) + 4}" text-anchor="end">${v.toFixed(0)}</text>`,
      );
    }
    impls.forEach((impl, n) => {
      const r = rs.find((x) => x.impl === impl.name);
      if (!r) return;
      const pts = r.client.map((s) => `${lx(s.cycle).toFixed(1)},${ly(s.rss / MiB).toFixed(1)}`);
      o.push(
        `<polyline fill="none" stroke="${impl.color}" stroke-width="2"${
          impl.dash ? ` stroke-dasharray="${impl.dash}"` : ""
        } points="${pts.join(" ")}"/>`,
        `<text x="${x0 + panel - 70}" y="${
          y0 - h + 14 * (n + 1)
        }" fill="${impl.color}">${impl.name}</text>`,
      );
    });
  });
  o.push("</svg>");
  return o.join("\n");
}

// ------------------------------------------------------------------------------------ main

await drive();
process.exit(0);
