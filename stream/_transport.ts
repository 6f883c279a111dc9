/**
 * The verbs side of one stream: PD, completion channel, CQ, the QP on the CM id, the three
 * registered areas (send ring, receive ring, target SGL) and the work requests the
 * {@link StreamEngine} asks for, prepared once and re-posted with one FFI call each (fields
 * updated in place: nothing is allocated per post).
 *
 * Queue sizes and flags follow rsocket: one CQ of `sq + rq` entries for both directions, every
 * send signaled, two send SGEs (a chunk may wrap around the end of the send ring), one receive
 * SGE (iWARP's 4-byte message slot; none otherwise).
 *
 * @module
 */

import type { ConnInfo } from "./options.ts";
import { AccessFlags, SendFlags, WrOpcode } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import type { CmId } from "../cm/id.ts";
import type { CompletionQueue } from "../verbs/cq.ts";
import type { Poller } from "../poller/poller.ts";
import type { MemoryRegion } from "../verbs/mr.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { PreparedRecv, PreparedSend } from "../verbs/prepared.ts";
import type { QueuePair } from "../verbs/qp.ts";
import type { SendWr } from "../verbs/wr.ts";
import { native } from "../ffi/native.ts";
import type { Native } from "../types/native.ts";
import { deviceLimits } from "./_device-limits.ts";
import { StreamCq } from "./_stream-cq.ts";
import { StreamEngine } from "./_engine.ts";
import {
  type EngineConfig,
  receiveBatch,
  receiveMemorySize,
  RECV_WR_ID,
  sendMemorySize,
  type StreamTransport,
  targetMemorySize,
} from "./_engine-contract.ts";
import { clampQueueDepth, RS_MSG_SIZE } from "./protocol.ts";

/** Sizes of a stream (rsocket's defaults fill what is not given). */
export interface StreamSizes {
  /** Send ring bytes. */
  readonly sendBufferSize: number;
  /** Receive ring bytes. */
  readonly receiveBufferSize: number;
  /** Send queue depth asked for (clamped to 16..min(device, 0xfffe)). */
  readonly sendQueueDepth: number;
  /** Receive queue depth asked for (same clamp); also the credits given to the peer. */
  readonly receiveQueueDepth: number;
  /** Inline bytes asked for (the QP may grant more; iWARP needs at least 4). */
  readonly inlineSize: number;
  /** Entries of this side's iomap table (rsocket's `RDMA_IOMAPSIZE`, rounded); default 0. */
  readonly iomapSize?: number;
  /**
   * Send WRs added to the QP (and CQ entries) beyond the stream's own, for one-sided operations
   * posted by the connection (remote buffers); the engine never uses them. Default 0.
   */
  readonly extraSendWrs?: number;
}

const SIGNALED = SendFlags.SIGNALED;
const INLINE = SendFlags.SIGNALED | SendFlags.INLINE;

/** One prepared send list and the SGE values last written into it (to skip unchanged fields). */
class Prepared {
  readonly p: PreparedSend;
  readonly #off: number[];
  readonly #len: number[];
  readonly #flags: number[];
  readonly #mrLength: number;

  constructor(p: PreparedSend, wrs: readonly SendWr[], mrLength: number) {
    this.p = p;
    this.#flags = wrs.map((w) => w.flags ?? SIGNALED);
    const sges = wrs.flatMap((w) => w.sg ?? []);
    this.#off = sges.map((s) => s.offset ?? 0);
    this.#len = sges.map((s) => s.length ?? 1);
    this.#mrLength = mrLength;
  }

  /** Sets SGE `j` of WR `i` (`k` its index among all SGEs of the list) to `[off, off + len)`. */
  sge(i: number, j: number, k: number, off: number, len: number): void {
    const curOff = this.#off[k];
    const curLen = this.#len[k];
    if (curOff === off && curLen === len) return;
    const p = this.p;
    if (curOff + len <= this.#mrLength) {
      if (curLen !== len) p.setLength(i, j, len);
      if (curOff !== off) p.setOffset(i, j, off);
    } else if (off + curLen <= this.#mrLength) {
      p.setOffset(i, j, off);
      p.setLength(i, j, len);
    } else {
      p.setLength(i, j, 1);
      p.setOffset(i, j, off);
      p.setLength(i, j, len);
    }
    this.#off[k] = off;
    this.#len[k] = len;
  }

  flags(i: number, flags: number): void {
    if (this.#flags[i] === flags) return;
    this.p.setFlags(i, flags);
    this.#flags[i] = flags;
  }
}

/** The verbs objects of one stream and the engine that drives them. */
export class VerbsTransport implements StreamTransport {
  /** The protection domain everything below belongs to. */
  readonly pd: ProtectionDomain;
  /** The CQ of both directions, on the completion channel streams share (see `_stream-cq.ts`). */
  readonly events: StreamCq;
  /** The CQ of both directions (`events.cq`). */
  readonly cq: CompletionQueue;
  /** The QP, created on the CM id. */
  readonly qp: QueuePair;
  /** Send ring, SGL-update slots and the message slot. */
  readonly sendMr: MemoryRegion;
  /** Receive ring (the peer writes into it) and iWARP message slots. */
  readonly recvMr: MemoryRegion;
  /** Target SGL (the peer writes its receive-buffer advertisements into it). */
  readonly targetMr: MemoryRegion;
  /** The protocol state machine. */
  readonly engine: StreamEngine;
  /** True on iWARP (data by RDMA WRITE, messages by SEND). */
  readonly messageSend: boolean;
  /** Send WRs of the QP beyond the engine's (see {@link StreamSizes.extraSendWrs}). */
  readonly extraSendWrs: number;
  /** The device's `max_qp_rd_atom` (RDMA READs a QP serves at once). */
  readonly maxResponderResources: number;
  /** The device's `max_qp_init_rd_atom` (RDMA READs a QP issues at once). */
  readonly maxInitiatorDepth: number;
  /** The port's largest message (`max_msg_sz`): one-sided operations are split below it. */
  readonly maxMessageSize: number;
  /** RDMA READs this side may have in flight (the initiator depth connect/accept settled). */
  readDepth = 0;
  /** This side's connection tag (in its connection data; see `ConnData.tag`). */
  readonly tag: number = 1 + Math.floor(Math.random() * 0xfffe);
  /** The peer's connection tag (0: the peer is not this library). */
  peerTag = 0;
  /** The peer's QP number when the connection manager told it (0: unknown). */
  peerQpNum = 0;

  // RDMA WRITE WITH IMMEDIATE with 0, 1 or 2 SGEs (IB/RoCE)
  readonly #imm0: Prepared | null = null;
  readonly #imm1: Prepared | null = null;
  #imm2: Prepared | null = null; // made at the first chunk that wraps around the ring's end
  // iWARP: [RDMA WRITE, SEND] pairs with 1 or 2 SGEs in the write, and a lone SEND
  readonly #pair1: Prepared | null = null;
  #pair2: Prepared | null = null; // made at the first chunk that wraps
  readonly #msg: PreparedSend | null = null;
  // keepalive: a zero-length RDMA WRITE without immediate data (made at the first probe)
  #probe: PreparedSend | null = null;
  // riowrite: plain RDMA WRITE with 1 or 2 SGEs (made on first use)
  #direct1: Prepared | null = null;
  #direct2: Prepared | null = null;
  #pending: Prepared | null = null;
  // receives: no SGE (posted in batches), or one 4-byte slot (iWARP)
  #recv1: PreparedRecv | null = null; // made when receives are due in less than a batch
  readonly #recvBatch: PreparedRecv | null = null;
  readonly #recvSlot: PreparedRecv | null = null;
  #recvsDue = 0;
  readonly #native: Native = native();
  /** Receives posted together ({@link receiveBatch} of the receive queue's depth). */
  readonly #recvBatchSize: number;
  /** Where iWARP's message SEND takes its 4 bytes: the last 8 of the send area. */
  #messageOffset = 0;

  /**
   * Creates the verbs objects on `id` (address resolved, or an incoming request) and the engine;
   * the CQ's events come through `poller`.
   */
  constructor(id: CmId, sizes: StreamSizes, poller: Poller) {
    const ctx = id.context;
    const iwarp = id.transport === "iwarp";
    this.messageSend = iwarp;
    const limits = deviceLimits(ctx, id.portNum || 1);
    const devMax = limits.maxQpWr;
    const sq = clampQueueDepth(sizes.sendQueueDepth, devMax);
    const rq = clampQueueDepth(sizes.receiveQueueDepth, devMax);
    this.#recvBatchSize = receiveBatch(rq);
    const extra = Math.max(0, Math.min(sizes.extraSendWrs ?? 0, devMax - sq));
    this.extraSendWrs = extra;
    this.maxResponderResources = limits.maxQpRdAtom;
    this.maxInitiatorDepth = limits.maxQpInitRdAtom;
    this.maxMessageSize = limits.maxMessageSize;
    // iWARP messages are 4-byte inline SENDs (newer librdmacm raises the inline size the same way)
    const inlineAsked = iwarp ? Math.max(sizes.inlineSize, RS_MSG_SIZE) : sizes.inlineSize;
    const pd = ctx.allocPd();
    this.pd = pd;
    try {
      this.events = new StreamCq(ctx, poller, sq + rq + extra);
      this.cq = this.events.cq;
      this.qp = id.createQp(pd, {
        sendCq: this.cq,
        recvCq: this.cq,
        cap: {
          maxSendWr: sq + extra,
          maxRecvWr: rq,
          maxSendSge: 2,
          maxRecvSge: 1,
          maxInlineData: inlineAsked,
        },
        sqSigAll: true,
      });
      const granted = this.qp.cap.maxInlineData;
      if (iwarp && granted < RS_MSG_SIZE) {
        throw new InvalidArgumentError(
          `the device grants ${granted} inline bytes; rsocket over iWARP needs ${RS_MSG_SIZE}`,
        );
      }
      const config: EngineConfig = {
        sendBufferSize: sizes.sendBufferSize,
        receiveBufferSize: sizes.receiveBufferSize,
        sendQueueDepth: sq,
        receiveQueueDepth: rq,
        inlineSize: granted,
        messageSend: iwarp,
        iomapSize: sizes.iomapSize ?? 0,
      };
      const local = AccessFlags.LOCAL_WRITE;
      const remote = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE;
      const sendSize = sendMemorySize(config);
      this.sendMr = pd.allocBuffer(sendSize, { access: local });
      this.#messageOffset = sendSize - 8;
      this.recvMr = pd.allocBuffer(receiveMemorySize(config), { access: remote });
      this.targetMr = pd.allocBuffer(targetMemorySize(config), { access: remote });
      if (!iwarp) {
        this.#imm0 = this.#prepare([this.#immWr(0)]);
        this.#imm1 = this.#prepare([this.#immWr(1)]);
        const recv = { wrId: RECV_WR_ID, sg: [] };
        this.#recvBatch = this.qp.prepareRecv(new Array(this.#recvBatchSize).fill(recv));
      } else {
        this.#pair1 = this.#prepare([this.#writeWr(1), this.#messageWr()]);
        this.#msg = this.qp.prepareSend(this.#messageWr());
        this.#recvSlot = this.qp.prepareRecv({
          wrId: RECV_WR_ID,
          sg: [{ mr: this.recvMr, offset: config.receiveBufferSize, length: RS_MSG_SIZE }],
        });
      }
      this.engine = new StreamEngine(config, {
        send: this.sendMr.buffer,
        recv: this.recvMr.buffer,
        recvAddr: this.recvMr.addrNumber,
        recvKey: this.recvMr.rkey,
        target: this.targetMr.buffer,
        targetAddr: this.targetMr.addrNumber,
        targetKey: this.targetMr.rkey,
      }, this);
    } catch (e) {
      this.close();
      throw e;
    }
  }

  /** Posts an RDMA WRITE (WITH IMMEDIATE when `imm >= 0`); see {@link StreamTransport.write}. */
  write(
    wrId: number,
    off1: number,
    len1: number,
    off2: number,
    len2: number,
    inline: boolean,
    remoteHigh: number,
    remoteLow: number,
    rkey: number,
    imm: number,
  ): void {
    let w: Prepared;
    if (imm >= 0) {
      w = len1 === 0 ? this.#imm0! : len2 === 0 ? this.#imm1! : (this.#imm2 ??= this.#wrapping());
    } else w = len2 === 0 ? this.#pair1! : (this.#pair2 ??= this.#wrapping());
    const p = w.p;
    p.setWrId(0, wrId);
    p.setRemoteAddrWords(0, remoteHigh, remoteLow);
    p.setRkey(0, rkey);
    if (len1 > 0) w.sge(0, 0, 0, off1, len1);
    if (len2 > 0) w.sge(0, 1, 1, off2, len2);
    w.flags(0, inline ? INLINE : SIGNALED);
    if (imm >= 0) {
      p.setImm(0, imm);
      p.post();
    } else {
      this.#pending = w; // posted with the message SEND that follows
    }
  }

  /** Posts the iWARP message SEND (with the RDMA WRITE before it, when there is one). */
  send(wrId: number, _off: number, _len: number): void {
    const w = this.#pending;
    if (w) {
      this.#pending = null;
      w.p.setWrId(1, wrId);
      w.p.post();
    } else {
      this.#msg!.setWrId(0, wrId);
      this.#msg!.post();
    }
  }

  /** Posts a plain RDMA WRITE (rsocket's `riowrite`); see {@link StreamTransport.writeDirect}. */
  writeDirect(
    wrId: number,
    off1: number,
    len1: number,
    off2: number,
    len2: number,
    inline: boolean,
    remoteHigh: number,
    remoteLow: number,
    rkey: number,
  ): void {
    const w = len2 === 0
      ? (this.#direct1 ??= this.#prepare([this.#writeWr(1)]))
      : (this.#direct2 ??= this.#prepare([this.#writeWr(2)]));
    const p = w.p;
    p.setWrId(0, wrId);
    p.setRemoteAddrWords(0, remoteHigh, remoteLow);
    p.setRkey(0, rkey);
    w.sge(0, 0, 0, off1, len1);
    if (len2 > 0) w.sge(0, 1, 1, off2, len2);
    w.flags(0, inline ? INLINE : SIGNALED);
    p.post();
  }

  /** The data chunk that wraps around the send ring's end (two SGEs), prepared on first use. */
  #wrapping(): Prepared {
    return this.#prepare(
      this.messageSend ? [this.#writeWr(2), this.#messageWr()] : [this.#immWr(2)],
    );
  }

  /** Prepares `wrs` on the QP with the SGE bookkeeping of {@link Prepared}. */
  #prepare(wrs: SendWr[]): Prepared {
    return new Prepared(this.qp.prepareSend(wrs), wrs, this.sendMr.length);
  }

  /** `n` placeholder SGEs in the send ring (set per post). */
  #sges(n: number): { mr: MemoryRegion; offset: number; length: number }[] {
    const mr = this.sendMr;
    return Array.from({ length: n }, () => ({ mr, offset: 0, length: 1 }));
  }

  /** RDMA WRITE WITH IMMEDIATE of `n` SGEs (IB/RoCE data and messages). */
  #immWr(n: number): SendWr {
    return {
      opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
      flags: SIGNALED,
      imm: 0,
      remote: { addr: 0, rkey: 0 },
      sg: this.#sges(n),
    };
  }

  /** Plain RDMA WRITE of `n` SGEs (iWARP data, `riowrite`; with none, the keepalive probe). */
  #writeWr(n: number): SendWr {
    return {
      opcode: WrOpcode.RDMA_WRITE,
      flags: SIGNALED,
      remote: { addr: 0, rkey: 0 },
      sg: this.#sges(n),
    };
  }

  /** iWARP's message: a 4-byte inline SEND from its slot at the send area's end. */
  #messageWr(): SendWr {
    const sg = [{ mr: this.sendMr, offset: this.#messageOffset, length: RS_MSG_SIZE }];
    return { opcode: WrOpcode.SEND, flags: INLINE, sg };
  }

  /** What the connection runs with (`conn.info`). */
  info(): ConnInfo {
    const e = this.engine;
    return {
      sendBufferSize: e.sendBufferSize,
      receiveBufferSize: e.receiveBufferSize,
      sendQueueDepth: e.sendQueueDepth,
      receiveQueueDepth: e.receiveQueueDepth,
      inlineSize: e.inlineSize,
      transport: e.messageSend ? "iwarp" : "ib",
      iomapSize: e.iomapSize,
      remoteIomapSize: e.remoteIomapSize,
      readDepth: this.readDepth,
      remoteQueueDepth: this.extraSendWrs,
    };
  }

  /** Copies between a caller's array and the rings; see {@link StreamTransport.copy}. */
  copy(dst: Uint8Array, to: number, src: Uint8Array, from: number, n: number): void {
    this.#native.copy(dst, to, src, from, n);
  }

  /** Posts rsocket's keepalive probe; see {@link StreamTransport.probe}. */
  probe(wrId: number): void {
    const p = this.#probe ??= this.qp.prepareSend(this.#writeWr(0));
    p.setWrId(0, wrId);
    p.post();
  }

  /**
   * Posts one receive: iWARP's at once; the others (no SGE) in batches of {@link receiveBatch},
   * the rest by {@link VerbsTransport.postReceives} (one post per batch, not per message).
   */
  recv(wrId: number, off: number): void {
    if (off < 0) {
      if (++this.#recvsDue === this.#recvBatchSize) {
        this.#recvBatch!.post();
        this.#recvsDue = 0;
      }
      return;
    }
    const r = this.#recvSlot!;
    r.setWrId(0, wrId);
    r.setOffset(0, 0, off);
    r.post();
  }

  /** Posts the receives held back, in batches. */
  postReceives(): void {
    while (this.#recvsDue >= this.#recvBatchSize) {
      this.#recvBatch!.post();
      this.#recvsDue -= this.#recvBatchSize;
    }
    if (this.#recvsDue === 0) return;
    const one = this.#recv1 ??= this.qp.prepareRecv({ wrId: RECV_WR_ID, sg: [] });
    while (this.#recvsDue > 0) {
      one.post();
      this.#recvsDue--;
    }
  }

  /**
   * Releases everything but the QP's CM id: the QP (with its prepared WRs), the MRs, the PD, the
   * CQ (and its use of the shared channel). Close the id first (it destroys the QP with
   * `rdma_destroy_qp`).
   */
  close(): void {
    let first: unknown;
    for (const o of [this.qp, this.pd, this.events]) {
      try {
        o?.close();
      } catch (e) {
        first ??= e;
      }
    }
    if (first) throw first;
  }
}
