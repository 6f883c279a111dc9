/**
 * The rdma_cm tools against rdma-core's C tools, on the wire, in the runtime that runs this
 * test: rdma_server/rdma_client, ucmatose (also with `-m`, every id migrated), cmtime (ours
 * server with the C client and the reverse), mckey's send-only join (`-o`) both ways, and the
 * options the soft providers refuse (`mckey -l`, `mckey -M`, `udaddy -f gid`, rc_pingpong's
 * `-o -O -P -t -j`), where ours must end exactly as the C tool does on the same device. Servers
 * are awaited through `rdma res show cm_id` (LISTEN), never a fixed delay. `ucmatose -m` runs one
 * way per runtime (`directionsFor`; RDMA_INTEROP_FULL=1: both).
 */

import assert from "node:assert/strict";
import { deviceTest, notOnIwarp } from "../harness.ts";
import {
  account,
  assertLines,
  DIRECTIONS,
  directionsFor,
  type Ended,
  killAll,
  ours,
  pair,
  port,
  run,
  runtime,
  start,
  waitListening,
} from "./examples-common.ts";

const PAIR = { timeout: 150_000 };

/** Runs a server, waits until it listens on `p`, runs the client; both results. */
async function serverClient(
  argv: { server: string[]; client: string[] },
  p: number,
): Promise<{ s: Ended; c: Ended }> {
  const server = start(argv.server);
  try {
    await waitListening(server, p);
    const c = await run(argv.client);
    return { s: await server.ended, c };
  } finally {
    killAll();
  }
}

for (const dir of DIRECTIONS) {
  deviceTest(`examples: rdma_server/rdma_client: ${dir} (${runtime})`, async (env) => {
    const p = port();
    const args = ["-s", env.address, "-p", String(p)];
    const tools = { server: "rdma_server", client: "rdma_client" };
    const { s, c } = await serverClient(pair(dir, tools, args, args), p);
    assertLines("client", c, ["rdma_client: start", "rdma_client: end 0"]);
    assertLines("server", s, ["rdma_server: start", "rdma_server: end 0"]);
  }, PAIR);
}

const UCMATOSE_SERVER = [
  "cmatose: starting server",
  "initiating data transfers",
  "completing sends",
  "receiving data transfers",
  "data transfers complete",
];
const UCMATOSE_CLIENT = [
  "cmatose: starting client",
  "cmatose: connecting",
  "receiving data transfers",
  "sending replies",
  "data transfers complete",
];
const MIGRATE = ["migrating to new event channel"];
const END = ["test complete", "return status 0"];

for (const migrate of [false, true]) {
  for (const dir of directionsFor(!migrate)) {
    const label = `${migrate ? "-m, " : ""}${dir}`;
    deviceTest(`examples: ucmatose ${label} (${runtime})`, async (env) => {
      const p = port();
      const common = [
        "-p",
        String(p),
        "-c",
        "2",
        "-C",
        "10",
        "-S",
        "200",
        ...(migrate ? ["-m"] : []),
      ];
      const tools = { server: "ucmatose", client: "ucmatose" };
      const { s, c } = await serverClient(
        pair(dir, tools, ["-b", env.address, ...common], ["-s", env.address, ...common]),
        p,
      );
      const m = migrate ? MIGRATE : [];
      assertLines("client", c, [...UCMATOSE_CLIENT, ...m, ...END]);
      assertLines("server", s, [
        ...UCMATOSE_SERVER,
        ...m,
        "cmatose: disconnecting",
        "disconnected",
        ...END,
      ]);
    }, PAIR);
  }
}

const CMTIME_STEPS = "create id,resolve addr,resolve route,create qp,connect,disconnect,destroy"
  .split(",");

for (const dir of DIRECTIONS) {
  deviceTest(`examples: cmtime: ${dir} (${runtime})`, async (env) => {
    const p = port();
    const at = ["-p", String(p)];
    const tools = { server: "cmtime", client: "cmtime" };
    const argv = pair(dir, tools, ["-b", env.address, ...at], [
      "-s",
      env.address,
      ...at,
      "-c",
      "20",
    ]);
    const server = start(argv.server);
    try {
      await waitListening(server, p);
      const c = await run(argv.client);
      assertLines("client", c, [
        "creating id",
        "resolving address",
        "resolving route",
        "creating qp",
        "connecting",
        "disconnecting",
        "destroying id",
        "step              total ms     max ms     min us  us / conn",
      ]);
      for (const step of CMTIME_STEPS) {
        const row = new RegExp(`^${step.padEnd(13)}: (( +\\d+\\.\\d\\d){4})$`, "m");
        const m = c.stdout.match(row);
        assert.ok(m, `no row for ${step}: ${account("client", c)}`);
      }
      assert.doesNotMatch(c.stdout, /event: |failing connection request|error/);
      // the server runs until stopped; it must still be there, having failed nothing
      assert.equal(server.proc.stdout().includes("failing connection request"), false);
    } finally {
      killAll();
    }
  }, PAIR);
}

const IB_ONLY = { ...PAIR, needs: notOnIwarp("multicast") };

let group = 30 + Math.floor(Math.random() * 100) + (runtime === "bun" ? 120 : 0);

for (
  const [label, recv, send] of [["our send-only sender, C receiver", "c", "ours"], [
    "C send-only sender, our receiver",
    "ours",
    "c",
  ]] as const
) {
  deviceTest(`examples: mckey -o: ${label} (${runtime})`, async (env) => {
    const g = `239.5.${group++}.1`;
    const common = ["-m", g, "-b", env.address, "-C", "5", "-S", "100"];
    const receiver = start(recv === "ours" ? ours("mckey", common) : ["mckey", ...common]);
    try {
      if (recv === "ours") {
        await receiver.proc.waitFor(/^mckey: joined dgid: /m, { timeoutMs: 60_000 });
      } else await new Promise((r) => setTimeout(r, 1500));
      const sArgs = [...common, "-s", "-o"];
      const sender = await run(send === "ours" ? ours("mckey", sArgs) : ["mckey", ...sArgs]);
      const r = await receiver.ended;
      assertLines("sender", sender, [
        "mckey: starting client",
        "mckey: joining",
        "initiating data transfers",
        "data transfers complete",
        ...END,
      ]);
      assertLines("receiver", r, [
        "mckey: starting server",
        "mckey: joining",
        "receiving data transfers",
        "data transfers complete",
        ...END,
      ]);
    } finally {
      killAll();
    }
  }, IB_ONLY);
}

/** The lines a run printed, stdout then stderr, without the tool's start-up noise. */
/**
 * The output lines, stdout then stderr. A line that prints errno right after `perror` printed an
 * errno glibc has no text for is normalised: whether glibc's `strerror` leaves EINVAL behind then
 * depends on the locale environment (the C tool prints either), and ours prints EINVAL.
 */
function lines(r: Ended): string[] {
  return [...r.stdout.split("\n"), ...r.stderr.split("\n")]
    .filter((l) => l.trim() !== "")
    .map((l) =>
      l.replace(
        /^(mckey: resolve addr failure): (Invalid argument|Unknown error \d+)$/,
        "$1: <errno>",
      )
    );
}

/** Runs ours and the C tool with the same arguments and asserts that they end the same way. */
async function sameEnd(
  tool: string,
  cTool: string,
  args: string[],
  timeoutMs = 30_000,
): Promise<Ended> {
  const [o, c] = [
    await run(ours(tool, args), { timeoutMs }),
    await run([cTool, ...args], { timeoutMs }),
  ];
  assert.equal(o.code, c.code, `${account("ours", o)}\n${account("C", c)}`);
  assert.deepEqual(lines(o), lines(c), `${account("ours", o)}\n${account("C", c)}`);
  return c;
}

deviceTest(
  `examples: mckey -l and -M end as the C tool does on this device (${runtime})`,
  async (env) => {
    const g = `239.5.${group++}.2`;
    const l = await sameEnd("mckey", "mckey", ["-m", g, "-b", env.address, "-C", "1", "-l"]);
    console.log(`  mckey -l on ${env.device}: ${lines(l).join(" | ")}`);
    const m = await sameEnd("mckey", "mckey", ["-M", "ff0e::1:2", "-b", env.address, "-C", "1"]);
    console.log(`  mckey -M on ${env.device}: ${lines(m).join(" | ")}`);
    await sameEnd("mckey", "mckey", ["-M", "ff0e::1:2", "-C", "1"]);
  },
  IB_ONLY,
);

deviceTest(
  `examples: udaddy -f gid ends as the C tool does on this device (${runtime})`,
  async (env) => {
    const gid = (await run([
      "cat",
      `/sys/class/infiniband/${env.device}/ports/${env.port}/gids/${env.gidIndex}`,
    ])).stdout.trim();
    const c = await sameEnd("udaddy", "udaddy", ["-f", "gid", "-s", gid, "-C", "1"]);
    console.log(`  udaddy -f gid -s ${gid} on ${env.device}: ${lines(c).join(" | ")}`);
  },
  IB_ONLY,
);

deviceTest(
  `examples: rc_pingpong's -o -O -P -t -j end as the C tool does on this device (${runtime})`,
  async (env) => {
    for (const flags of [["-o"], ["-O"], ["-P"], ["-o", "-P"], ["-t"], ["-j"], ["-o", "-j"]]) {
      const args = ["-d", env.device, "-g", String(env.gidIndex), "-p", String(port()), ...flags];
      const c = await sameEnd("rc_pingpong", "ibv_rc_pingpong", args, 15_000);
      assert.notEqual(
        c.code,
        null,
        `ibv_rc_pingpong ${flags.join(" ")} did not fail on ${env.device}: it has the feature`,
      );
      console.log(`  rc_pingpong ${flags.join(" ")} on ${env.device}: ${lines(c).join(" | ")}`);
    }
  },
);
