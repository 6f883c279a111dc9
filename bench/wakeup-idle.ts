/**
 * Idle CPU of a process waiting through the poller, next to the same process idling on a timer
 * (the runtime's own background work): an eventfd wait, and (with a device) a CQ wait in event
 * mode. Prints % of one core per 4 s span, twice.
 *
 *   deno run -A bench/wakeup-idle.ts        bun bench/wakeup-idle.ts
 */
import process from "node:process";
import { awaitCompletions, Poller } from "../poller/mod.ts";
import { openDevice } from "../verbs/mod.ts";
import { native } from "../ffi/native.ts";

const fd = native().libc.eventfd(0, 0x800);
const watch = Poller.default().register(fd);
await watch.readable({ timeout: 300 }).catch(() => {});
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
    `${rt} timer         ${await measure(() => new Promise((r) => setTimeout(r, 4000)))}`,
  );
  console.log(
    `${rt} eventfd wait  ${await measure(() => watch.readable({ timeout: 4000 }).catch(() => {}))}`,
  );
  if (cq) {
    console.log(
      `${rt} CQ event wait ${await measure(() =>
        awaitCompletions(cq, { timeout: 4000 }).catch(() => {})
      )}`,
    );
  }
}
process.exit(0);
