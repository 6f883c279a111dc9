/**
 * The command-line surface of the example tools and the perftest tools, which needs no device:
 * `--help` exits 0 with the usage and the permissions, a bad argument prints the usage and
 * exits 1 without a stack trace. Run on the host (a process start in the emulated guest costs
 * seconds); the tools' device behaviour is tested in tests/device/.
 */

import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { account, ours, oursAt, PERFTEST_TOOLS, run } from "./device/examples-common.ts";

const EXAMPLES = [
  "devinfo",
  "rc_pingpong",
  "uc_pingpong",
  "ud_pingpong",
  "srq_pingpong",
  "rping",
  "udaddy",
  "mckey",
  "rdma_server",
  "rdma_client",
  "ucmatose",
  "cmtime",
  "rstream",
  "rcopy",
  "riostream",
];

/** Runs all of `argvs` at once (the starts dominate) and returns their ends in order. */
function runAll(argvs: string[][]) {
  return Promise.all(argvs.map((argv) => run(argv, { timeoutMs: 60_000 })));
}

test("cli: every example's and perftest tool's --help exits 0 with the usage and the permissions", async () => {
  const tools = [
    ...EXAMPLES.map((t) => ({ name: t, argv: ours(t, ["--help"]) })),
    ...PERFTEST_TOOLS.map((t) => ({ name: t, argv: oursAt(`bench/perftest/${t}.ts`, ["--help"]) })),
  ];
  const ends = await runAll(tools.map((t) => t.argv));
  ends.forEach((r, i) => {
    const name = tools[i].name;
    assert.equal(r.code, 0, account(name, r));
    assert.match(r.stdout, /^Usage:/, name);
    assert.match(r.stdout, /Deno permissions: --allow-ffi/, name);
  });
});

test("cli: an unknown flag prints the usage and exits 1, no stack trace", async () => {
  const tools = EXAMPLES.filter((t) => t !== "rping");
  const ends = await runAll(tools.map((t) => ours(t, ["--no-such-flag"])));
  ends.forEach((r, i) => {
    assert.equal(r.code, 1, account(tools[i], r));
    assert.match(r.stderr, /Usage:/, tools[i]);
    assert.doesNotMatch(r.stderr, /^\s+at /m, tools[i]);
  });
});

test("cli: bad values are usage errors that name the problem, no stack trace", async () => {
  const cases: [string, string[], RegExp][] = [
    ["examples/rc_pingpong.ts", ["-n", "many"], /--iters: not a number: "many"/],
    ["examples/udaddy.ts", ["-C", "many"], /Usage:/],
    ["examples/mckey.ts", ["-C", "many"], /Usage:/],
    ["examples/mckey.ts", ["-s"], /-m multicast_address is required/],
    ["examples/rping.ts", ["-c"], /the client needs -a addr/],
    ["examples/riostream.ts", ["-T", "x"], /unknown test option "x"/],
    ["examples/riostream.ts", ["-f", "gid"], /-f gid \(AF_IB addresses\) is not supported/],
    ["bench/perftest/send_lat.ts", ["--no-such-flag"], /no-such-flag/],
    ["bench/perftest/write_bw.ts", ["-e"], /Unknown option '-e'/],
    [
      "bench/perftest/atomic_lat.ts",
      ["-s", "16"],
      /Message size cannot be changed for Atomic tests/,
    ],
    ["bench/perftest/read_bw.ts", ["-c", "UD"], /UD connection only possible in SEND verb/],
    ["bench/perftest/send_bw.ts", ["-n", "many"], /--iters: not a number/],
    ["bench/perftest/send_lat.ts", ["-q", "2"], /Unknown option '-q'/],
  ];
  const ends = await runAll(cases.map(([path, args]) => oursAt(path, args)));
  ends.forEach((r, i) => {
    const [path, args, msg] = cases[i];
    const what = `${path} ${args.join(" ")}`;
    assert.equal(r.code, 1, account(what, r));
    assert.match(r.stderr, msg, what);
    assert.doesNotMatch(r.stderr, /^\s+at /m, what);
  });
});

test("perftest -D phases: START → SAMPLE → STOP_SAMPLE → END, the clock read once in CLOCK_EVERY polls", async () => {
  const { CLOCK_EVERY, END, Phases, SAMPLE, START, STOP_SAMPLE } = await import(
    "../bench/perftest/_core/clock.ts"
  );
  const ph = new Phases(0.2, 0.05); // 200 ms: 50 ms margin, 100 ms sampled, 50 ms margin
  const t0 = performance.now();
  ph.start(t0);
  const first: number = ph.state;
  const seen = [first];
  let polls = 0;
  let sampled = 0;
  while (ph.state !== END && performance.now() - t0 < 5000) {
    const state = ph.poll();
    polls++;
    if (state === SAMPLE) sampled++;
    if (state !== seen[seen.length - 1]) {
      seen.push(state);
      // only a poll that reads the clock can see a phase change
      assert.equal(polls % CLOCK_EVERY, 0, `a phase changed at poll ${polls}`);
    }
  }
  assert.deepEqual(seen, [START, SAMPLE, STOP_SAMPLE, END]);
  const window = ph.sampleEnd - ph.sampleStart;
  // about the duration less both margins; each end is seen when a clock read notices it
  assert.ok(window >= 75 && window < 150, `sampled window ${window} ms`);
  assert.ok(sampled > 0);
});

test("cli: the tools' option parser takes getopt's forms and names each mistake", async () => {
  const { parseOptions } = await import("../examples/_common/args.ts");
  const o = {
    size: { type: "string", short: "S" },
    verbose: { type: "boolean", short: "v", multiple: true },
    server: { type: "boolean", short: "s" },
    addr: { type: "string", short: "a" },
  } as const;
  assert.deepEqual(parseOptions(["-S", "64", "-vvs", "-a10.0.0.1", "host", "--", "-x"], o), {
    values: { size: "64", verbose: [true, true], server: true, addr: "10.0.0.1" },
    positionals: ["host", "-x"],
  });
  assert.deepEqual(parseOptions(["--size=-1", "--addr", "-a", "--verbose"], o).values, {
    size: "-1",
    addr: "-a",
    verbose: [true],
  });
  assert.throws(() => parseOptions(["-x"], o), /^Error: Unknown option '-x'$/);
  assert.throws(() => parseOptions(["--nope"], o), /Unknown option '--nope'/);
  assert.throws(() => parseOptions(["-S"], o), /Option '-S, --size' needs a value/);
  assert.throws(() => parseOptions(["--server=1"], o), /'-s, --server' does not take a value/);
  assert.throws(() => parseOptions(["--toString"], o), /Unknown option '--toString'/);
});
