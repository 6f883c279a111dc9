// runs on iWARP
/**
 * In its own folder, run by `scripts/test` in a guest of its own: it takes the device away, so
 * nothing may run after it on the same boot.
 *
 * The device removed while in use (`rdma link delete`, soft devices in the test VM only): the
 * removal surfaces as DEVICE_REMOVAL on rdma_cm ids (a typed CmEventError for the waiting
 * operation), and closing everything afterwards neither hangs nor crashes. A provider that can
 * detach a user context also sends DEVICE_FATAL on the async events; rxe and siw cannot, so the
 * kernel finishes the removal only once every user context is closed (the test reports which
 * async events came). The device is added back at the end for the tests that follow.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import process from "node:process";
import { type DeviceEnv, deviceTest } from "../harness.ts";
import {
  type AsyncEvent,
  asyncEvents,
  ClosedError,
  CmEventChannel,
  CmEventError,
  listDevices,
  openDevice,
  PortState,
  QpType,
} from "../../mod.ts";

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
    const ctx = openDevice(env.device);
    const pd = ctx.allocPd();
    const ch = ctx.createCompChannel();
    const cq = ctx.createCq({ cqe: 16, channel: ch });
    const qp = pd.createQp({ type: QpType.RC, sendCq: cq });
    const mr = pd.allocBuffer(4096);
    const cm = new CmEventChannel();
    const listener = cm.createId("TCP");
    listener.bind({ address: env.address, port: 0 });
    listener.listen();
    // both settle to a value at once: either may end while the test awaits the other
    const request = listener.getRequest({ timeout: 60_000 }).then(() => null, (e: unknown) => e);
    const seen: string[] = [];
    const events = (async () => {
      for await (const ev of asyncEvents<AsyncEvent>(ctx, { timeout: 120_000 })) {
        seen.push(ev.typeName);
      }
    })().then(() => null, (e: unknown) => e);
    let failure: unknown;
    const t0 = performance.now();
    const del = spawn("rdma", ["link", "delete", env.device], { stdio: "ignore" });
    const deleted = new Promise<number | null>((r) => del.on("exit", r));
    try {
      const failed = await request;
      const tRemoval = performance.now() - t0;
      assert.ok(
        failed instanceof CmEventError && failed.eventName === "RDMA_CM_EVENT_DEVICE_REMOVAL",
        `getRequest failed with DEVICE_REMOVAL, got ${failed}`,
      );
      const c0 = performance.now();
      listener.close();
      cm.close();
      ctx.close();
      const closeMs = performance.now() - c0;
      for (const o of [qp, cq, ch, mr, pd, ctx, listener, cm]) assert.ok(o.closed);
      assert.equal(mr.buffer.length, 0);
      // the async-event iteration ends with the context: a ClosedError, never a hang
      const ended = await Promise.race([events, sleep(10_000).then(() => "hang")]);
      assert.ok(ended === null || ended instanceof ClosedError, `async events ended: ${ended}`);
      // rxe and siw cannot detach a user context (no disassociate_ucontext): the kernel
      // finishes the removal once every context is closed, and sends no DEVICE_FATAL
      const rc = await Promise.race([deleted, sleep(60_000).then(() => "timeout")]);
      if (rc !== 0) {
        const res = spawnSync("rdma", ["res", "show"], { encoding: "utf8" }).stdout;
        console.log(`removal: rdma link delete ${rc}; resources left:\n${res}`);
      }
      assert.equal(rc, 0, "rdma link delete finished once everything was closed");
      console.log(
        `fault: DEVICE_REMOVAL after ${tRemoval.toFixed(0)} ms, everything closed in ${
          closeMs.toFixed(1)
        } ms, removal done after ${(performance.now() - t0).toFixed(0)} ms; async events: ${
          seen.join(", ") || "none"
        }`,
      );
    } catch (e) {
      failure = e;
    } finally {
      listener.close();
      cm.close();
      ctx.close();
      // a device that is still going away must not count as back: wait for the removal first
      await Promise.race([deleted, sleep(60_000)]);
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
