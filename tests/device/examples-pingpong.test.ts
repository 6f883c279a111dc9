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
import { spawnSync } from "node:child_process";
import { deviceTest, notOnIwarp } from "../harness.ts";
import {
  directionsFor,
  type Ended,
  isBun,
  killAll,
  ours,
  port as nextPort,
  run,
  start,
  waitListening,
} from "./examples-common.ts";

const PAIR_TIMEOUT_MS = 120_000;

interface Summary {
  bytes: number;
  iters: number;
  usecPerIter: number;
  local: string[];
  remote: string[];
}

function summary(name: string, r: Ended): Summary {
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

/** Runs one server/client pair; returns both summaries, after the common checks. */
async function pair(
  server: string[],
  client: (port: number) => string[],
  expect: { bytes: number; iters: number; qps?: number },
): Promise<[Summary, Summary]> {
  const port = nextPort();
  const timeoutMs = PAIR_TIMEOUT_MS;
  const srv = start([...server, "-p", String(port)], { timeoutMs });
  try {
    await waitListening(srv, port, "tcp");
  } catch (e) {
    killAll();
    throw e;
  }
  const cli = run(client(port), { timeoutMs });
  const [s, c] = [summary("server", await srv.ended), summary("client", await cli)];
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

for (const dir of ["our server, C client", "C server, our client"] as const) {
  deviceTest(`examples: rping -V -v: ${dir}`, async (env) => {
    const port = nextPort();
    const count = 10, size = 64;
    const common = [
      "-a",
      env.address,
      "-p",
      String(port),
      "-C",
      String(count),
      "-S",
      String(size),
      "-v",
    ];
    const srvArgv = dir === "our server, C client"
      ? ours("rping", ["-s", ...common])
      : ["rping", "-s", ...common];
    const cliArgv = dir === "our server, C client"
      ? ["rping", "-c", "-V", ...common]
      : ours("rping", ["-c", "-V", ...common]);
    const srv = start(srvArgv, { timeoutMs: PAIR_TIMEOUT_MS });
    try {
      await waitListening(srv, port);
    } catch (e) {
      killAll();
      throw e;
    }
    const cli = await run(cliArgv, { timeoutMs: PAIR_TIMEOUT_MS });
    const s = await srv.ended;
    assert.equal(cli.code, 0, `client: ${cli.stdout}\n${cli.stderr}`);
    assert.equal(s.code, 0, `server: ${s.stdout}\n${s.stderr}`);
    const expected = Array.from({ length: count }, (_, i) => pingText(i, size));
    const cLines = cli.stdout.split("\n").filter((l) => l.startsWith("ping data: "));
    const sLines = s.stdout.split("\n").filter((l) => l.startsWith("server ping data: "));
    assert.deepEqual(cLines, expected.map((t) => `ping data: ${t}`));
    assert.deepEqual(sLines, expected.map((t) => `server ping data: ${t}`));
  }, { timeout: 3 * PAIR_TIMEOUT_MS, needs: notOnIwarp("the VM's iWARP run (rxe only here)") });
}
