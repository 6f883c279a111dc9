/**
 * The command line of the perftest tools: perftest's flag names (short and long), its
 * defaults and the dependencies it enforces between them (tx depth ≤ iterations, CQ
 * moderation off for large messages, rx depth rules of SEND, fixed atomic size, …), so
 * that a pair of tools started with the same flags agrees on iterations, sizes and depths
 * whichever side is the C program.
 *
 * @module
 */

import { parseInteger, UsageError } from "../../../examples/_common/cli.ts";
import {
  exitProcess,
  type ParseOption,
  parseOptions,
  processArgs,
} from "../../../examples/_common/args.ts";

export { parseInteger, UsageError };

/** The operation a tool measures. */
export type Verb = "send" | "write" | "read" | "atomic";
/** Latency or bandwidth. */
export type TestKind = "lat" | "bw";
/** Transport of the measured QPs. */
export type Connection = "RC" | "UC" | "UD";

/** One tool: its name and what it measures. */
export interface ToolDef {
  /** Program name (`send_lat`). */
  readonly name: string;
  /** The operation. */
  readonly verb: Verb;
  /** Latency or bandwidth. */
  readonly test: TestKind;
}

/** perftest's defaults (perftest_parameters.h of perftest 4.5). */
export const DEFAULTS = {
  tcpPort: 18515,
  sizeBw: 65536,
  sizeLat: 2,
  sizeAtomic: 8,
  iters: 1000,
  itersWriteBw: 5000,
  txBw: 128,
  txLat: 1,
  rxSend: 512,
  rxRdma: 1,
  cqMod: 100,
  qpTimeout: 14,
  /** Above this size CQ moderation is switched off (unless asked for). */
  cqModSizeLimit: 8192,
  /** rx depth cap for UC/UD when the default is kept. */
  ucMaxRx: 16000,
  /** -a runs sizes 2^1 … 2^23. */
  maxSize: 1 << 23,
  duration: 5,
  retryCount: 7,
} as const;

/** Everything a run needs, after perftest's dependency rules. */
export interface Settings {
  readonly tool: ToolDef;
  /** Device name, or undefined for the first one. */
  readonly device: string | undefined;
  readonly ibPort: number;
  /** TCP port of the exchange (also the rdma_cm port with -R). */
  readonly port: number;
  /** The server's host: this side is the client. Undefined on the server. */
  readonly host: string | undefined;
  /** -x: GID index, or -1 to choose (RoCE) / use LIDs (IB). */
  readonly gidIndex: number;
  /** -m: path MTU in bytes, 0 for the port's active MTU. */
  readonly mtu: number;
  /** Message size (the largest with -a). */
  readonly size: number;
  /** -s was given. */
  readonly sizeGiven: boolean;
  readonly iters: number;
  /** -D seconds, or 0 for an iteration count. */
  readonly duration: number;
  /** -f seconds. */
  readonly margin: number;
  readonly txDepth: number;
  readonly rxDepth: number;
  readonly cqMod: number;
  readonly numQps: number;
  readonly events: boolean;
  /** -a: every size 2..2^23. */
  readonly all: boolean;
  readonly connection: Connection;
  /** -R: connect the QPs, and exchange the test data, through rdma_cm. */
  readonly rdmaCm: boolean;
  readonly reportGbits: boolean;
  /** -I: inline size (0 = no inline). */
  readonly inlineSize: number;
  /** -o: outstanding reads/atomics, or 0 for the device maximum. */
  readonly outReads: number;
  /** -A: fetch-and-add (default) or compare-and-swap. */
  readonly atomicType: "FETCH_AND_ADD" | "CMP_AND_SWAP";
  readonly sl: number;
  readonly qpTimeout: number;
  /** -N, or forced (send_bw server, more than 20000 iterations). */
  readonly noPeak: boolean;
  /** --json: one JSON object per size on stdout instead of the table. */
  readonly json: boolean;
}

interface Opt {
  readonly short?: string;
  readonly type: "string" | "boolean";
  readonly arg?: string;
  readonly help: string;
  /** Only for these verbs / tests. */
  readonly verbs?: readonly Verb[];
  readonly tests?: readonly TestKind[];
}

const OPTIONS: Readonly<Record<string, Opt>> = {
  all: {
    short: "a",
    type: "boolean",
    help: "Run sizes from 2 till 2^23",
    verbs: ["send", "write", "read"],
  },
  atomic_type: {
    short: "A",
    type: "string",
    arg: "type",
    help: "type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD} (default FETCH_AND_ADD)",
    verbs: ["atomic"],
  },
  connection: {
    short: "c",
    type: "string",
    arg: "RC/UC/UD",
    help: "Connection type RC/UC/UD (default RC; UC not for read/atomic, UD only for send)",
  },
  "ib-dev": {
    short: "d",
    type: "string",
    arg: "dev",
    help: "Use IB device <dev> (default first device found)",
  },
  duration: {
    short: "D",
    type: "string",
    arg: "sec",
    help: "Run test for a customized period of seconds.",
  },
  events: {
    short: "e",
    type: "boolean",
    help: "Sleep on CQ events (default poll)",
    verbs: ["send", "read", "atomic"],
  },
  margin: {
    short: "f",
    type: "string",
    arg: "sec",
    help: "measure results within margins. (default=duration/4)",
  },
  "CPU-freq": {
    short: "F",
    type: "boolean",
    help: "Accepted for compatibility (times come from performance.now())",
  },
  "ib-port": {
    short: "i",
    type: "string",
    arg: "port",
    help: "Use port <port> of IB device (default 1)",
  },
  inline_size: {
    short: "I",
    type: "string",
    arg: "size",
    help: "Max size of message to be sent in inline (default 0)",
    verbs: ["send", "write"],
  },
  mtu: { short: "m", type: "string", arg: "mtu", help: "MTU size : 256 - 4096 (default port mtu)" },
  iters: {
    short: "n",
    type: "string",
    arg: "iters",
    help: "Number of exchanges (at least 5, default 1000; write_bw 5000)",
  },
  noPeak: { short: "N", type: "boolean", help: "Don't measure peak bandwidth", tests: ["bw"] },
  outs: {
    short: "o",
    type: "string",
    arg: "num",
    help: "num of outstanding read/atom (default max of device)",
    verbs: ["read", "atomic"],
  },
  port: {
    short: "p",
    type: "string",
    arg: "port",
    help: "Listen on/connect to port <port> (default 18515)",
  },
  qp: {
    short: "q",
    type: "string",
    arg: "num of qp's",
    help: "Num of qp's (default 1)",
    tests: ["bw"],
  },
  "cq-mod": {
    short: "Q",
    type: "string",
    arg: "value",
    help: "Generate Cqe only after <--cq-mod> completion",
  },
  "rx-depth": {
    short: "r",
    type: "string",
    arg: "dep",
    help: "Rx queue size (default 512, send only)",
    verbs: ["send"],
  },
  rdma_cm: {
    short: "R",
    type: "boolean",
    help: "Connect QPs with rdma_cm and run test on those QPs",
  },
  size: {
    short: "s",
    type: "string",
    arg: "size",
    help: "Size of message to exchange (K and M suffixes)",
  },
  sl: { short: "S", type: "string", arg: "sl", help: "SL (default 0)" },
  "tx-depth": {
    short: "t",
    type: "string",
    arg: "dep",
    help: "Size of tx queue (default 128 for bw, 1 for lat)",
  },
  "qp-timeout": {
    short: "u",
    type: "string",
    arg: "timeout",
    help: "QP timeout, timeout value is 4 usec * 2 ^(timeout), default 14",
  },
  "gid-index": {
    short: "x",
    type: "string",
    arg: "index",
    help: "Test uses GID with GID index (default IB - no gid . ETH - best RoCE GID)",
  },
  report_gbits: {
    type: "boolean",
    help: "Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)",
    tests: ["bw"],
  },
  json: {
    type: "boolean",
    help: "Print one JSON object per message size on stdout instead of the table",
  },
};

/** The Deno permissions the tools need (printed by --help). */
export const PERMISSIONS =
  "--allow-ffi (libibverbs, librdmacm) --allow-net (the TCP exchange; not needed with -R); " +
  "--allow-env=RDMA_VERBS_LIBIBVERBS,RDMA_VERBS_LIBRDMACM,RDMA_VERBS_LIBFFI only to pick the libraries by path";

function applies(o: Opt, tool: ToolDef): boolean {
  return (!o.verbs || o.verbs.includes(tool.verb)) && (!o.tests || o.tests.includes(tool.test));
}

/** The usage text of a tool. */
export function usage(tool: ToolDef): string {
  const lines = [
    "Usage:",
    `  ${tool.name}            start a server and wait for connection`,
    `  ${tool.name} <host>     connect to server at <host>`,
    "",
    "Options:",
  ];
  const rows: [string, string][] = [];
  for (const [long, o] of Object.entries(OPTIONS)) {
    if (!applies(o, tool)) continue;
    const short = o.short ? `-${o.short}, ` : "    ";
    rows.push([`${short}--${long}${o.type === "string" ? `=<${o.arg}>` : ""}`, o.help]);
  }
  rows.push(["-h, --help", "Show this help screen."]);
  const width = Math.max(...rows.map(([l]) => l.length)) + 2;
  for (const [l, h] of rows) lines.push(`  ${l.padEnd(width)}${h}`);
  lines.push("", `Deno permissions: ${PERMISSIONS}`);
  return lines.join("\n") + "\n";
}

type Values = Record<string, string | boolean | undefined>;

function int(values: Values, name: string, fallback: number, min: number, max: number): number {
  const raw = values[name];
  if (raw === undefined) return fallback;
  const v = parseInteger(String(raw), `--${name}`);
  if (v < min || v > max) throw new UsageError(`--${name}: ${v} is out of range ${min}..${max}`);
  return v;
}

/** `-s`: a size with an optional K or M suffix, 1 .. 2^31-1. */
function parseSize(text: string): number {
  const m = /^(.*?)([KM]?)$/.exec(text)!;
  const v = parseInteger(m[1], "--size") * (m[2] === "K" ? 1024 : m[2] === "M" ? 1 << 20 : 1);
  if (v < 1 || v > 0x7fffffff) throw new UsageError(`--size: ${v} is out of range 1..2147483647`);
  return v;
}

/**
 * Parses `argv` for `tool`. `--help` prints the usage on stdout and exits 0; mistakes
 * throw {@link UsageError}.
 */
export function parseSettings(tool: ToolDef, argv: string[] = processArgs()): Settings {
  const spec: Record<string, ParseOption> = {
    help: { type: "boolean", short: "h" },
  };
  for (const [long, o] of Object.entries(OPTIONS)) {
    if (applies(o, tool)) {
      spec[long] = o.short ? { type: o.type, short: o.short } : { type: o.type };
    }
  }
  let parsed;
  try {
    parsed = parseOptions(argv, spec);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const v = parsed.values as Values;
  if (v.help) {
    console.log(usage(tool).trimEnd());
    exitProcess(0);
  }
  if (parsed.positionals.length > 1) {
    throw new UsageError(`unexpected argument "${parsed.positionals[1]}"`);
  }
  const { verb, test } = tool;
  const host = parsed.positionals[0];
  const server = host === undefined;

  const connection = String(v.connection ?? "RC") as Connection;
  if (!["RC", "UC", "UD"].includes(connection)) {
    throw new UsageError(`--connection: "${connection}" is not one of RC, UC, UD`);
  }
  if (connection === "UC" && (verb === "read" || verb === "atomic")) {
    throw new UsageError("UC connection not possible in READ/ATOMIC verbs");
  }
  if (connection === "UD" && verb !== "send") {
    throw new UsageError("UD connection only possible in SEND verb");
  }
  const rdmaCm = Boolean(v.rdma_cm);
  if (rdmaCm && connection === "UC") throw new UsageError("UC is not supported in librdmacm");
  if (rdmaCm && connection === "UD") {
    throw new UsageError("-R with UD is not implemented by these tools (RC only)");
  }

  const all = Boolean(v.all);
  const duration = int(v, "duration", 0, 1, 0x7fffffff);
  const events = Boolean(v.events);
  if (duration && events) throw new UsageError("Duration mode doesn't work with events.");
  if (duration && all) {
    throw new UsageError("Duration mode currently doesn't support running on all sizes.");
  }

  let size: number;
  const sizeGiven = v.size !== undefined;
  if (verb === "atomic") {
    if (sizeGiven && parseSize(String(v.size)) !== DEFAULTS.sizeAtomic) {
      throw new UsageError("Message size cannot be changed for Atomic tests");
    }
    size = DEFAULTS.sizeAtomic;
  } else if (all) size = DEFAULTS.maxSize;
  else if (sizeGiven) size = parseSize(String(v.size));
  else size = test === "bw" ? DEFAULTS.sizeBw : DEFAULTS.sizeLat;

  const defaultIters = test === "bw" && verb === "write" ? DEFAULTS.itersWriteBw : DEFAULTS.iters;
  const iters = duration ? 0 : int(v, "iters", defaultIters, 5, 100_000_000);
  const defaultTx = test === "bw" ? DEFAULTS.txBw : DEFAULTS.txLat;
  let txDepth = int(v, "tx-depth", defaultTx, 1, 15000);
  const rxDefault = verb === "send" ? DEFAULTS.rxSend : DEFAULTS.rxRdma;
  let rxDepth = int(v, "rx-depth", rxDefault, 1, 16384);
  const cqModGiven = v["cq-mod"] !== undefined;
  let cqMod = int(v, "cq-mod", DEFAULTS.cqMod, 1, 1024);
  const margin = int(v, "margin", Math.floor((duration || DEFAULTS.duration) / 4), 0, 0x7fffffff);
  if (duration && !(duration > 2 * margin)) {
    throw new UsageError("please check that DURATION > 2*MARGIN");
  }

  if (!duration) {
    if (txDepth > iters) txDepth = iters;
    if (verb === "send" && rxDepth > iters) rxDepth = iters;
    if ((connection === "UD" || connection === "UC") && rxDepth === DEFAULTS.rxSend) {
      rxDepth = Math.min(iters, DEFAULTS.ucMaxRx);
    }
  }
  if (size > DEFAULTS.cqModSizeLimit && connection !== "UD" && !all && !events && !cqModGiven) {
    cqMod = 1;
  }
  if (cqMod > txDepth) cqMod = txDepth;
  // perftest's work-around for an odd rx depth in SEND tests
  if (verb === "send" && rxDepth % 2 === 1 && !all) rxDepth += 1;

  const gidIndex = int(v, "gid-index", -1, 0, 255);
  const mtu = int(v, "mtu", 0, 256, 4096);
  if (mtu && ![256, 512, 1024, 2048, 4096].includes(mtu)) {
    throw new UsageError(`--mtu: ${mtu}: choose mtu from {256,512,1024,2048,4096}`);
  }
  const atomicType = String(v.atomic_type ?? "FETCH_AND_ADD");
  if (atomicType !== "FETCH_AND_ADD" && atomicType !== "CMP_AND_SWAP") {
    throw new UsageError("Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}");
  }
  let noPeak = Boolean(v.noPeak) || Boolean(duration);
  if (verb === "send" && test === "bw" && server) noPeak = true;
  if (!duration && iters > 20000 && test === "bw") noPeak = true;

  return {
    tool,
    device: v["ib-dev"] === undefined ? undefined : String(v["ib-dev"]),
    ibPort: int(v, "ib-port", 1, 1, 255),
    port: int(v, "port", DEFAULTS.tcpPort, 1, 65535),
    host,
    gidIndex,
    mtu,
    size,
    sizeGiven,
    iters,
    duration,
    margin,
    txDepth,
    rxDepth,
    cqMod,
    numQps: int(v, "qp", 1, 1, 16384),
    events,
    all,
    connection,
    rdmaCm,
    reportGbits: Boolean(v.report_gbits),
    inlineSize: verb === "read" || verb === "atomic" ? 0 : int(v, "inline_size", 0, 0, 912),
    outReads: int(v, "outs", 0, 0, 255),
    atomicType,
    sl: int(v, "sl", 0, 0, 15),
    qpTimeout: int(v, "qp-timeout", DEFAULTS.qpTimeout, 0, 31),
    noPeak,
    json: Boolean(v.json),
  };
}

/**
 * Runs a tool body with perftest-style exits: bad arguments print the message and the usage
 * on stderr and exit 1; any other failure prints `name: message` and exits 1.
 */
export async function runCli(
  tool: ToolDef,
  body: (s: Settings) => Promise<number>,
): Promise<never> {
  let code = 1;
  try {
    code = await body(parseSettings(tool));
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`${tool.name}: ${e.message}\n${usage(tool).trimEnd()}`);
    } else {
      console.error(`${tool.name}: ${(e as Error)?.message ?? String(e)}`);
    }
    code = 1;
  }
  return exitProcess(code);
}
