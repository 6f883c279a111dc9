/**
 * Where the start-up time goes, phase by phase, in the running runtime: the process start until
 * this module runs (the runtime itself), loading the library's modules (all of `mod.ts`, or only
 * the layers a program uses), opening the native libraries and the device, and the rdma_cm
 * calls up to a listening id; then what the first inline-verb call (a CQ poll, a post) pays on top
 * to set up function-pointer calling, which a listening id does not need. Times count from the
 * process's start as the kernel records it (`/proc/self/stat`, 10 ms ticks): `performance.now()`
 * does not — in the guest Deno's time origin comes 0.6-1 s after the exec, Bun's about 0.1 s.
 *
 *   deno run -A bench/startup-phases.ts [ADDRESS] [--entry mod.ts|cm.ts|verbs.ts]
 *   bun bench/startup-phases.ts [ADDRESS] [--entry …]
 *
 * Prints one JSON line of cumulative milliseconds per phase.
 */
// No node: module here: in Deno that would set up Node's compatibility layer before the library
// loads and hide what the library's own modules cost.
import { exitProcess, processArgs, processEnv } from "../examples/_common/args.ts";

/** Milliseconds from this process's start (kernel record) to `performance.now()`'s origin. */
async function originAge(): Promise<number> {
  const g = globalThis as {
    Deno?: { readTextFileSync(p: string): string };
    Bun?: { file(p: string): { text(): Promise<string> } };
  };
  const read = (p: string) => g.Deno ? g.Deno.readTextFileSync(p) : g.Bun!.file(p).text();
  const [stat, uptime] = await Promise.all([read("/proc/self/stat"), read("/proc/uptime")]);
  const now = performance.now();
  // field 22, after the parenthesised command name: start time in clock ticks (100 Hz) since boot
  const startTicks = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
  return Number(uptime.split(" ")[0]) * 1000 - startTicks * 10 - now;
}

const origin = await originAge();
const t: Record<string, number> = { runtime: performance.now() };
const argv = processArgs();
const i = argv.indexOf("--entry");
const entry = i >= 0 ? argv[i + 1] : "mod.ts";
const address = argv.find((a) => !a.startsWith("--") && a !== entry) ??
  processEnv("RDMA_GUEST_IP") ?? "0.0.0.0";
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
// set up by the first inline-verb call, after listening (Deno: libffi opened and bound)
native().fnPointerPath;
t.functionPointers = performance.now();
for (const k in t) t[k] = Math.round(t[k] + origin);
console.log(JSON.stringify({ entry, exports: Object.keys(lib).length, ms: t }));
channel.close();
exitProcess(0);
