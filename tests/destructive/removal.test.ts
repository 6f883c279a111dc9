// runs on iWARP
/**
 * In its own folder, run by `scripts/test` in a guest of its own: it takes the device away, so
 * nothing may run after it on the same boot.
 *
 * The device removed while in use (`rdma link delete`, soft devices in the test VM only): the
 * removal surfaces as DEVICE_FATAL on the device's async events and as DEVICE_REMOVAL on rdma_cm
 * ids (a typed CmEventError for the waiting operation), and closing everything afterwards
 * neither hangs nor crashes. The kernel finishes the removal only once every user context is
 * closed. The device is added back at the end for the tests that follow.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import process from "node:process";
import { type DeviceEnv, deviceTest } from "../harness.ts";
import {
  type AsyncEvent,
  asyncEvents,
  CmEventChannel,
  CmEventError,
  EventType,
  listDevices,
  openDevice,
  PortState,
  QpType,
} from "../../mod.ts";

function netdevOf(env: DeviceEnv): string {
  const e = process.env;
  return (env.transport === "iwarp" ? e.RDMA_SIW_NETDEV : e.RDMA_NETDEV) ?? "eth0";
}

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
    await new Promise((r) => setTimeout(r, 200));
  }
}

deviceTest(
  "fault: the device removed in use: DEVICE_FATAL and DEVICE_REMOVAL arrive, closing all of it is safe",
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
    // settled to a value at once: the removal may fail it while the test still awaits DEVICE_FATAL
    const request = listener.getRequest({ timeout: 60_000 }).then(() => null, (e: unknown) => e);
    const fatal = (async () => {
      for await (const ev of asyncEvents<AsyncEvent>(ctx, { timeout: 60_000 })) {
        if (ev.type === EventType.DEVICE_FATAL) return ev;
      }
      return null;
    })();
    let failure: unknown;
    const t0 = performance.now();
    const del = spawn("rdma", ["link", "delete", env.device], { stdio: "ignore" });
    const deleted = new Promise<number | null>((r) => del.on("exit", r));
    try {
      const ev = await fatal;
      const tFatal = performance.now() - t0;
      console.log(`removal: async event ${ev?.typeName} after ${tFatal.toFixed(0)} ms`);
      assert.equal(ev?.typeName, "IBV_EVENT_DEVICE_FATAL");
      const failed = await request;
      assert.ok(
        failed instanceof CmEventError && failed.eventName === "RDMA_CM_EVENT_DEVICE_REMOVAL",
        `getRequest failed with DEVICE_REMOVAL, got ${failed}`,
      );
      const tRemoval = performance.now() - t0;
      console.log(`removal: getRequest failed after ${tRemoval.toFixed(0)} ms: ${failed}`);
      const c0 = performance.now();
      listener.close();
      cm.close();
      ctx.close();
      const closeMs = performance.now() - c0;
      for (const o of [qp, cq, ch, mr, pd, ctx, listener, cm]) assert.ok(o.closed);
      assert.equal(mr.buffer.length, 0);
      const rc = await Promise.race([
        deleted,
        new Promise<string>((r) => setTimeout(() => r("timeout"), 60_000)),
      ]);
      if (rc !== 0) {
        const res = spawnSync("rdma", ["res", "show"], { encoding: "utf8" }).stdout;
        console.log(`removal: rdma link delete ${rc}; resources left:\n${res}`);
      }
      assert.equal(rc, 0, "rdma link delete finished once everything was closed");
      console.log(
        `fault: DEVICE_FATAL after ${tFatal.toFixed(0)} ms, DEVICE_REMOVAL after ${
          tRemoval.toFixed(0)
        } ms, everything closed in ${closeMs.toFixed(1)} ms, removal done after ${
          (performance.now() - t0).toFixed(0)
        } ms`,
      );
    } catch (e) {
      failure = e;
      throw e;
    } finally {
      listener.close();
      cm.close();
      ctx.close();
      // the kernel finishes the removal once every context is closed: wait for it, then add
      // the device back (a device that is still going away must not count as back)
      await Promise.race([deleted, new Promise((r) => setTimeout(r, 60_000))]);
      try {
        await readd(env);
      } catch (e) {
        if (!failure) throw e;
        console.log(`removal: ${e} (after the failure)`); // the test's own failure is the one reported
      }
    }
  },
  {
    needs: (env) =>
      env.vm ? false : "removes the device: runs only on the soft devices of the test VM",
    timeout: 300_000,
  },
);
