/**
 * The connected pingpong tools, `ibv_rc_pingpong` and `ibv_uc_pingpong`: one QP each side (RC or
 * UC), the TCP address exchange, the ping-pong loop, and the C tools' optional features -
 * `-c` (the client marks the start of every page, the server checks them at the end; both
 * tools), and rc_pingpong's `-o`/`-O` (on-demand paging, implicit), `-P` (prefetch the ODP MR),
 * `-t` (completion timestamps), `-j` (device memory), `-N` (the `ibv_wr_*` post API). A feature
 * the device lacks fails with the C tool's message, checked the same way (extended device
 * attributes first).
 *
 * @module
 */

import {
  AccessFlags,
  AdviseMrAdvice,
  AdviseMrFlags,
  type CompletionQueue,
  type CompletionQueueEx,
  CreateCqWcFlags,
  type MemoryRegion,
  NativeError,
  OdpGeneralCaps,
  OdpTransportCap,
  openDevice,
  type ProtectionDomain,
  type QpType,
  type QueuePair,
  type QueuePairEx,
  SendFlags,
  WrOpcode,
} from "../../verbs.ts";
import { err, type OptionSpec, out, runTool, type ToolSpec, type Values } from "./cli.ts";
import { clientExchange, type Dest, destLine, serverExchange } from "./exchange.ts";
import { pingpongLoop } from "./loop.ts";
import {
  connectQp,
  PINGPONG_PERMISSIONS,
  PINGPONG_SYNOPSIS,
  pingpongOptions,
  type PingpongSettings,
  pingpongSettings,
  RECV_WRID,
  SEND_WRID,
  startSide,
} from "./pingpong.ts";

/** `-c`: both connected tools have it. */
export const CHK_OPTION: Record<string, OptionSpec> = {
  chk: { short: "c", type: "boolean", help: "validate received buffer" },
};

/** rc_pingpong's extra options, in the C tool's order. */
export const RC_FEATURE_OPTIONS: Record<string, OptionSpec> = {
  odp: { short: "o", type: "boolean", help: "use on demand paging" },
  iodp: { short: "O", type: "boolean", help: "use implicit on demand paging" },
  prefetch: { short: "P", type: "boolean", help: "prefetch an ODP MR" },
  ts: { short: "t", type: "boolean", help: "get CQE with timestamp" },
  ...CHK_OPTION,
  dm: { short: "j", type: "boolean", help: "use device memory" },
  new_send: { short: "N", type: "boolean", help: "use new post send WR API" },
};

/** The optional features of a run. */
export interface Features {
  /** `-o`: register the buffer for on-demand paging. */
  readonly odp: boolean;
  /** `-O`: implicit on-demand paging (the whole address space). */
  readonly implicitOdp: boolean;
  /** `-P`: prefetch the ODP MR. */
  readonly prefetch: boolean;
  /** `-t`: completion timestamps. */
  readonly ts: boolean;
  /** `-c`: validate the received buffer. */
  readonly chk: boolean;
  /** `-j`: device memory. */
  readonly dm: boolean;
  /** `-N`: the new post send API. */
  readonly newSend: boolean;
}

/** Reads the features from parsed options, refusing the combinations the C tool refuses. */
export function featuresOf(values: Values): Features {
  const on = (k: string) => values[k] === true;
  const f: Features = {
    odp: on("odp") || on("iodp"),
    implicitOdp: on("iodp"),
    prefetch: on("prefetch"),
    ts: on("ts"),
    chk: on("chk"),
    dm: on("dm"),
    newSend: on("new_send"),
  };
  if (f.odp && f.dm) throw new Failure("DM memory region can't be on demand");
  if (!f.odp && f.prefetch) {
    throw new Failure("prefetch is valid only with on-demand memory region");
  }
  return f;
}

/** A failure the C tool reports with one line on stderr and exit status 1. */
export class Failure extends Error {}

/** Prints a {@link Failure}'s line and returns the exit status 1; rethrows anything else. */
function failed(e: unknown): number {
  if (!(e instanceof Failure)) throw e;
  err(e.message);
  return 1;
}

/** `sysconf(_SC_PAGESIZE)`. */
const PAGE_SIZE = 4096;

/** Receive completion timestamps: the C tool's max/min/total of the gaps between receives. */
class TsStats {
  max = 0n;
  min = 0xffffffffn;
  total = 0n;
  prev = 0n;
  last = false;
  iters = 0;

  constructor(readonly mask: bigint) {}

  add(ts: bigint): void {
    if (this.last) {
      const delta = ts >= this.prev ? ts - this.prev : this.mask - this.prev + ts + 1n;
      if (delta > this.max) this.max = delta;
      if (delta < this.min) this.min = delta;
      this.total += delta;
      this.iters++;
    }
    this.prev = ts;
    this.last = true;
  }

  lines(): string[] {
    if (!this.iters) return [];
    return [
      `Max receive completion clock cycles = ${this.max}`,
      `Min receive completion clock cycles = ${this.min}`,
      `Average receive completion clock cycles = ${(Number(this.total) / this.iters).toFixed(6)}`,
    ];
  }
}

/** The verbs objects of one side. */
interface Side {
  pd: ProtectionDomain;
  mr: MemoryRegion;
  cq: CompletionQueue;
  qp: QueuePair;
  /** The same QP when `-N` made it extended. */
  qpx: QueuePairEx | null;
  ts: TsStats | null;
}

/** pp_init_ctx: PD, feature checks, MR, CQ, QP, INIT; a Failure carries the C tool's line. */
function initSide(
  ctx: ReturnType<typeof openDevice>,
  type: typeof QpType.RC | typeof QpType.UC,
  s: PingpongSettings,
  f: Features,
): Side {
  const channel = s.events ? ctx.createCompChannel() : undefined;
  const pd = ctx.allocPd();
  let access: number = AccessFlags.LOCAL_WRITE;
  let tsMask = 0n;
  if (f.odp || f.ts || f.dm) {
    let attr;
    try {
      attr = ctx.queryDeviceEx();
    } catch {
      throw new Failure("Couldn't query device for its features");
    }
    if (f.odp) {
      const both = OdpTransportCap.SEND | OdpTransportCap.RECV;
      const general = attr.odpCaps.generalCaps;
      if (
        !(general & BigInt(OdpGeneralCaps.SUPPORT)) ||
        (attr.odpCaps.perTransportCaps.rcOdpCaps & both) !== both
      ) {
        throw new Failure(
          "The device isn't ODP capable or does not support RC send and receive with ODP",
        );
      }
      if (f.implicitOdp && !(general & BigInt(OdpGeneralCaps.SUPPORT_IMPLICIT))) {
        throw new Failure("The device doesn't support implicit ODP");
      }
      if (f.implicitOdp) {
        throw new Failure(
          "implicit ODP (an MR over the whole address space) is not supported by this port",
        );
      }
      access |= AccessFlags.ON_DEMAND;
    }
    if (f.ts) {
      if (!attr.completionTimestampMask) {
        throw new Failure("The device isn't completion timestamp capable");
      }
      tsMask = attr.completionTimestampMask;
    }
    if (f.dm) {
      if (!attr.maxDmSize) throw new Failure("Device doesn't support dm allocation");
      if (attr.maxDmSize < BigInt(s.size)) throw new Failure("Device memory is insufficient");
      throw new Failure("device memory (ibv_alloc_dm) is not supported by this port");
    }
  }
  let mr: MemoryRegion;
  try {
    mr = pd.allocBuffer(s.size, { access });
  } catch {
    throw new Failure("Couldn't register MR");
  }
  mr.buffer.fill(0x7b);
  if (f.prefetch) {
    try {
      pd.adviseMr(AdviseMrAdvice.PREFETCH_WRITE, [{ mr }], AdviseMrFlags.FLUSH);
    } catch (e) {
      if (!(e instanceof NativeError)) throw e;
      err(`Couldn't prefetch MR(${e.errno}). Continue anyway`);
    }
  }
  let cq: CompletionQueue;
  try {
    cq = f.ts
      ? ctx.createCqEx({
        cqe: s.rxDepth + 1,
        channel,
        pollBatch: 2,
        wcFlags: CreateCqWcFlags.WITH_COMPLETION_TIMESTAMP,
      })
      : ctx.createCq({ cqe: s.rxDepth + 1, channel, pollBatch: 2 });
  } catch {
    throw new Failure("Couldn't create CQ");
  }
  const init = {
    type,
    sendCq: cq,
    cap: { maxSendWr: 1, maxRecvWr: s.rxDepth, maxSendSge: 1, maxRecvSge: 1 },
  };
  let qp: QueuePair;
  let qpx: QueuePairEx | null = null;
  try {
    if (f.newSend) qp = qpx = pd.createQpEx({ ...init, sendOps: [WrOpcode.SEND] });
    else qp = pd.createQp(init);
  } catch {
    throw new Failure("Couldn't create QP");
  }
  try {
    qp.toInit({ port: s.ibPort });
  } catch {
    throw new Failure("Failed to modify QP to INIT");
  }
  return { pd, mr, cq, qp, qpx, ts: f.ts ? new TsStats(tsMask) : null };
}

/**
 * Runs one side of `ibv_rc_pingpong` / `ibv_uc_pingpong` (the client when `s.server` is set);
 * returns the exit status.
 */
export async function runConnected(
  type: typeof QpType.RC | typeof QpType.UC,
  s: PingpongSettings,
  values: Values,
): Promise<number> {
  let f: Features;
  try {
    f = featuresOf(values);
  } catch (e) {
    return failed(e);
  }
  using ctx = openDevice(s.device);
  let side: Side;
  try {
    side = initSide(ctx, type, s, f);
  } catch (e) {
    return failed(e);
  }
  const { mr, cq, qp, qpx, ts } = side;
  const inline = qp.cap.maxInlineData >= s.size ? SendFlags.INLINE : 0;
  const recv = qp.prepareRecv({ wrId: RECV_WRID, sg: [{ mr, length: s.size }] });
  const sendWr = {
    wrId: SEND_WRID,
    sg: [{ mr, length: s.size }],
    flags: SendFlags.SIGNALED | inline,
  };
  const send = qpx ? qpx.prepareSendEx(sendWr) : qp.prepareSend(sendWr);
  const started = startSide(ctx, recv, s, [qp.qpNum]);
  if (!started) return 1;
  const { routs, mine: [me] } = started;

  const connect = (rem: Dest) => connectQp(qp, rem, rem.gid, s, me.psn);
  const [rem] = s.server
    ? await clientExchange(s.server, s.tcpPort, [me])
    : await serverExchange(s.tcpPort, [me], ([r]) => connect(r));
  out(destLine("remote", rem));
  if (s.server) connect(rem);
  if (s.server && f.chk) {
    for (let i = 0; i < s.size; i += PAGE_SIZE) mr.buffer[i] = 0;
  }

  const onRecv = ts ? (i: number) => ts.add((cq as CompletionQueueEx).timestamp(i)) : undefined;
  const code = await pingpongLoop({ cq, send, recv, routs, onRecv }, s);
  if (code) return code;
  for (const line of ts?.lines() ?? []) out(line);
  if (!s.server && f.chk) {
    for (let i = 0; i < s.size; i += PAGE_SIZE) {
      if (mr.buffer[i] !== 0) out(`invalid data in page ${i / PAGE_SIZE}`);
    }
  }
  return 0;
}

/** The message size the connected tools default to. */
const SIZE = 4096;

/** Runs a connected pingpong tool: its command line (the common options and `extra`), then one side. */
export function connectedTool(
  name: string,
  type: typeof QpType.RC | typeof QpType.UC,
  extra: Record<string, OptionSpec>,
): Promise<never> {
  const spec: ToolSpec = {
    name,
    synopsis: PINGPONG_SYNOPSIS,
    options: { ...pingpongOptions(SIZE), ...extra },
    maxPositionals: 1,
    permissions: PINGPONG_PERMISSIONS,
  };
  return runTool(
    spec,
    ({ values, positionals }) =>
      runConnected(type, pingpongSettings(values, positionals, SIZE), values),
  );
}
