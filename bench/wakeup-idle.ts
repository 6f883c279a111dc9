/**
 * Idle CPU of a process waiting through the poller, next to the same process idling on a timer
 * (the runtime's own background work): an eventfd wait through every waiter kind, and (with a
 * device, `RDMA_DEVICE=rxe0`) a CQ wait in event mode through the default waiter. Prints % of
 * one core per 4 s span, twice.
 *
 *   deno run -A bench/wakeup-idle.ts        bun bench/wakeup-idle.ts
 */
import process from "node:process";
import { awaitCompletions, Poller } from "../poller/mod.ts";
import { openDevice } from "../verbs/mod.ts";
import { native } from "../ffi/native.ts";
import { useWaiter, waiterKinds } from "../ffi/wait.ts";

const watches = waiterKinds().map((kind) => {
  useWaiter(kind);
  const poller = new Poller();
  useWaiter();
  return { kind: poller.backend, watch: poller.register(native().libc.eventfd(0, 0x800)) };
});
for (const { watch } of watches) await watch.readable({ timeout: 300 }).catch(() => {});
const device = process.env.RDMA_DEVICE;
const ctx = device ? openDevice(device) : undefined;
const cq = ctx?.createCq({ cqe: 16, channel: ctx.createCompChannel() });
if (cq) await awaitCompletions(cq, { timeout: 300 }).catch(() => {});

async function measure(f: () => Promise<unknown>): Promise<string> {
  await new Promise((r) => setTimeout(r, 500));
  const u0 = process.cpuUsage();
  const t0 = performance.now();
  await f();
  const u = process.cpuUsage(u0);
  return `${((u.user + u.system) / 1e3 / (performance.now() - t0) * 100).toFixed(3)}%`;
}

const rt = "Bun" in globalThis ? "bun" : "deno";
for (let i = 0; i < 2; i++) {
  console.log(
    `${rt} timer`.padEnd(40) + (await measure(() => new Promise((r) => setTimeout(r, 4000)))),
  );
  for (const { kind, watch } of watches) {
    console.log(
      `${rt} eventfd wait [${kind}]`.padEnd(40) +
        (await measure(() => watch.readable({ timeout: 4000 }).catch(() => {}))),
    );
  }
  if (cq) {
    console.log(
      `${rt} CQ event wait [${Poller.default().backend}]`.padEnd(40) +
        (await measure(() => awaitCompletions(cq, { timeout: 4000 }).catch(() => {}))),
    );
  }
}
process.exit(0);
