/**
 * In its own folder, run by `scripts/test` in a guest of its own: it takes the device away, so
 * nothing may run after it on the same boot.
 *
 * The device removed while in use (`rdma link delete`, soft devices in the test VM only), with a
 * PD, channel, CQ, QP, MR and a listening rdma_cm id open in a peer process: the removal surfaces
 * as DEVICE_REMOVAL on the id (a typed CmEventError for the pending getRequest), closing
 * everything afterwards neither hangs nor crashes, the async-event stream ends with its context,
 * and the removal completes. A provider that can detach a user context also sends DEVICE_FATAL
 * on the async events; rxe and siw cannot, so the kernel finishes the removal only once every
 * user context is closed (the test reports which async events came). The device is added back
 * at the end for the tests that follow.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import process from "node:process";
import { type DeviceEnv, deviceTest } from "../harness.ts";
import { listDevices, openDevice, PortState } from "../lib.ts";
import { spawnPeer } from "./peers/spawn.ts";

function netdevOf(env: DeviceEnv): string {
  const e = process.env;
  return (env.transport === "iwarp" ? e.RDMA_SIW_NETDEV : e.RDMA_NETDEV) ?? "eth0";
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function readd(env: DeviceEnv): Promise<void> {
  const type = env.transport === "iwarp" ? "siw" : "rxe";
  const deadline = Date.now() + 60_000;
  for (;;) {
    const names = (() => {
      try {
        return listDevices().map((d) => d.name);
      } catch {
        return [];
      }
    })();
    if (names.includes(env.device)) {
      try {
        using ctx = openDevice(env.device);
        if (ctx.queryPort(env.port).state === PortState.ACTIVE) return;
      } catch {
        // not ready yet
      }
    } else {
      spawnSync("rdma", ["link", "add", env.device, "type", type, "netdev", netdevOf(env)]);
    }
    if (Date.now() > deadline) throw new Error(`could not add ${env.device} back`);
    await sleep(200);
  }
}

deviceTest(
  "fault: the device removed in use: DEVICE_REMOVAL fails the cm wait, closing all of it is safe, the removal completes",
  async (env) => {
    // the objects live in a peer process: see removal-peer.ts for why
    const peer = spawnPeer("removal-peer.ts", [env.device, env.address]);
    let failure: unknown;
    let del: ChildProcess | null = null;
    let deleted: Promise<number | null> = Promise.resolve(null);
    try {
      await peer.next((m) => "ready" in m, 120_000);
      const t0 = performance.now();
      del = spawn("rdma", ["link", "delete", env.device], { stdio: "ignore" });
      deleted = new Promise<number | null>((r) => del!.on("exit", r));
      const r = await peer.next((m) => "removal" in m, 150_000);
      assert.equal(r.cmEvent, "RDMA_CM_EVENT_DEVICE_REMOVAL", `getRequest failed: ${r.failedWith}`);
      assert.equal(r.allClosed, true, "every object closed");
      assert.equal(r.bufferDetached, true, "the MR's buffer is detached");
      assert.equal(r.eventsEnded, "ended", "the async-event stream ended with its context");
      assert.equal(await peer.exited, 0);
      const exitedMs = performance.now() - t0;
      // rxe and siw cannot detach a user context (no disassociate_ucontext): the kernel
      // finishes the removal once every context is closed, and sends no DEVICE_FATAL
      const rc = await Promise.race([deleted, sleep(60_000).then(() => "timeout")]);
      assert.equal(rc, 0, "rdma link delete finished once the process had closed everything");
      console.log(
        `fault: DEVICE_REMOVAL after ${(r.removalMs as number).toFixed(0)} ms, everything ` +
          `closed in ${(r.closeMs as number).toFixed(1)} ms, the removal done ${
            (performance.now() - t0 - exitedMs).toFixed(0)
          } ms after the process exited; async events: ${
            (r.asyncEvents as string[]).join(", ") || "none"
          }`,
      );
    } catch (e) {
      failure = e;
    } finally {
      peer.kill();
      // a device that is still going away must not count as back: wait for the removal first
      if (del) await Promise.race([deleted, sleep(60_000)]);
    }
    const back = await readd(env).then(() => null, (e: unknown) => e);
    if (failure) {
      if (back) console.log(`removal: ${back} (after the failure)`);
      throw failure; // the test's own failure is the one reported
    }
    if (back) throw back;
  },
  {
    needs: (env) =>
      env.vm ? false : "removes the device: runs only on the soft devices of the test VM",
    timeout: 300_000,
  },
);
