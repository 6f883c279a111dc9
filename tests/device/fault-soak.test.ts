/**
 * Soak: many connect/transfer/disconnect cycles over rdma_cm against a server process, with the
 * open-fd count and the resident set size measured after a warm-up and at the end (both
 * printed). `RDMA_SOAK_CYCLES` sets the count: 250 in the suite (50 of warm-up, 200 measured; about
 * 20-25 s per runtime in the emulated guest, where CI's whole run must stay under an hour), 1,000 in
 * bench/reliability.sh; bench/soak.ts runs 10,000 with RSS and the census charted.
 */
import assert from "node:assert/strict";
import process from "node:process";
import { deviceTest } from "../harness.ts";
import { spawnPeer } from "./peers/spawn.ts";
import { type Memory, memoryGrowth, openFds, session, settledMemory } from "./peers/session.ts";

const CYCLES = Number(process.env.RDMA_SOAK_CYCLES ?? 250);
const MiB = 1024 * 1024;

// On soft-iWARP these cycles found a race in the kernel's siw_accept (a client's first message
// could sit unread in the server's socket); the VM's siw.ko carries the fix (scripts/softroce-vm,
// fix_siw_accept; cm/README.md, "A siw bug").
deviceTest(
  `fault soak: ${CYCLES} connect/transfer/disconnect cycles, fds and RSS flat`,
  async (env) => {
    const peer = spawnPeer("cm-rc-server.ts", [env.address, String(CYCLES)]);
    try {
      const { port } = await peer.next((m) => "ready" in m) as { port: number };
      const warm = Math.min(50, CYCLES - 1);
      let fds0 = 0;
      let mem0: Memory | undefined;
      const t0 = performance.now();
      for (let i = 0; i < CYCLES; i++) {
        const { id, ep } = await session(env.address, port, `c${i}`, 2);
        await id.disconnect();
        ep.close();
        if (i === warm) {
          fds0 = openFds();
          mem0 = settledMemory();
        }
      }
      const fds1 = openFds();
      const mem1 = settledMemory();
      const rss0 = mem0!.rss, rss1 = mem1.rss;
      const secs = (performance.now() - t0) / 1000;
      console.log(
        `fault soak: ${CYCLES} cycles in ${secs.toFixed(1)} s; fds ${fds0} → ${fds1}; ` +
          `${memoryGrowth(mem0!, mem1)} (after cycle ${warm} → after ${CYCLES})`,
      );
      assert.equal(fds1, fds0, "open fds stay flat");
      // a garbage-collected heap moves a little; a leak of native memory per cycle would not stop
      assert.ok(rss1 - rss0 < 64 * MiB, `RSS grew by ${((rss1 - rss0) / MiB).toFixed(1)} MiB`);
      const done = await peer.next((m) => "done" in m, 60_000) as { unconfirmed: number };
      console.log(
        `fault soak: ${done.unconfirmed} pong(s) whose completion the client's disconnect ` +
          "overtook (docs/08)",
      );
      assert.equal(await peer.exited, 0);
    } finally {
      peer.kill();
    }
  },
  {
    timeout: 1_800_000,
  },
);
