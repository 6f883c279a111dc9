/**
 * Where the start-up time goes, phase by phase, in the running runtime: the process start until
 * this module runs (the runtime itself), loading the library's modules (all of `mod.ts`, or only
 * the layers a program uses), opening the native libraries and the device, and the rdma_cm
 * calls up to a listening id; then what the first inline-verb call (a CQ poll, a post) pays on top
 * to set up function-pointer calling, which a listening id does not need. Times are
 * `performance.now()`, which both runtimes count from the process start.
 *
 *   deno run -A bench/startup-phases.ts [ADDRESS] [--entry mod.ts|cm.ts|verbs.ts]
 *   bun bench/startup-phases.ts [ADDRESS] [--entry …]
 *
 * Prints one JSON line of cumulative milliseconds per phase.
 */
// No node: module here: in Deno that would set up Node's compatibility layer before the library
// loads and hide what the library's own modules cost.
import { exitProcess, processArgs, processEnv } from "../examples/_common/args.ts";

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
console.log(JSON.stringify({ entry, exports: Object.keys(lib).length, ms: t }));
channel.close();
exitProcess(0);
