/**
 * udaddy and mckey against the C tools of rdma-core, on the wire (IB/RoCE only: UD and
 * multicast have no iWARP form). udaddy: our server with the C client, the C server
 * with our client, and ours against ours with two connections; both sides must
 * print the C tool's progress lines through "data transfers complete" and "return
 * status 0". mckey: a receiver joins first (its "joined" line is awaited), then a
 * sender of the other kind joins and sends; the receiver must count every datagram.
 * In the two-guest run the servers and receivers run on guest 1. The CLI tests (`--help`, bad
 * arguments) are host tests: tests/cli.test.ts.
 */

import assert from "node:assert/strict";
import { deviceTest, notOnIwarp } from "../harness.ts";
import {
  account,
  assertLines,
  isBun,
  killAll,
  ours,
  run,
  start,
  waitListening,
} from "./examples-common.ts";
import { serverAddress } from "./peers/spawn.ts";

const RUN_TIMEOUT_MS = 60_000;
/** udaddy's fixed rdma_cm port (both tools). */
const UDADDY_PORT = 7174;

const UDADDY_SERVER = [
  "udaddy: starting server",
  "receiving data transfers",
  "sending replies",
  "data transfers complete",
  "test complete",
  "return status 0",
];
const UDADDY_CLIENT = [
  "udaddy: starting client",
  "udaddy: connecting",
  "initiating data transfers",
  "receiving data transfers",
  "data transfers complete",
  "test complete",
  "return status 0",
];

const IB_ONLY = { needs: notOnIwarp("UD and multicast") };

for (
  const [label, srv, cli, connections] of [
    ["our server, C client", "ours", "c", 1],
    ["C server, our client", "c", "ours", 1],
    ["ours against ours, 2 connections", "ours", "ours", 2],
  ] as const
) {
  deviceTest(`examples: udaddy: ${label}`, async (env) => {
    const common = ["-C", "25", "-S", "256", "-c", String(connections)];
    const srvArgs = ["-b", serverAddress(env), ...common];
    const cliArgs = ["-s", serverAddress(env), ...common];
    const server = start(
      srv === "ours" ? ours("udaddy", srvArgs) : ["udaddy", ...srvArgs],
      { timeoutMs: RUN_TIMEOUT_MS, where: "peer" },
    );
    try {
      // one client run: a retried client would leave the server holding a connection of the
      // failed run and waiting for its data (ours against ours then hung until the timeout)
      await waitListening(server, UDADDY_PORT);
      const c = await run(
        cli === "ours" ? ours("udaddy", cliArgs) : ["udaddy", ...cliArgs],
        { timeoutMs: RUN_TIMEOUT_MS },
      );
      const s = await server.ended;
      // a client's failure names the server's side too (it runs on the peer guest across hosts)
      assertLines(`client (and ${account("the server", s)})`, c, UDADDY_CLIENT);
      assertLines("server", s, UDADDY_SERVER);
      assert.doesNotMatch(s.stdout, /failing connection request/);
    } finally {
      killAll();
    }
  }, { timeout: 150_000, ...IB_ONLY });
}

let group = 10 + Math.floor(Math.random() * 100) + (isBun ? 120 : 0);

for (
  const [label, recv, send] of [
    ["our sender, C receiver", "c", "ours"],
    ["C sender, our receiver", "ours", "c"],
    ["ours against ours", "ours", "ours"],
  ] as const
) {
  deviceTest(`examples: mckey: ${label}`, async (env) => {
    const g = `239.2.${group++}.1`;
    const common = ["-m", g, "-C", "10", "-S", "200"];
    const rArgs = [...common, "-b", serverAddress(env)];
    const receiver = start(
      recv === "ours" ? ours("mckey", rArgs) : ["mckey", ...rArgs],
      { timeoutMs: RUN_TIMEOUT_MS, where: "peer" },
    );
    try {
      // the C tool's stdout is a pipe here, so fully buffered: its "joined" line only
      // shows at exit; give it time to join instead (the sender pauses 3 s after its join)
      if (recv === "ours") {
        await receiver.proc.waitFor(/^mckey: joined dgid: /m, { timeoutMs: 30_000 });
      } else await new Promise((r) => setTimeout(r, 1500));
      const sArgs = [...common, "-b", env.address, "-s"];
      const sender = await run(
        send === "ours" ? ours("mckey", sArgs) : ["mckey", ...sArgs],
        { timeoutMs: RUN_TIMEOUT_MS },
      );
      const r = await receiver.ended;
      const joined = /^mckey: joined dgid: (\S+) mlid 0x([0-9a-f]+) sl (\d+)$/m;
      assertLines("sender", sender, [
        "mckey: starting client",
        "mckey: joining",
        "initiating data transfers",
        "data transfers complete",
        "test complete",
        "return status 0",
      ]);
      assertLines("receiver", r, [
        "mckey: starting server",
        "mckey: joining",
        "receiving data transfers",
        "data transfers complete",
        "test complete",
        "return status 0",
      ]);
      // both joined the same group: the same dgid (the group as a GID)
      assert.equal(sender.stdout.match(joined)?.[1], r.stdout.match(joined)?.[1]);
      assert.ok(r.stdout.match(joined)![1].endsWith(g), `dgid of ${g}: ${r.stdout}`);
    } finally {
      killAll();
    }
  }, { timeout: 120_000, ...IB_ONLY });
}
