/**
 * Queue pairs (RC, UC, UD): create with capabilities (the granted ones are read
 * back), modify with typed attributes and the INIT→RTR→RTS helpers, query, post
 * checked work requests, or prepare them once and re-post with one FFI call.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { enumName, Mtu, QpAttrMask, QpState, QpType, SendFlags, WrOpcode } from "../types/enums.ts";
import type { CompletionRecord } from "../poller/tracker.ts";
import type { WaitOptions } from "../poller/wait.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { layoutFor } from "../types/layout.ts";
import { throwErrno, throwReturned } from "../ffi/errors.ts";
import type { GidLike } from "./gid.ts";
import { NativeBlock } from "./memory.ts";
import { Resource } from "./resource.ts";
import { decodeQpAttr, encodeQpAttr, type QpAttr, type QpAttrs } from "./qp-attr.ts";
import { ListPoster } from "./post.ts";
import { InvalidWorkRequestError, QpStateError } from "./post-errors.ts";
import { PreparedRecv, PreparedSend } from "./prepared.ts";
import { type RecvWr, recvWrProblem, type SendWr, sendWrProblem } from "./wr.ts";
import type { CompletionQueue, CompletionTarget } from "./cq.ts";
import type { ProtectionDomain } from "./pd.ts";
import type { SharedReceiveQueue } from "./srq.ts";
import type { WorkCompletion } from "./wc.ts";
import type { Context } from "./context.ts";

/** Requested queue capabilities; the provider may grant more. */
export interface QpCap {
  /** Send queue depth (default 16). */
  readonly maxSendWr?: number;
  /** Receive queue depth (default 16; ignored with an SRQ). */
  readonly maxRecvWr?: number;
  /** SGEs per send WR (default 1). */
  readonly maxSendSge?: number;
  /** SGEs per receive WR (default 1). */
  readonly maxRecvSge?: number;
  /** Inline bytes per send WR (default 0). */
  readonly maxInlineData?: number;
}

/** The capabilities the provider granted. */
export interface GrantedCap {
  /** Send queue depth. */
  readonly maxSendWr: number;
  /** Receive queue depth. */
  readonly maxRecvWr: number;
  /** SGEs per send WR. */
  readonly maxSendSge: number;
  /** SGEs per receive WR. */
  readonly maxRecvSge: number;
  /** Inline bytes per send WR. */
  readonly maxInlineData: number;
}

/** How to create a QP. */
export interface QpInit {
  /** `QpType.RC`, `QpType.UC` or `QpType.UD`. */
  readonly type: number;
  /** CQ of send completions. */
  readonly sendCq: CompletionQueue;
  /** CQ of receive completions (default: `sendCq`). */
  readonly recvCq?: CompletionQueue;
  /** A shared receive queue instead of the QP's own. */
  readonly srq?: SharedReceiveQueue;
  /** Requested capabilities. */
  readonly cap?: QpCap;
  /** Every send WR completes signaled. */
  readonly sqSigAll?: boolean;
}

/** The other end of an RC/UC connection. */
export interface RemoteEndpoint {
  /** Remote QP number. */
  readonly qpNum: number;
  /** The PSN the remote side sends from (our receive PSN). */
  readonly psn: number;
  /** Remote GID (RoCE, or IB across subnets). */
  readonly gid?: GidLike;
  /** Remote LID (IB). */
  readonly lid?: number;
}

/** Options of the state-transition helpers. */
export interface ConnectOptions {
  /** Local port (default 1). */
  readonly port?: number;
  /** P_Key index (default 0). */
  readonly pkeyIndex?: number;
  /** Remote access to allow (`AccessFlags`, RC/UC; default none). */
  readonly accessFlags?: number;
  /** Q_Key (UD; default 0x11111111). */
  readonly qkey?: number;
  /** Path MTU (default `Mtu.MTU_1024`). */
  readonly pathMtu?: number;
  /** Local GID index for the GRH (required with a remote GID). */
  readonly sgidIndex?: number;
  /** Hop limit of the GRH (default 1). */
  readonly hopLimit?: number;
  /** Our send PSN (default 0). */
  readonly psn?: number;
  /** RC: responder resources (default 1). */
  readonly maxDestRdAtomic?: number;
  /** RC: initiator depth (default 1). */
  readonly maxRdAtomic?: number;
  /** RC: minimum RNR NAK timer (default 12). */
  readonly minRnrTimer?: number;
  /** RC: ACK timeout (default 14). */
  readonly timeout?: number;
  /** RC: transport retries (default 7). */
  readonly retryCnt?: number;
  /** RC: RNR retries (default 7 = infinite). */
  readonly rnrRetry?: number;
  /** Service level (default 0). */
  readonly sl?: number;
}

// every standard attribute (providers reject unknown bits such as RATE_LIMIT)
const QUERY_MASK = Object.values(QpAttrMask).reduce((m, b) => m | b, 0) & ~QpAttrMask.RATE_LIMIT;

const STATE_NAMES: string[] = [];
for (const v of Object.values(QpState)) STATE_NAMES[v] = enumName(QpState, v, "IBV_QPS_");

/** `ibv_create_qp`; returns the QP and the capabilities granted. */
function createQp(pd: ProtectionDomain, init: QpInit): [NativePointer, GrantedCap] {
  const n = native();
  const L = layoutFor(n.arch);
  const recvCq = init.recvCq ?? init.sendCq;
  const F = L.ibv_qp_init_attr.fields;
  const a = new NativeBlock(L.ibv_qp_init_attr.size, 8);
  let qp: NativePointer | null;
  let cap: GrantedCap;
  try {
    n.writePointer(a.ptr, F.send_cq.offset, init.sendCq.ptr);
    n.writePointer(a.ptr, F.recv_cq.offset, recvCq.ptr);
    n.writePointer(a.ptr, F.srq.offset, init.srq?.ptr ?? null);
    const c = init.cap ?? {};
    a.view.setUint32(F["cap.max_send_wr"].offset, c.maxSendWr ?? 16, true);
    a.view.setUint32(F["cap.max_recv_wr"].offset, init.srq ? 0 : c.maxRecvWr ?? 16, true);
    a.view.setUint32(F["cap.max_send_sge"].offset, c.maxSendSge ?? 1, true);
    a.view.setUint32(F["cap.max_recv_sge"].offset, init.srq ? 0 : c.maxRecvSge ?? 1, true);
    a.view.setUint32(F["cap.max_inline_data"].offset, c.maxInlineData ?? 0, true);
    a.view.setUint32(F.qp_type.offset, init.type, true);
    a.view.setInt32(F.sq_sig_all.offset, init.sqSigAll ? 1 : 0, true);
    qp = n.ibverbs.ibv_create_qp(pd.ptr, a.ptr);
    if (qp === null) throwErrno("ibv_create_qp");
    const caps: Readonly<Record<string, { offset: number }>> = F;
    const g = (f: string) => a.view.getUint32(caps[`cap.${f}`].offset, true);
    cap = Object.freeze({
      maxSendWr: g("max_send_wr"),
      maxRecvWr: g("max_recv_wr"),
      maxSendSge: g("max_send_sge"),
      maxRecvSge: g("max_recv_sge"),
      maxInlineData: g("max_inline_data"),
    });
  } finally {
    a.free();
  }
  return [qp, cap];
}

/** A queue pair. */
export class QueuePair extends Resource implements CompletionTarget {
  /** The `struct ibv_qp *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;
  /** Its context. */
  readonly context: Context;
  /** `QpType`. */
  readonly type: number;
  /** The QP number. */
  readonly qpNum: number;
  /** The capabilities the provider granted (e.g. the real `maxInlineData`). */
  readonly cap: GrantedCap;
  /** Send CQ. */
  readonly sendCq: CompletionQueue;
  /** Receive CQ. */
  readonly recvCq: CompletionQueue;
  /** SRQ, if any. */
  readonly srq: SharedReceiveQueue | null;
  /** Completion handler used by `cq.dispatch()` for a CQ shared by many QPs. */
  onCompletion: ((wc: WorkCompletion) => void) | null = null;
  readonly #view: DataView;
  readonly #stateOffset: number;
  readonly #attr: NativeBlock;
  readonly #send: ListPoster;
  readonly #recv: ListPoster;

  readonly #adoptedDestroy: (() => void) | null;

  /**
   * Wraps a QP created elsewhere (e.g. `rdma_create_qp`): `destroy` replaces
   * `ibv_destroy_qp` when the QP is closed.
   */
  static adopt(
    pd: ProtectionDomain,
    ptr: NativePointer,
    init: Omit<QpInit, "cap"> & { readonly caps: GrantedCap },
    destroy: () => void,
  ): QueuePair {
    return new QueuePair(pd, init, { ptr, cap: init.caps, destroy });
  }

  /** Creates a QP; prefer `pd.createQp()`. */
  constructor(
    pd: ProtectionDomain,
    init: QpInit,
    adopted?: { ptr: NativePointer; cap: GrantedCap; destroy: () => void },
  ) {
    if (init.type !== QpType.RC && init.type !== QpType.UC && init.type !== QpType.UD) {
      throw new InvalidArgumentError(
        `QP type must be QpType.RC, UC or UD, got ${enumName(QpType, init.type, "IBV_QPT_")}`,
      );
    }
    const recvCq = init.recvCq ?? init.sendCq;
    for (const cq of [init.sendCq, recvCq]) {
      cq.assertOpen();
      if (cq.context !== pd.context) throw new InvalidArgumentError("the CQ is on another device");
    }
    init.srq?.assertOpen();
    if (init.srq && init.srq.pd !== pd) throw new InvalidArgumentError("the SRQ is in another PD");
    const n = native();
    const L = layoutFor(n.arch);
    const [qp, cap] = adopted
      ? [adopted.ptr, Object.freeze({ ...adopted.cap })]
      : createQp(pd, init);
    super("QueuePair", [pd, init.sendCq, recvCq, init.srq]);
    this.ptr = qp;
    this.#adoptedDestroy = adopted?.destroy ?? null;
    this.pd = pd;
    this.context = pd.context;
    this.type = init.type;
    this.cap = cap;
    this.sendCq = init.sendCq;
    this.recvCq = recvCq;
    this.srq = init.srq ?? null;
    this.#view = new DataView(n.arrayBuffer(qp, L.ibv_qp.size));
    this.qpNum = this.#view.getUint32(L.ibv_qp.fields.qp_num.offset, true);
    this.#stateOffset = L.ibv_qp.fields.state.offset;
    this.#attr = new NativeBlock(L.ibv_qp_attr.size + L.ibv_qp_init_attr.size, 8);
    this.#send = new ListPoster("post_send", pd.context.op("post_send")!, qp, L.ibv_send_wr.size);
    this.#recv = new ListPoster("post_recv", pd.context.op("post_recv")!, qp, L.ibv_recv_wr.size);
    this.sendCq.attach(this);
    if (recvCq !== this.sendCq) recvCq.attach(this);
    pd.context.objects.set(n.address(qp), this);
  }

  /** The state libibverbs last recorded (`qp->state`, updated by every modify). */
  get state(): number {
    return this.#view.getUint32(this.#stateOffset, true);
  }

  /**
   * Records a state the QP reached outside libibverbs (on iWARP the kernel moves it to
   * RTS during the MPA exchange and to ERR on disconnect), so `state` and the posting
   * checks see it. Used by the connection manager; it does not modify the QP.
   */
  recordState(state: QpState): void {
    if (this.closed) return;
    this.#view.setUint32(this.#stateOffset, state, true);
  }

  /** The state's C name. */
  get stateName(): string {
    return STATE_NAMES[this.state] ?? `<unknown ${this.state}>`;
  }

  /** `ibv_modify_qp` with the given attributes (the mask follows from the fields). */
  modify(attr: QpAttr): void {
    this.assertOpen();
    this.#attr.clear();
    const mask = encodeQpAttr(this.#attr.view, attr);
    if (mask === 0) throw new InvalidArgumentError("modify: no attribute given");
    const rc = native().ibverbs.ibv_modify_qp(this.ptr, this.#attr.ptr, mask);
    if (rc !== 0) {
      const to = attr.qpState === undefined ? "" : ` to ${STATE_NAMES[attr.qpState]}`;
      throwReturned("ibv_modify_qp", rc, `QP ${this.qpNum}${to}`);
    }
  }

  /** `ibv_query_qp`: every attribute, with the state's name and the caps. */
  query(): QpAttrs {
    this.assertOpen();
    const n = native();
    const L = layoutFor(n.arch);
    this.#attr.clear();
    const rc = n.ibverbs.ibv_query_qp(
      this.ptr,
      this.#attr.ptr,
      QUERY_MASK,
      this.#attr.at(L.ibv_qp_attr.size),
    );
    if (rc !== 0) throwReturned("ibv_query_qp", rc);
    return decodeQpAttr(this.#attr.view);
  }

  /** RESET → INIT (port, P_Key index, and access flags for RC/UC or Q_Key for UD). */
  toInit(o: ConnectOptions = {}): void {
    this.modify({
      qpState: QpState.INIT,
      pkeyIndex: o.pkeyIndex ?? 0,
      port: o.port ?? 1,
      ...(this.type === QpType.UD
        ? { qkey: o.qkey ?? 0x11111111 }
        : { accessFlags: o.accessFlags ?? 0 }),
    });
  }

  /** INIT → RTR. RC/UC need the remote QP number, PSN and GID (or LID); UD needs nothing. */
  toRtr(remote?: RemoteEndpoint, o: ConnectOptions = {}): void {
    if (this.type === QpType.UD) return this.modify({ qpState: QpState.RTR });
    if (!remote) throw new InvalidArgumentError("toRtr: an RC/UC QP needs the remote endpoint");
    if (remote.gid !== undefined && o.sgidIndex === undefined) {
      throw new InvalidArgumentError("toRtr: a remote GID needs options.sgidIndex");
    }
    this.modify({
      qpState: QpState.RTR,
      pathMtu: o.pathMtu ?? Mtu.MTU_1024,
      destQpNum: remote.qpNum,
      rqPsn: remote.psn,
      ahAttr: {
        port: o.port ?? 1,
        dlid: remote.lid ?? 0,
        sl: o.sl ?? 0,
        grh: remote.gid === undefined
          ? undefined
          : { dgid: remote.gid, sgidIndex: o.sgidIndex!, hopLimit: o.hopLimit ?? 1 },
      },
      ...(this.type === QpType.RC
        ? { maxDestRdAtomic: o.maxDestRdAtomic ?? 1, minRnrTimer: o.minRnrTimer ?? 12 }
        : {}),
    });
  }

  /** RTR → RTS (send PSN; RC also timeout, retry counts, initiator depth). */
  toRts(o: ConnectOptions = {}): void {
    this.modify({
      qpState: QpState.RTS,
      sqPsn: o.psn ?? 0,
      ...(this.type === QpType.RC
        ? {
          timeout: o.timeout ?? 14,
          retryCnt: o.retryCnt ?? 7,
          rnrRetry: o.rnrRetry ?? 7,
          maxRdAtomic: o.maxRdAtomic ?? 1,
        }
        : {}),
    });
  }

  /** RESET → INIT → RTR → RTS in one call. */
  connect(remote: RemoteEndpoint | undefined, o: ConnectOptions = {}): void {
    this.toInit(o);
    this.toRtr(remote, o);
    this.toRts(o);
  }

  /** Moves the QP to ERR: outstanding WRs complete with WR_FLUSH_ERR. */
  toError(): void {
    this.modify({ qpState: QpState.ERR });
  }

  /** Moves the QP to RESET. */
  reset(): void {
    this.modify({ qpState: QpState.RESET });
  }

  /** Throws unless send WRs may be posted (not in RESET, INIT or RTR). */
  checkSendState(): void {
    const s = this.#view.getUint32(this.#stateOffset, true);
    if (s <= QpState.RTR) throw new QpStateError("ibv_post_send", STATE_NAMES[s]);
  }

  /** Throws unless receive WRs may be posted (not in RESET, not with an SRQ). */
  checkRecvState(): void {
    if (this.srq) throw new InvalidArgumentError("ibv_post_recv: this QP uses an SRQ; post there");
    const s = this.#view.getUint32(this.#stateOffset, true);
    if (s === QpState.RESET) throw new QpStateError("ibv_post_recv", STATE_NAMES[s]);
  }

  /**
   * Checks and posts send WRs. When WR `i` is invalid, WRs 0..i-1 are posted and
   * {@link InvalidWorkRequestError} says which one and why; a provider failure raises
   * PostError with the index of `bad_wr`.
   */
  postSend(wrs: SendWr | readonly SendWr[]): void {
    this.assertOpen();
    const list: readonly SendWr[] = Array.isArray(wrs) ? wrs : [wrs as SendWr];
    this.checkSendState();
    let bad = -1;
    let reason = "";
    for (let i = 0; i < list.length; i++) {
      const p = sendWrProblem(list[i], this.#limits());
      if (p) {
        bad = i;
        reason = p;
        break;
      }
    }
    const count = bad < 0 ? list.length : bad;
    if (count > 0) {
      this.#send.postSend(list, count);
      for (let i = 0; i < count; i++) {
        const b = list[i].bind;
        if (b && (list[i].opcode === WrOpcode.BIND_MW)) b.mw.rkey = b.mw.nextRkey();
      }
    }
    if (bad >= 0) throw new InvalidWorkRequestError("ibv_post_send", bad, reason);
  }

  /**
   * Posts one send WR, signaled, and resolves with its completion (rejects with
   * WorkCompletionError carrying the status; ClosedError when the CQ closes first).
   * Give each outstanding WR its own `wrId`.
   */
  send(wr: SendWr, options?: WaitOptions): Promise<CompletionRecord> {
    const flags = (wr.flags ?? SendFlags.SIGNALED) | SendFlags.SIGNALED;
    try {
      this.postSend(flags === wr.flags ? wr : { ...wr, flags });
    } catch (e) {
      return Promise.reject(e);
    }
    return this.sendCq.track(BigInt(wr.wrId ?? 0), options);
  }

  /** Posts one receive WR and resolves with its completion (see {@link QueuePair.send}). */
  recv(wr: RecvWr, options?: WaitOptions): Promise<CompletionRecord> {
    try {
      this.postRecv(wr);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.recvCq.track(BigInt(wr.wrId ?? 0), options);
  }

  /** Checks and posts receive WRs (same list semantics as {@link QueuePair.postSend}). */
  postRecv(wrs: RecvWr | readonly RecvWr[]): void {
    this.assertOpen();
    const list: readonly RecvWr[] = Array.isArray(wrs) ? wrs : [wrs as RecvWr];
    this.checkRecvState();
    let bad = -1;
    let reason = "";
    for (let i = 0; i < list.length; i++) {
      const p = recvWrProblem(list[i], this.pd, this.cap.maxRecvSge);
      if (p) {
        bad = i;
        reason = p;
        break;
      }
    }
    const count = bad < 0 ? list.length : bad;
    if (count > 0) this.#recv.postRecv(list, count);
    if (bad >= 0) throw new InvalidWorkRequestError("ibv_post_recv", bad, reason);
  }

  /**
   * Builds send WRs once in native memory; `prepared.post()` re-posts them with one
   * FFI call that allocates nothing. All are checked now; nothing is posted.
   */
  prepareSend(wrs: SendWr | readonly SendWr[]): PreparedSend {
    this.assertOpen();
    const list: readonly SendWr[] = Array.isArray(wrs) ? wrs : [wrs as SendWr];
    list.forEach((wr, i) => {
      const p = sendWrProblem(wr, this.#limits());
      if (p) throw new InvalidWorkRequestError("prepareSend", i, p);
    });
    return new PreparedSend(this, list);
  }

  /** Builds receive WRs once in native memory for repeated posting. */
  prepareRecv(wrs: RecvWr | readonly RecvWr[]): PreparedRecv {
    this.assertOpen();
    const list: readonly RecvWr[] = Array.isArray(wrs) ? wrs : [wrs as RecvWr];
    list.forEach((wr, i) => {
      const p = recvWrProblem(wr, this.pd, this.cap.maxRecvSge);
      if (p) throw new InvalidWorkRequestError("prepareRecv", i, p);
    });
    return new PreparedRecv(this, "post_recv", this.ptr, list, () => this.checkRecvState());
  }

  #limits() {
    return {
      type: this.type,
      pd: this.pd,
      maxSendSge: this.cap.maxSendSge,
      maxInlineData: this.cap.maxInlineData,
    };
  }

  protected destroy(): void {
    const n = native();
    this.sendCq.detach(this);
    this.recvCq.detach(this);
    this.context.objects.delete(n.address(this.ptr));
    let rc = 0;
    if (this.#adoptedDestroy) this.#adoptedDestroy();
    else rc = n.ibverbs.ibv_destroy_qp(this.ptr);
    this.#send.free();
    this.#recv.free();
    this.#attr.free();
    if (rc !== 0) throwReturned("ibv_destroy_qp", rc);
  }
}
