/**
 * The verbs objects of a run, laid out like perftest's: one MR whose first half holds each
 * QP's send area and whose second half each QP's receive area (the address advertised to the
 * peer), each area `INC(max(size, page), cache line)` bytes; CQs of tx depth × QPs (send) and
 * rx depth × QPs (receive, SEND tests only); QPs with perftest's capabilities. An iWARP
 * send_bw also gets perftest's credit MR (the receiver RDMA-writes how many messages it has
 * received, so the sender never overruns the receive queue: iWARP has no RNR retry).
 *
 * @module
 */

import {
  AccessFlags,
  type CompletionChannel,
  type CompletionQueue,
  type Context,
  type MemoryRegion,
  type ProtectionDomain,
  type QpInit,
  QpType,
  type QueuePair,
} from "../../../mod.ts";
import type { Settings, Verb } from "./cli.ts";

/** The GRH room in front of a UD receive. */
export const UD_GRH = 40;

/** perftest's `INC`: `size` rounded up to whole cache lines (at least one). */
export function inc(size: number, cacheLine: number): number {
  return size > cacheLine ? Math.ceil(size / cacheLine) * cacheLine : cacheLine;
}

/** Where things are in the MR. */
export class Layout {
  /** Bytes of one QP's send (or receive) area. */
  readonly region: number;
  /** Bytes of the MR. */
  readonly length: number;
  readonly #numQps: number;
  readonly #udShift: number;

  constructor(size: number, numQps: number, cycleBuffer: number, cacheLine: number, ud: boolean) {
    this.region = inc(Math.max(size, cycleBuffer), cacheLine);
    this.#numQps = numQps;
    this.#udShift = ud ? cacheLine - UD_GRH : 0;
    this.length = 2 * numQps * this.region + (ud ? cacheLine : 0);
  }

  /** Offset of QP `i`'s send area. */
  sendOffset(i: number): number {
    return i * this.region;
  }

  /** Offset of QP `i`'s receive area: what the peer writes to and reads from. */
  remoteOffset(i: number): number {
    return (this.#numQps + i) * this.region;
  }

  /** Offset of QP `i`'s receive buffer (UD: shifted so the payload after the GRH is aligned). */
  recvOffset(i: number): number {
    return this.remoteOffset(i) + this.#udShift;
  }
}

/** The access flags perftest gives a QP (`qp_access_flags` at INIT). */
export function qpAccess(verb: Verb): number {
  switch (verb) {
    case "atomic":
      return AccessFlags.REMOTE_ATOMIC;
    case "read":
      return AccessFlags.REMOTE_READ;
    case "write":
      return AccessFlags.REMOTE_WRITE;
    default:
      return AccessFlags.REMOTE_WRITE | AccessFlags.LOCAL_WRITE;
  }
}

/** The access flags of the data MR (an iWARP read target also needs remote write). */
function mrAccess(verb: Verb, iwarp: boolean): number {
  const A = AccessFlags;
  switch (verb) {
    case "write":
      return A.LOCAL_WRITE | A.REMOTE_WRITE;
    case "read":
      return A.LOCAL_WRITE | A.REMOTE_READ | (iwarp ? A.REMOTE_WRITE : 0);
    case "atomic":
      return A.LOCAL_WRITE | A.REMOTE_ATOMIC;
    default:
      return A.LOCAL_WRITE;
  }
}

/** Everything but the QPs. */
export interface Base {
  readonly ctx: Context;
  readonly pd: ProtectionDomain;
  readonly channel: CompletionChannel | undefined;
  readonly sendCq: CompletionQueue;
  /** The send CQ itself unless this is a SEND test. */
  readonly recvCq: CompletionQueue;
  readonly mr: MemoryRegion;
  readonly layout: Layout;
  /** send_bw on iWARP: `u32` per QP of our counts, then `u32` per QP the peer writes. */
  readonly credit: MemoryRegion | undefined;
}

/** All of a run's verbs objects. */
export interface Resources extends Base {
  readonly qps: QueuePair[];
}

/** Creates the PD, completion channel (-e), CQs and MRs on `ctx`. */
export function createBase(
  ctx: Context,
  s: Settings,
  sys: { cycleBuffer: number; cacheLine: number; size: number; iwarp: boolean; credits: boolean },
): Base {
  const pd = ctx.allocPd();
  const channel = s.events ? ctx.createCompChannel() : undefined;
  const batch = s.tool.test === "lat" ? 1 : 16;
  const sendCq = ctx.createCq({ cqe: s.txDepth * s.numQps, channel, pollBatch: batch });
  const recvCq = s.tool.verb === "send"
    ? ctx.createCq({ cqe: s.rxDepth * s.numQps, channel, pollBatch: batch })
    : sendCq;
  const layout = new Layout(
    sys.size,
    s.numQps,
    sys.cycleBuffer,
    sys.cacheLine,
    s.connection === "UD",
  );
  const mr = pd.allocBuffer(layout.length, { access: mrAccess(s.tool.verb, sys.iwarp) });
  mr.buffer.fill(0);
  const credit = sys.credits
    ? pd.allocBuffer(8 * s.numQps, { access: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE })
    : undefined;
  credit?.buffer.fill(0);
  return { ctx, pd, channel, sendCq, recvCq, mr, layout, credit };
}

/** perftest's QP: tx depth sends, rx depth receives (SEND), one SGE, the inline size. */
export function qpInit(b: Base, s: Settings): QpInit {
  return {
    type: s.connection === "UD" ? QpType.UD : s.connection === "UC" ? QpType.UC : QpType.RC,
    sendCq: b.sendCq,
    recvCq: b.recvCq,
    cap: {
      maxSendWr: s.txDepth,
      maxRecvWr: s.tool.verb === "send" ? s.rxDepth : 1,
      maxSendSge: 1,
      maxRecvSge: 1,
      maxInlineData: s.inlineSize,
    },
  };
}
