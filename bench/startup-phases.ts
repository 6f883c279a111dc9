/**
 * Where the start-up time goes, phase by phase, in the running runtime: the process start until
 * this module runs (the runtime itself), loading the library's modules (all of `mod.ts`, or only
 * the layers a program uses), opening the native libraries and the device, and the rdma_cm
 * calls up to a listening id. Times are `performance.now()`, which both runtimes count from the
 * process start.
 *
 *   deno run -A bench/startup-phases.ts [ADDRESS] [--entry mod.ts|cm.ts|verbs.ts]
 *   bun bench/startup-phases.ts [ADDRESS] [--entry …]
 *
 * Prints one JSON line of cumulative milliseconds per phase.
 */
import process from "node:process";

const t: Record<string, number> = { runtime: performance.now() };
const i = process.argv.indexOf("--entry");
const entry = i >= 0 ? process.argv[i + 1] : "mod.ts";
const address = process.argv.slice(2).find((a) => !a.startsWith("--") && a !== entry) ??
  process.env.RDMA_GUEST_IP ?? "0.0.0.0";
const lib = await import(`../${entry}`);
t.modules = performance.now();
const { native } = await import("../ffi/native.ts");
native().ibverbs;
native().rdmacm;
t.libraries = performance.now();
const { CmEventChannel } = await import("../cm/channel.ts");
const channel = new CmEventChannel();
t.eventChannel = performance.now();
const id = channel.createId("TCP");
id.bind({ address, port: 0 });
id.listen(0);
t.listening = performance.now();
console.log(JSON.stringify({ entry, exports: Object.keys(lib).length, ms: t }));
channel.close();
process.exit(0);
