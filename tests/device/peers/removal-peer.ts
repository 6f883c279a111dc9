/**
 * Peer of the device-removal test: opens `device` with a PD, a channel, a CQ, an RC QP and an
 * MR, listens through rdma_cm on `address`, watches the device's async events, reports
 * `{ready}`, then waits for the removal. Reports `{removal, ...}`: what the pending getRequest
 * failed with and after how long, how long closing everything took, whether every object is
 * closed and the async-event stream ended, and the async events seen; then exits 0.
 *
 * In a process of its own because librdmacm (rdma-core 44) keeps its own context on the last
 * device open after that device is removed — its device-list sync returns early when the list
 * is empty — so the kernel finishes the removal only when the process exits.
 *
 * Usage: removal-peer.ts <device> <address>
 */

import process from "node:process";
import {
  type AsyncEvent,
  asyncEvents,
  ClosedError,
  CmEventChannel,
  openDevice,
  QpType,
} from "../../lib.ts";
import { report } from "./spawn.ts";

const [device, address] = process.argv.slice(2);
const ctx = openDevice(device);
const pd = ctx.allocPd();
const ch = ctx.createCompChannel();
const cq = ctx.createCq({ cqe: 16, channel: ch });
const qp = pd.createQp({ type: QpType.RC, sendCq: cq });
const mr = pd.allocBuffer(4096);
const cm = new CmEventChannel();
const listener = cm.createId("TCP");
listener.bind({ address, port: 0 });
listener.listen();
// both settle to a value at once: either may end while the other is awaited
const request = listener.getRequest({ timeout: 120_000 }).then(() => null, (e: unknown) => e);
const seen: string[] = [];
const events = (async () => {
  for await (const ev of asyncEvents<AsyncEvent>(ctx, { timeout: 150_000 })) seen.push(ev.typeName);
  return "ended";
})().catch((e: unknown) => e);
report({ ready: true });
const t0 = performance.now();
const failed = await request;
const removalMs = performance.now() - t0;
const c0 = performance.now();
listener.close();
cm.close();
ctx.close();
const closeMs = performance.now() - c0;
const ended = await Promise.race([
  events,
  new Promise((r) => setTimeout(() => r("still waiting 10 s after close"), 10_000)),
]);
report({
  removal: true,
  failedWith: failed instanceof Error ? `${failed.constructor.name}: ${failed.message}` : failed,
  cmEvent: (failed as { eventName?: string } | null)?.eventName ?? null,
  removalMs,
  closeMs,
  allClosed: [qp, cq, ch, mr, pd, ctx, listener, cm].every((o) => o.closed),
  bufferDetached: mr.buffer.length === 0,
  eventsEnded: ended === "ended" || ended instanceof ClosedError ? "ended" : String(ended),
  asyncEvents: seen,
});
process.exit(0);
