/**
 * Queue pairs (RC, UC, UD): create with capabilities (the granted ones are read back), modify
 * with typed attributes and the INIT->RTR->RTS helpers, query, post checked work requests, or
 * prepare them once and re-post with one FFI call.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import {
  lazyEnumNames,
  QpAttrMask,
  QpState,
  QpType,
  SendFlags,
  type WrOpcode,
} from "../types/enums.ts";
import type { CompletionRecord } from "../poller/tracker.ts";
import type { WaitOptions } from "../poller/wait.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { describe } from "../types/check.ts";
import { throwErrno, throwReturned } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import { formatGid, type GidLike, parseGid } from "./gid.ts";
import { modifyQp, type QpAttr, type QpAttrs, queryQp } from "./qp-attr.ts";
import {
  type CheckedQpInit,
  checkQpInit,
  createWithInitAttr,
  type GrantedCap,
  type QpInit,
} from "./qp-init.ts";
import {
  initAttr,
  type QpTransitionOptions,
  type RemoteEndpoint,
  rtrAttr,
  rtsAttr,
} from "./qp-transition.ts";
import { ListPoster, One, postChecked } from "./_post.ts";
import { InvalidWorkRequestError, QpStateError } from "./post-errors.ts";
import { type PreparedRecv, type PreparedSend, prepareRecv, prepareSend } from "./prepared.ts";
import {
  OPCODE_RULES,
  type RecvWr,
  recvWrProblem,
  type SendLimits,
  type SendWr,
  sendWrProblem,
} from "./wr.ts";
import { commitBinds } from "./_wr-list.ts";
import { attachTarget, detachTarget, trackTagged } from "./cq.ts";
import type { CompletionQueue } from "./cq.ts";
import type { ProtectionDomain } from "./pd.ts";
import type { SharedReceiveQueue } from "./srq.ts";
import type { WorkCompletion } from "./wc.ts";
import type { Context } from "./context.ts";
import { contextObjects, forgetObject, rememberObject } from "./_objects.ts";

// every standard attribute (providers reject unknown bits such as RATE_LIMIT)
const QUERY_MASK = Object.values(QpAttrMask).reduce((m: number, b) => m | b, 0) &
  ~QpAttrMask.RATE_LIMIT;

const stateNames = lazyEnumNames(QpState, "IBV_QPS_");
// any value: `modify` names the state it was asked for before the attributes are checked
const stateName = (s: unknown): string =>
  (typeof s === "number" ? stateNames(s) : undefined) ?? `<unknown ${describe(s)}>`;

/**
 * The native QP a {@link QueuePair} wraps, however it was made (`ibv_create_qp`,
 * `ibv_create_qp_ex`, `rdma_create_qp`): its pointer, the capabilities the provider granted, and
 * how to release it (module-private to the library).
 */
export interface QpHandle {
  /** The `struct ibv_qp *`. */
  readonly ptr: NativePointer;
  /** The granted capabilities. */
  readonly cap: GrantedCap;
  /** Releases the native QP; throws a typed error when that fails. */
  readonly destroy: () => void;
}

/**
 * What `postChecked` and the prepared lists call on a QP (module-private): functions shared by
 * every QP, filled by the class's static block, so a QP stores no callback of its own (an object
 * that stores a closure outlives Deno's young-generation collections while the code that made it
 * runs unoptimized, and a QP reaches its whole connection: docs/06-lifetimes.md).
 */
let internals: {
  sendProblem(qp: QueuePair, wr: SendWr): string | null;
  recvProblem(qp: QueuePair, wr: RecvWr): string | null;
  postSends(qp: QueuePair, wrs: readonly SendWr[], count: number): void;
  postRecvs(qp: QueuePair, wrs: readonly RecvWr[], count: number): void;
  checkSend(qp: QueuePair): void;
  checkRecv(qp: QueuePair): void;
};

/** A queue pair. */
export class QueuePair extends NativeResource {
  /** The `struct ibv_qp *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;
  /** Its context. */
  readonly context: Context;
  /** The QP type. */
  readonly type: QpType;
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
  readonly #limits: SendLimits;
  readonly #release: () => void;
  readonly #oneSend = new One<SendWr>();
  readonly #oneRecv = new One<RecvWr>();

  /**
   * Not for direct use: `pd.createQp()` makes QPs (`pd.createQpEx()` and `id.createQp()` too):
   * `init` is checked and the native QP made before the object wraps it.
   */
  constructor(pd: ProtectionDomain, c: CheckedQpInit, handle: QpHandle, token: symbol) {
    checkConstruct(token, "QPs are made by pd.createQp()");
    super("QueuePair", [pd, c.sendCq, c.recvCq, c.srq]);
    const n = native();
    const L = layouts();
    const qp = handle.ptr;
    const cap = Object.freeze({ ...handle.cap });
    this.ptr = qp;
    this.#release = handle.destroy;
    this.pd = pd;
    this.context = pd.context;
    this.type = c.type;
    this.cap = cap;
    this.sendCq = c.sendCq;
    this.recvCq = c.recvCq;
    this.srq = c.srq;
    this.#view = new DataView(n.arrayBuffer(qp, L.ibv_qp.size));
    this.qpNum = this.#view.getUint32(L.ibv_qp.fields.qp_num.offset, true);
    this.#stateOffset = L.ibv_qp.fields.state.offset;
    this.#attr = new NativeBlock(L.ibv_qp_attr.size + L.ibv_qp_init_attr.size, 8);
    this.#send = new ListPoster("post_send", pd.context.op("post_send")!, qp, L.ibv_send_wr.size);
    this.#recv = new ListPoster("post_recv", pd.context.op("post_recv")!, qp, L.ibv_recv_wr.size);
    this.#limits = Object.freeze({
      type: this.type,
      pd,
      maxSendSge: cap.maxSendSge,
      maxInlineData: cap.maxInlineData,
    });
    attachTarget(this.sendCq, this);
    if (this.recvCq !== this.sendCq) attachTarget(this.recvCq, this);
    rememberObject(pd.context, qp, this);
  }

  /** The state libibverbs last recorded (`qp->state`, updated by every modify). */
  get state(): QpState {
    return this.#view.getUint32(this.#stateOffset, true) as QpState;
  }

  /** The state's C name. */
  get stateName(): string {
    return stateName(this.state);
  }

  /** `ibv_modify_qp` with the given attributes (the mask follows from the fields). */
  modify(attr: QpAttr): void {
    this.assertOpen();
    const to = attr?.qpState === undefined ? "" : ` to ${stateName(attr.qpState)}`;
    modifyQp(this.ptr, this.#attr, attr, `QP ${this.qpNum}${to}`);
  }

  /** `ibv_query_qp`: every attribute, with the state's name and the caps. */
  query(): QpAttrs {
    this.assertOpen();
    return queryQp(this.ptr, this.#attr, QUERY_MASK);
  }

  /** RESET -> INIT (port, P_Key index, and access flags for RC/UC or Q_Key for UD). */
  toInit(o: QpTransitionOptions = {}): void {
    this.modify(initAttr(this.type, o));
  }

  /** INIT -> RTR. RC/UC need the remote QP number, PSN and GID (or LID); UD needs nothing. */
  toRtr(remote?: RemoteEndpoint, o: QpTransitionOptions = {}): void {
    if (this.type === QpType.UD) return this.modify({ qpState: QpState.RTR });
    const what = "an RC/UC QP needs the remote endpoint";
    this.modify(rtrAttr("toRtr", what, remote, o, this.type === QpType.RC));
  }

  /** RTR -> RTS (send PSN; RC also timeout, retry counts, initiator depth). */
  toRts(o: QpTransitionOptions = {}): void {
    this.modify(rtsAttr(this.type, o));
  }

  /**
   * RESET -> INIT -> RTR -> RTS in one call, with the other end's QP number, PSN and GID (none for
   * UD). The connection itself is the caller's: exchange the endpoints out of band first.
   */
  activate(remote: RemoteEndpoint | undefined, o: QpTransitionOptions = {}): void {
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

  /**
   * Why send WRs cannot be posted now apart from the QP state (a subclass's open `ibv_wr_*`
   * batch holds the send queue), or null.
   */
  protected sendBlocked(): string | null {
    return null;
  }

  /**
   * `ibv_query_qp_data_in_order`: true when the data of `op` work requests is guaranteed to be
   * written in order (false when not guaranteed, or when libibverbs predates the query).
   */
  dataInOrder(op: WrOpcode): boolean {
    this.assertOpen();
    const r = OPCODE_RULES.get(op);
    if (!r) throw new InvalidArgumentError(`dataInOrder: unknown opcode ${op}`);
    const query = native().ibverbs.ibv_query_qp_data_in_order;
    return query ? query(this.ptr, op, 0) === 1 : false;
  }

  /**
   * `ibv_attach_mcast`: the UD QP receives the datagrams sent to multicast group `gid`
   * (`lid` on InfiniBand; 0 on RoCE). Other QP types are refused before the provider.
   */
  attachMcast(gid: GidLike, lid = 0): void {
    this.#mcast("ibv_attach_mcast", gid, lid);
  }

  /** `ibv_detach_mcast`: stops receiving the datagrams of group `gid`. */
  detachMcast(gid: GidLike, lid = 0): void {
    this.#mcast("ibv_detach_mcast", gid, lid);
  }

  #mcast(op: "ibv_attach_mcast" | "ibv_detach_mcast", gid: GidLike, lid: number): void {
    this.assertOpen();
    if (this.type !== QpType.UD) {
      throw new InvalidArgumentError(`${op}: only UD QPs join multicast groups`);
    }
    if (!Number.isInteger(lid) || lid < 0 || lid > 0xffff) {
      throw new InvalidArgumentError(`${op}: lid must be 0..0xffff, got ${lid}`);
    }
    const raw = parseGid(gid);
    if (!isMulticastGid(raw)) {
      throw new InvalidArgumentError(
        `${op}: ${
          formatGid(raw)
        } is not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/4 for RoCE v2 over IPv4)`,
      );
    }
    const rc = NativeBlock.with(16, (b) => {
      b.bytes.set(raw);
      return native().ibverbs[op](this.ptr, b.ptr, lid);
    });
    if (rc !== 0) throwReturned(op, rc, `QP ${this.qpNum}, group ${formatGid(raw)}`);
  }

  static {
    internals = {
      sendProblem: (qp, wr) => qp.#sendWrProblem(wr),
      recvProblem: (qp, wr) => qp.#recvWrProblem(wr),
      postSends: (qp, wrs, count) => qp.#postValidSends(wrs, count),
      postRecvs: (qp, wrs, count) => qp.#postValidRecvs(wrs, count),
      checkSend: (qp) => qp.#checkSendState(),
      checkRecv: (qp) => qp.#checkRecvState(),
    };
  }

  #sendWrProblem(wr: SendWr): string | null {
    return sendWrProblem(wr, this.#limits);
  }

  #recvWrProblem(wr: RecvWr): string | null {
    return recvWrProblem(wr, this.pd, this.cap.maxRecvSge);
  }

  #postValidSends(wrs: readonly SendWr[], count: number): void {
    this.#send.postSend(wrs, count);
    commitBinds(wrs, count);
  }

  #postValidRecvs(wrs: readonly RecvWr[], count: number): void {
    this.#recv.postRecv(wrs, count);
  }

  #checkSendState(): void {
    const blocked = this.sendBlocked();
    if (blocked !== null) throw new InvalidArgumentError(`ibv_post_send: ${blocked}`);
    const s = this.#view.getUint32(this.#stateOffset, true);
    if (s <= QpState.RTR) throw new QpStateError("ibv_post_send", stateName(s));
  }

  #checkRecvState(): void {
    if (this.srq) throw new InvalidArgumentError("ibv_post_recv: this QP uses an SRQ; post there");
    const s = this.#view.getUint32(this.#stateOffset, true);
    if (s === QpState.RESET) throw new QpStateError("ibv_post_recv", stateName(s));
  }

  /**
   * Checks and posts send WRs. When WR `i` is invalid, WRs 0..i-1 are posted and
   * {@link InvalidWorkRequestError} says which one and why; a provider failure raises PostError
   * with the index of `bad_wr`. The memory of every SGE must stay registered until the WR's
   * completion is polled (the device reads it until then); a signaled WR tells you when.
   */
  postSend(wrs: SendWr | readonly SendWr[]): void {
    if (this.closed) this.assertOpen();
    this.#checkSendState();
    try {
      postChecked(
        "ibv_post_send",
        this,
        this.#oneSend.of(wrs),
        internals.sendProblem,
        internals.postSends,
      );
    } finally {
      this.#oneSend.clear();
    }
  }

  /** Checks and posts receive WRs (same list semantics and memory rule as {@link QueuePair.postSend}). */
  postRecv(wrs: RecvWr | readonly RecvWr[]): void {
    if (this.closed) this.assertOpen();
    this.#checkRecvState();
    try {
      postChecked(
        "ibv_post_recv",
        this,
        this.#oneRecv.of(wrs),
        internals.recvProblem,
        internals.postRecvs,
      );
    } finally {
      this.#oneRecv.clear();
    }
  }

  /**
   * Posts one send WR, signaled, and resolves with its completion (rejects with
   * WorkCompletionError carrying the status; ClosedError when the CQ closes first). The WR is
   * posted with a library-assigned wr_id (see `CompletionQueue.track`) and reported with its
   * own `wrId`, so equal `wrId`s on several QPs or queues of one CQ never mix. The MRs of its
   * SGEs refuse to close until it completes.
   */
  send(wr: SendWr, options?: WaitOptions): Promise<CompletionRecord> {
    try {
      this.assertOpen();
      const problem = this.#sendWrProblem(wr);
      if (problem) throw new InvalidWorkRequestError("ibv_post_send", 0, problem);
      return trackTagged(this.sendCq, this, wr, options, (tag) => {
        const flags = (wr.flags ?? SendFlags.SIGNALED) | SendFlags.SIGNALED;
        this.postSend({ ...wr, flags, wrId: tag });
      });
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Posts one receive WR and resolves with its completion (see {@link QueuePair.send}). */
  recv(wr: RecvWr, options?: WaitOptions): Promise<CompletionRecord> {
    try {
      this.assertOpen();
      const problem = this.#recvWrProblem(wr);
      if (problem) throw new InvalidWorkRequestError("ibv_post_recv", 0, problem);
      return trackTagged(this.recvCq, this, wr, options, (tag) => {
        this.postRecv({ ...wr, wrId: tag });
      });
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Builds send WRs once in native memory; `prepared.post()` re-posts them with one FFI call
   * that allocates nothing. All are checked now; nothing is posted.
   */
  prepareSend(wrs: SendWr | readonly SendWr[]): PreparedSend {
    this.assertOpen();
    const list: readonly SendWr[] = Array.isArray(wrs) ? wrs : [wrs as SendWr];
    list.forEach((wr, i) => {
      const p = this.#sendWrProblem(wr);
      if (p) throw new InvalidWorkRequestError("prepareSend", i, p);
    });
    return prepareSend(this, list, internals.checkSend);
  }

  /** Builds receive WRs once in native memory for repeated posting. */
  prepareRecv(wrs: RecvWr | readonly RecvWr[]): PreparedRecv {
    this.assertOpen();
    const list: readonly RecvWr[] = Array.isArray(wrs) ? wrs : [wrs as RecvWr];
    list.forEach((wr, i) => {
      const p = this.#recvWrProblem(wr);
      if (p) throw new InvalidWorkRequestError("prepareRecv", i, p);
    });
    return prepareRecv(this, "post_recv", list, internals.checkRecv);
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    detachTarget(this.sendCq, this);
    detachTarget(this.recvCq, this);
    forgetObject(this.context, this.ptr);
    try {
      this.#release();
    } finally {
      this.#send.free();
      this.#recv.free();
      this.#attr.free();
    }
  }
}

/** A multicast GID as the kernel accepts it: IPv6 multicast, or IPv4-mapped 224.0.0.0/4. */
function isMulticastGid(raw: Uint8Array): boolean {
  if (raw[0] === 0xff) return true;
  for (let i = 0; i < 10; i++) if (raw[i] !== 0) return false;
  return raw[10] === 0xff && raw[11] === 0xff && (raw[12] & 0xf0) === 0xe0;
}

/** Releases a QP made with `ibv_create_qp` or `ibv_create_qp_ex`. */
export function destroyVerbsQp(ptr: NativePointer): () => void {
  return () => {
    const rc = native().ibverbs.ibv_destroy_qp(ptr);
    if (rc !== 0) throwReturned("ibv_destroy_qp", rc);
  };
}

/**
 * Wraps a native QP (module-private: each way of creating one calls it once the QP exists); the
 * QP is released again if the wrapper cannot be made.
 */
export function wrapQp<T extends QueuePair>(handle: QpHandle, make: (h: QpHandle) => T): T {
  // released once, whether by a failed wrapper here or later by the object's close()
  let released = false;
  const destroy = () => {
    if (released) return;
    released = true;
    handle.destroy();
  };
  try {
    return make({ ...handle, destroy });
  } catch (e) {
    destroy();
    throw e;
  }
}

/** `ibv_create_qp` (module-private: `pd.createQp`). */
export function createQp(pd: ProtectionDomain, init: QpInit): QueuePair {
  const c = checkQpInit(pd, init);
  const [ptr, cap] = createWithInitAttr(c, (attr) => {
    const p = native().ibverbs.ibv_create_qp(pd.ptr, attr);
    if (p === null) throwErrno("ibv_create_qp");
    return p;
  });
  const handle = { ptr, cap, destroy: destroyVerbsQp(ptr) };
  return wrapQp(handle, (h) => new QueuePair(pd, c, h, CONSTRUCT));
}

/**
 * Wraps a QP created elsewhere (`rdma_create_qp`), whose `destroy` replaces `ibv_destroy_qp`
 * (module-private to the library).
 */
export function adoptQp(pd: ProtectionDomain, init: CheckedQpInit, handle: QpHandle): QueuePair {
  return wrapQp(handle, (h) => new QueuePair(pd, init, h, CONSTRUCT));
}

/**
 * Records a state the QP reached outside libibverbs (on iWARP the kernel moves it to RTS during
 * the MPA exchange and to ERR on disconnect), so `state` and the posting checks see it. It does
 * not modify the QP (module-private: the connection manager uses it).
 */
export function recordQpState(qp: QueuePair, state: QpState): void {
  if (qp.closed) return;
  const L = layouts().ibv_qp;
  new DataView(native().arrayBuffer(qp.ptr, L.size)).setUint32(L.fields.state.offset, state, true);
}

/** The open QP numbered `qpNum` of context `ctx`, if this library made it (module-private). */
export function qpByNumber(ctx: object, qpNum: number): QueuePair | null {
  for (const o of contextObjects(ctx)) {
    if (o instanceof QueuePair && !o.closed && o.qpNum === qpNum) return o;
  }
  return null;
}
