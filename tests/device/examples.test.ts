/**
 * The example tools against the C tools of rdma-core, on the wire: for each pingpong
 * tool, our server with the C client and the C server with our client (and `-e`), in the
 * runtime that runs this test. Both sides must succeed, report the same bytes and
 * iterations, and each side's "remote address" must be the other's "local address".
 * devinfo must print every line `ibv_devinfo` (and `-v`) prints. A tool's first variant runs both
 * ways, its other variants one way per runtime (`directionsFor`; RDMA_INTEROP_FULL=1: all). The CLI tests
 * (`--help`, bad arguments) are host tests: tests/cli.test.ts.
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { deviceTest, notOnIwarp } from "../harness.ts";
import { directionsFor, ours } from "./examples-common.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const isBun = "Bun" in globalThis;
const PAIR_TIMEOUT_MS = 120_000;

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Children still running, killed when a pair fails half-way. */
const running = new Set<ChildProcess>();

function killAll(): void {
  for (const c of running) c.kill("SIGKILL");
}

/** Runs argv, killing it after `timeoutMs`. */
function run(argv: string[], timeoutMs = PAIR_TIMEOUT_MS): Promise<Result> {
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    running.add(child);
    let stdout = "", stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      stderr += `\n[killed after ${timeoutMs} ms]`;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.on("close", (code) => {
      running.delete(child);
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: -1, stdout, stderr: `${stderr}${e.message}` });
    });
  });
}

/**
 * A /proc file's text ("" when unreadable), read by `cat`: Deno grants /proc/net only
 * with --allow-all, which the test profile does not give.
 */
function readProcFile(path: string): string {
  const r = spawnSync("cat", [path], { encoding: "utf8" });
  return r.status === 0 ? r.stdout : "";
}

/** True once something listens on TCP `port` (read from /proc, so no connection is used up). */
function listening(port: number): boolean {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, "0")} `;
  for (const f of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    const text = readProcFile(f);
    for (const line of text.split("\n")) {
      const cols = line.trim().split(/\s+/);
      if (cols[1]?.endsWith(hex.trim()) && cols[3] === "0A") return true;
    }
  }
  return false;
}

async function waitListening(port: number, server: Promise<Result>, ms = 60_000): Promise<void> {
  let done = false;
  server.then(() => (done = true));
  const end = Date.now() + ms;
  while (!listening(port)) {
    if (done) throw new Error(`the server exited before listening on ${port}`);
    if (Date.now() > end) throw new Error(`nothing listened on port ${port} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Summary {
  bytes: number;
  iters: number;
  usecPerIter: number;
  local: string[];
  remote: string[];
}

function summary(name: string, r: Result): Summary {
  const why = `${name} exited ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
  assert.equal(r.code, 0, why);
  const bytes = r.stdout.match(/^(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit\/sec$/m);
  const iters = r.stdout.match(/^(\d+) iters in [\d.]+ seconds = ([\d.]+) usec\/iter$/m);
  assert.ok(bytes && iters, `no result lines: ${why}`);
  assert.doesNotMatch(r.stdout, /invalid data in page/, `-c found a bad page: ${why}`);
  const addr = (label: string) =>
    [...r.stdout.matchAll(
      new RegExp(
        `^  ${label} address: +LID (0x[0-9a-f]{4}), QPN (0x[0-9a-f]{6}), PSN (0x[0-9a-f]{6})[,:] GID (\\S+)$`,
        "gm",
      ),
    )]
      .map((m) => `${m[1]} ${m[2]} ${m[3]} ${m[4]}`);
  return {
    bytes: Number(bytes![1]),
    iters: Number(iters![1]),
    usecPerIter: Number(iters![2]),
    local: addr("local"),
    remote: addr("remote"),
  };
}

let nextPort = 19_600 + Math.floor(Math.random() * 200) * 2 + (isBun ? 1000 : 0);

/** Runs one server/client pair; returns both summaries, after the common checks. */
async function pair(
  server: string[],
  client: (port: number) => string[],
  expect: { bytes: number; iters: number; qps?: number },
): Promise<[Summary, Summary]> {
  const port = nextPort++;
  const srv = run([...server, "-p", String(port)]);
  try {
    await waitListening(port, srv);
  } catch (e) {
    killAll();
    const r = await srv;
    throw new Error(`${(e as Error).message}\nserver stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  }
  const cli = run(client(port));
  const [s, c] = [summary("server", await srv), summary("client", await cli)];
  for (const side of [s, c]) {
    assert.equal(side.bytes, expect.bytes);
    assert.equal(side.iters, expect.iters);
    assert.equal(side.local.length, expect.qps ?? 1);
  }
  assert.deepEqual(s.remote, c.local, "the server saw the client's addresses");
  assert.deepEqual(c.remote, s.local, "the client saw the server's addresses");
  return [s, c];
}

function pingpongSuite(
  tool: "rc" | "uc" | "ud" | "srq",
  size: number,
  variants: { label: string; flags: string[]; qps?: number }[],
): void {
  const cTool = `ibv_${tool}_pingpong`;
  for (const [i, v] of variants.entries()) {
    for (const dir of directionsFor(i === 0)) {
      deviceTest(`examples: ${tool}_pingpong ${v.label}: ${dir}`, async (env) => {
        const iters = 200;
        const common = ["-d", env.device, "-i", String(env.port), "-g", String(env.gidIndex)];
        const args = [...common, "-n", String(iters), ...v.flags];
        const oursSide = (extra: string[]) => ours(`${tool}_pingpong`, [...args, ...extra]);
        const cSide = (extra: string[]) => [cTool, ...args, ...extra];
        const [s, c] = dir === "our server, C client"
          ? await pair(oursSide([]), (p) => cSide(["-p", String(p), env.address]), {
            bytes: size * iters * 2,
            iters,
            qps: v.qps,
          })
          : await pair(cSide([]), (p) => oursSide(["-p", String(p), env.address]), {
            bytes: size * iters * 2,
            iters,
            qps: v.qps,
          });
        const [o, cc] = dir === "our server, C client" ? [s, c] : [c, s];
        console.log(
          `  ${tool}_pingpong ${v.label} (${dir}, ${
            isBun ? "bun" : "deno"
          }): ours ${o.usecPerIter} usec/iter, C ${cc.usecPerIter} usec/iter`,
        );
      }, {
        timeout: 2 * PAIR_TIMEOUT_MS + 30_000,
        needs: notOnIwarp("QPs connected without rdma_cm"),
      });
    }
  }
}

pingpongSuite("rc", 4096, [
  { label: "polling", flags: [] },
  { label: "-e", flags: ["-e"] },
  { label: "-c -N", flags: ["-c", "-N"] },
]);
pingpongSuite("uc", 4096, [
  { label: "polling", flags: [] },
  { label: "-e -c", flags: ["-e", "-c"] },
]);
pingpongSuite("ud", 1024, [{ label: "polling", flags: [] }, { label: "-e", flags: ["-e"] }]);
pingpongSuite("srq", 4096, [{ label: "4 QPs", flags: ["-q", "4"], qps: 4 }]);

/** `ibv_devinfo` with `flags`: its stdout (asserting it succeeded). */
function cDevinfo(flags: string[]): string {
  const c = spawnSync("ibv_devinfo", flags, { encoding: "utf8" });
  assert.equal(c.status, 0, c.stderr);
  return c.stdout;
}

/** Line numbers (1-based) and both texts of the lines where `ours` and `theirs` differ. */
function lineDiff(ours: string, theirs: string): string[] {
  const a = ours.split("\n"), b = theirs.split("\n");
  const out: string[] = [];
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (a[i] !== b[i]) {
      out.push(`line ${i + 1}: ours ${JSON.stringify(a[i])} C ${JSON.stringify(b[i])}`);
    }
  }
  return out;
}

// Every line must be the same, byte for byte, with and without -v. The only thing that
// can legitimately differ is the device's state between the two runs: the GID table grows
// while the guest's IPv6 addresses are still being configured (a `GID[  2]: fec0::…`
// line appears after boot). So ibv_devinfo runs before AND after ours; ours must equal one
// of them, and when it equals neither because the two C runs differ, the state changed
// under us and the comparison is repeated.
deviceTest(
  "examples: devinfo prints every line ibv_devinfo prints, with and without -v",
  async () => {
    for (const flags of [[], ["-v"]]) {
      let diff: string[] = [];
      for (let attempt = 0; attempt < 5; attempt++) {
        const before = cDevinfo(flags);
        const o = await run(ours("devinfo", flags));
        const after = cDevinfo(flags);
        assert.equal(o.code, 0, o.stderr);
        assert.equal(o.stderr, "");
        if (o.stdout === before || o.stdout === after) {
          diff = [];
          if (flags.length) {
            // the nested ibv_device_attr_ex structs and num_comp_vectors are among the lines
            for (
              const line of [
                "\tgeneral_odp_caps:",
                "\txrc_odp_caps:",
                "\ttso_caps:",
                "\trss_caps:",
                "\tpacket_pacing_caps:",
                "\tmax_wq_type_rq:",
                "\tdevice_cap_flags_ex:",
                "\tnum_comp_vectors:",
              ]
            ) assert.ok(o.stdout.includes(line), `-v prints ${JSON.stringify(line)}`);
          }
          break;
        }
        diff = lineDiff(o.stdout, after);
        if (before === after) break; // a real difference: the device did not change
      }
      assert.deepEqual(diff, [], `devinfo ${flags.join(" ")} vs ibv_devinfo ${flags.join(" ")}`);
    }
  },
);

/** The ping text the C client writes for ping `n` of `size` bytes (without the NUL). */
function pingText(n: number, size: number): string {
  let s = `rdma-ping-${n}: `;
  for (let c = 65 + (n % 58); s.length < size - 1;) {
    s += String.fromCharCode(c);
    if (++c > 122) c = 65;
  }
  return s.slice(0, size - 1);
}

/** Runs a client until it gets through (an rdma_cm server is not visible in /proc/net). */
async function clientWithRetry(argv: string[], server: Promise<Result>): Promise<Result> {
  let done = false;
  server.then(() => (done = true));
  const end = Date.now() + 60_000;
  for (;;) {
    const r = await run(argv);
    if (r.code === 0 || done || Date.now() > end) return r;
    await new Promise((res) => setTimeout(res, 500));
  }
}

for (const dir of ["our server, C client", "C server, our client"] as const) {
  deviceTest(`examples: rping -V -v: ${dir}`, async (env) => {
    const port = String(nextPort++);
    const count = 10, size = 64;
    const common = ["-a", env.address, "-p", port, "-C", String(count), "-S", String(size), "-v"];
    const srvArgv = dir === "our server, C client"
      ? ours("rping", ["-s", ...common])
      : ["rping", "-s", ...common];
    const cliArgv = dir === "our server, C client"
      ? ["rping", "-c", "-V", ...common]
      : ours("rping", ["-c", "-V", ...common]);
    const srv = run(srvArgv);
    const cli = await clientWithRetry(cliArgv, srv);
    const s = await srv;
    assert.equal(cli.code, 0, `client: ${cli.stdout}\n${cli.stderr}`);
    assert.equal(s.code, 0, `server: ${s.stdout}\n${s.stderr}`);
    const expected = Array.from({ length: count }, (_, i) => pingText(i, size));
    const cLines = cli.stdout.split("\n").filter((l) => l.startsWith("ping data: "));
    const sLines = s.stdout.split("\n").filter((l) => l.startsWith("server ping data: "));
    assert.deepEqual(cLines, expected.map((t) => `ping data: ${t}`));
    assert.deepEqual(sLines, expected.map((t) => `server ping data: ${t}`));
  }, { timeout: 3 * PAIR_TIMEOUT_MS, needs: notOnIwarp("the VM's iWARP run (rxe only here)") });
}
