/**
 * Two guests (`scripts/test --two-hosts`, i.e. `scripts/softroce-vm --hosts 2`):
 * this test runs on guest 0, its peers on guest 1 through the peer agent.
 * Checks the remote process plumbing itself (output, exit status, SIGKILL,
 * environment) and RC over rdma_cm between two kernels: the library's client
 * here, the peer's server there, and the C ibv_rc_pingpong there against the
 * library's rc_pingpong example here.
 */

import assert from "node:assert/strict";
import os from "node:os";
import process from "node:process";
import { cmConnect, CmEventType, QpState } from "../lib.ts";
import { deviceTest, notOnIwarp } from "../harness.ts";
import { Endpoint } from "./peers/endpoint.ts";
import { hasRemotePeer, peerAddress, spawnPeer, spawnRemote, text } from "./peers/spawn.ts";

const needsPeer = () => hasRemotePeer() ? false : "needs a peer guest (scripts/test --two-hosts)";
const enc = (s: string) => new TextEncoder().encode(s);

deviceTest("two hosts: spawnRemote runs on the peer guest with its own environment", async () => {
  const p = spawnRemote([
    "bash",
    "-c",
    'echo "$(hostname) $RDMA_HOST_INDEX $RDMA_GUEST_IP $X"; echo e >&2; exit 7',
  ], {
    env: { X: "from-0" },
  });
  assert.equal(p.where, "remote");
  assert.equal(await p.exited, 7);
  const [host, index, ip, x] = p.stdout().trim().split(" ");
  assert.notEqual(host, os.hostname());
  assert.equal(index, "1");
  assert.equal(ip, process.env.RDMA_PEER_IP);
  assert.equal(x, "from-0");
  assert.equal(p.stderr(), "e\n");
}, { needs: needsPeer });

deviceTest("two hosts: kill() ends the remote process with SIGKILL", async () => {
  const p = spawnRemote(["bash", "-c", "echo started; exec sleep 600"]);
  await p.waitFor(/started/, { timeoutMs: 30_000 });
  const t0 = Date.now();
  p.kill();
  assert.equal(await p.exited, null);
  assert.ok(Date.now() - t0 < 10_000, "ended within 10 s");
}, { needs: needsPeer });

deviceTest("two hosts: rdma_cm RC, server on the peer guest, client here", async () => {
  const address = peerAddress();
  const peer = spawnPeer("cm-rc-server.ts", [address, "1"]);
  assert.equal(peer.where, "remote");
  try {
    const { port } = await peer.next((m) => "ready" in m, 120_000) as { port: number };
    let ep: Endpoint | undefined;
    const { id, event } = await cmConnect({
      address,
      port,
      privateData: enc("across-0"),
      timeout: 30_000,
      beforeConnect: (id) => {
        ep = new Endpoint(id);
      },
    });
    try {
      assert.equal(event.type, CmEventType.ESTABLISHED);
      assert.equal(text(event.privateData), "welcome:0");
      assert.equal(id.qp!.state, QpState.RTS);
      assert.equal(id.peerAddress?.address, address);
      assert.equal(id.localAddress?.address, process.env.RDMA_GUEST_IP);
      for (let i = 0; i < 3; i++) {
        await ep!.send(enc(`ping across-0 ${i}`));
        assert.equal(text((await ep!.recv()).bytes), `pong across-0 ${i}`);
      }
      await id.disconnect();
    } finally {
      id.close();
      ep?.close();
    }
    const served = await peer.next((m) => "served" in m, 60_000);
    assert.equal(served.messages, 3);
    assert.equal(await peer.exited, 0);
  } finally {
    peer.kill();
  }
}, { needs: (env) => needsPeer() || notOnIwarp("raw RC verbs on this path")(env) });

deviceTest(
  "two hosts: C ibv_rc_pingpong on the peer guest, examples/rc_pingpong.ts here",
  async (env) => {
    const port = 19000 + Math.floor(Math.random() * 1000);
    const flags = ["-d", env.device, "-g", String(env.gidIndex), "-n", "100", "-p", String(port)];
    // the peer's GID index is its own (same device name, same address family)
    // the C server, and a note once its TCP port listens (it prints its
    // address just before it listens, so that line is no signal)
    const hex = port.toString(16).toUpperCase().padStart(4, "0");
    const server = spawnRemote([
      "bash",
      "-c",
      `timeout 120 ibv_rc_pingpong -d "$RDMA_DEVICE" -g "$RDMA_GID_INDEX" -n 100 -p ${port} & pid=$!
      while kill -0 $pid 2>/dev/null; do
        grep -q ":${hex} [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 && { echo @@listening >&2; break; }
        sleep 0.05
      done
      wait $pid`,
    ]);
    try {
      await server.waitFor(/@@listening/, { stream: "stderr", timeoutMs: 60_000 });
      const isBun = "Bun" in globalThis;
      const client = spawnRemote(
        isBun
          ? [process.execPath, "examples/rc_pingpong.ts", ...flags, peerAddress()]
          : [process.execPath, "run", "-A", "examples/rc_pingpong.ts", ...flags, peerAddress()],
        { local: true },
      );
      const code = await client.exited;
      assert.equal(code, 0, `client exited ${code}:\n${client.stdout()}\n${client.stderr()}`);
      assert.match(client.stdout(), /100 iters in/);
      assert.equal(await server.exited, 0, server.stdout() + server.stderr());
      assert.match(server.stdout(), /100 iters in/);
    } finally {
      server.kill();
    }
  },
  { needs: (env) => needsPeer() || notOnIwarp("connections without rdma_cm")(env) },
);
