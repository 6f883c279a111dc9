/**
 * Extended QPs (`ibv_create_qp_ex` with `send_ops_flags`) and the `ibv_wr_*` post API: work
 * requests are built by calls through the function pointers of `struct ibv_qp_ex` between
 * `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort`, instead of an `ibv_send_wr` list.
 *
 * Three ways to post, all checked before the provider sees anything:
 * - `postSendEx(wrs)`: the same work-request shapes as `postSend` (plus `xrcSrqn` on XRC_SEND
 *   QPs), posted in one `ibv_wr_start` … `ibv_wr_complete` batch.
 * - `prepareSendEx(wrs)`: every call prepared once (arguments, SGE arrays and inline bytes in
 *   native memory); `post()` replays the batch and allocates nothing.
 * - the C API itself: `wrStart()`, `wrId`/`wrFlags`, one builder (`wrSend`, `wrRdmaWrite`, …),
 *   its setters (`wrSetSge`, `wrSetInlineData`, `wrSetUdAddr`, …), `wrComplete()` or `wrAbort()`.
 *
 * Decisions: `ibv_wr_start` takes the send queue's lock (a spin lock in soft-RoCE), so a batch
 * left open would hang the next post; while one is open, `wrStart`, `postSend`, `postSendEx`
 * and prepared posts on the QP are refused, and `close()` aborts it. Inline data needs
 * `SendFlags.INLINE` in `wrFlags` when the builder runs (soft-RoCE reads the flag there, not in
 * the setter); `postSendEx` sets it for `inline` bytes. `ibv_wr_complete` failing posts nothing
 * of the batch (`PostError` with index 0). SGE lists go through `ibv_wr_set_sge_list` (rdma-core
 * before 64 computes a soft-RoCE message's length from the first SGE times their number, so
 * SGEs of different lengths in one WR are wrong there); inline bytes always go through one
 * `ibv_wr_set_inline_data` (`ibv_wr_set_inline_data_list` sends 0 bytes on soft-RoCE before
 * rdma-core 64; `wrSetInlineDataList` calls it as asked).
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { PreparedCall } from "../types/native.ts";
import {
  enumName,
  QpCreateFlags,
  QpCreateSendOpsFlags,
  QpInitAttrMask,
  QpState,
  QpType,
  SendFlags,
  WrOpcode,
} from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { nativeError, throwReturned } from "../ffi/errors.ts";
import { NativeBlock, setU64 } from "../ffi/memory.ts";
import { checkResource, isInstance, NativeResource } from "../ffi/resource.ts";
import { adoptNext, QueuePair } from "./qp.ts";
import { type CheckedQpInit, checkQpInit, type GrantedCap, type QpInit } from "./qp-init.ts";
import { One, postChecked } from "./post.ts";
import { InvalidWorkRequestError, PostError, QpStateError } from "./post-errors.ts";
import {
  isU64,
  type MwBind,
  OPCODE_RULES,
  type OpcodeRule,
  type Remote,
  type SendLimits,
  type SendWr,
  sendWrProblem,
  type Sge,
  sgeLength,
  sgeProblem,
  type U64,
  type UdDestination,
} from "./wr.ts";
import { setWindowRkey } from "./mw.ts";
import type { MemoryWindow } from "./mw.ts";
import type { MemoryRegion } from "./mr.ts";
import type { AddressHandle } from "./ah.ts";
import type { ProtectionDomain } from "./pd.ts";

/** The QP types `pd.createQpEx` creates. */
export type ExQpType =
  | typeof QpType.RC
  | typeof QpType.UC
  | typeof QpType.UD
  | typeof QpType.XRC_SEND;

/** How to create an extended QP: a {@link QpInit} plus the opcodes the `ibv_wr_*` API posts. */
export interface QpExInit extends Omit<QpInit, "type"> {
  /** `QpType.RC`, `UC`, `UD` or `XRC_SEND` (an XRC_SEND QP posts with `postSendEx` only). */
  readonly type: ExQpType;
  /**
   * The opcodes posted through the `ibv_wr_*` API (`send_ops_flags`). Default: every data
   * opcode the QP type allows (SEND, SEND_WITH_IMM; on RC/UC/XRC RDMA_WRITE(_WITH_IMM); on
   * RC/XRC RDMA_READ and the atomics); the memory-window opcodes only when asked for.
   */
  readonly sendOps?: readonly WrOpcode[];
  /** `QpCreateFlags` bits (`create_flags`; default none). */
  readonly createFlags?: number;
}

/** The destination SRQ of an XRC_SEND work request. */
export interface XrcTarget {
  /** The remote XRC SRQ number (`ibv_wr_set_xrc_srqn`); required on XRC_SEND QPs only. */
  readonly xrcSrqn?: number;
}

/** A send work request of the extended API: one of the `SendWr` shapes, plus {@link XrcTarget}. */
export type SendWrEx = SendWr & XrcTarget;

/** Each opcode's `IBV_QP_EX_WITH_*` bit. */
const OP_FLAG: ReadonlyMap<WrOpcode, number> = new Map<WrOpcode, number>([
  [WrOpcode.RDMA_WRITE, QpCreateSendOpsFlags.WITH_RDMA_WRITE],
  [WrOpcode.RDMA_WRITE_WITH_IMM, QpCreateSendOpsFlags.WITH_RDMA_WRITE_WITH_IMM],
  [WrOpcode.SEND, QpCreateSendOpsFlags.WITH_SEND],
  [WrOpcode.SEND_WITH_IMM, QpCreateSendOpsFlags.WITH_SEND_WITH_IMM],
  [WrOpcode.RDMA_READ, QpCreateSendOpsFlags.WITH_RDMA_READ],
  [WrOpcode.ATOMIC_CMP_AND_SWP, QpCreateSendOpsFlags.WITH_ATOMIC_CMP_AND_SWP],
  [WrOpcode.ATOMIC_FETCH_AND_ADD, QpCreateSendOpsFlags.WITH_ATOMIC_FETCH_AND_ADD],
  [WrOpcode.LOCAL_INV, QpCreateSendOpsFlags.WITH_LOCAL_INV],
  [WrOpcode.BIND_MW, QpCreateSendOpsFlags.WITH_BIND_MW],
  [WrOpcode.SEND_WITH_INV, QpCreateSendOpsFlags.WITH_SEND_WITH_INV],
]);

/** The builder (`ibv_wr_*`) of each opcode. */
const BUILDER = {
  [WrOpcode.RDMA_WRITE]: "wr_rdma_write",
  [WrOpcode.RDMA_WRITE_WITH_IMM]: "wr_rdma_write_imm",
  [WrOpcode.SEND]: "wr_send",
  [WrOpcode.SEND_WITH_IMM]: "wr_send_imm",
  [WrOpcode.RDMA_READ]: "wr_rdma_read",
  [WrOpcode.ATOMIC_CMP_AND_SWP]: "wr_atomic_cmp_swp",
  [WrOpcode.ATOMIC_FETCH_AND_ADD]: "wr_atomic_fetch_add",
  [WrOpcode.LOCAL_INV]: "wr_local_inv",
  [WrOpcode.BIND_MW]: "wr_bind_mw",
  [WrOpcode.SEND_WITH_INV]: "wr_send_inv",
} as const;
type BuilderOp = typeof BUILDER[keyof typeof BUILDER];

const MW_OPS: readonly WrOpcode[] = [WrOpcode.LOCAL_INV, WrOpcode.BIND_MW, WrOpcode.SEND_WITH_INV];
const WR_OPS = [
  "wr_start",
  "wr_complete",
  "wr_abort",
  "wr_set_sge",
  "wr_set_sge_list",
  "wr_set_inline_data",
  "wr_set_inline_data_list",
  "wr_set_ud_addr",
  "wr_set_xrc_srqn",
  ...Object.values(BUILDER),
] as const;
type WrOp = typeof WR_OPS[number];
type Call = PreparedCall<typeof IBVERBS_OPS[WrOp]>;

const SEND_FLAG_MASK = Object.values(SendFlags).reduce((m: number, b) => m | b, 0);
const CREATE_FLAG_MASK = Object.values(QpCreateFlags).reduce((m: number, b) => m | b, 0);
const construct = Symbol("QueuePairEx");

/** The opcode's C name. */
const opName = (op: WrOpcode): string => enumName(WrOpcode, op, "IBV_WR_");

/** A 32-bit value in network order, as the `__be32` arguments take it. */
function bswap32(v: number): number {
  return (((v & 0xff) << 24) | ((v & 0xff00) << 8) | ((v >>> 8) & 0xff00) | (v >>> 24)) >>> 0;
}

function isU32(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 0xffffffff;
}

/** The rule set of the QP type (XRC_SEND posts what RC posts). */
function ruleType(type: ExQpType): QpType {
  return type === QpType.XRC_SEND ? QpType.RC : type;
}

function checkSendOps(ops: readonly WrOpcode[] | undefined, type: ExQpType): WrOpcode[] {
  const t = ruleType(type);
  if (ops === undefined) {
    return [...OPCODE_RULES].filter(([op, r]) => r.qpTypes.includes(t) && !MW_OPS.includes(op))
      .map(([op]) => op);
  }
  if (!Array.isArray(ops) || ops.length === 0) {
    throw new InvalidArgumentError("sendOps must be a non-empty array of WrOpcode values");
  }
  for (const op of ops) {
    const r = OPCODE_RULES.get(op);
    if (!r || !OP_FLAG.has(op)) throw new InvalidArgumentError(`sendOps: unknown opcode ${op}`);
    if (!r.qpTypes.includes(t)) {
      throw new InvalidArgumentError(
        `sendOps: ${r.name} is not supported on ${enumName(QpType, type, "IBV_QPT_")}`,
      );
    }
  }
  return [...new Set(ops)];
}

/** `ibv_create_qp_ex` through `verbs_context.create_qp_ex`, the granted caps read back. */
function createQpEx(
  pd: ProtectionDomain,
  c: CheckedQpInit,
  sendOpsFlags: number,
  createFlags: number,
): [NativePointer, GrantedCap] {
  const n = native();
  const fn = pd.context.extendedOp("create_qp_ex");
  if (!fn) {
    throw nativeError(
      "ibv_create_qp_ex",
      Errno.EOPNOTSUPP,
      `${pd.context.deviceName}: no extended context`,
    );
  }
  const A = layouts().ibv_qp_init_attr_ex;
  const F = A.fields;
  const xrc = (c.type as QpType) === QpType.XRC_SEND;
  return NativeBlock.with(A.size, (a) => {
    const v = a.view;
    a.setPointer(F.send_cq.offset, c.sendCq.ptr);
    a.setPointer(F.recv_cq.offset, xrc ? null : c.recvCq.ptr);
    a.setPointer(F.srq.offset, c.srq?.ptr ?? null);
    v.setUint32(F["cap.max_send_wr"].offset, c.cap.maxSendWr, true);
    v.setUint32(F["cap.max_recv_wr"].offset, xrc ? 0 : c.cap.maxRecvWr, true);
    v.setUint32(F["cap.max_send_sge"].offset, c.cap.maxSendSge, true);
    v.setUint32(F["cap.max_recv_sge"].offset, xrc ? 0 : c.cap.maxRecvSge, true);
    v.setUint32(F["cap.max_inline_data"].offset, c.cap.maxInlineData, true);
    v.setUint32(F.qp_type.offset, c.type, true);
    v.setInt32(F.sq_sig_all.offset, c.sqSigAll ? 1 : 0, true);
    let mask = QpInitAttrMask.PD | QpInitAttrMask.SEND_OPS_FLAGS;
    if (createFlags !== 0) mask |= QpInitAttrMask.CREATE_FLAGS;
    v.setUint32(F.comp_mask.offset, mask, true);
    a.setPointer(F.pd.offset, pd.ptr);
    v.setUint32(F.create_flags.offset, createFlags, true);
    v.setBigUint64(F.send_ops_flags.offset, BigInt(sendOpsFlags), true);
    n.setErrno(0);
    const qp = n.fnPointer(fn, IBVERBS_OPS.create_qp_ex)(pd.context.ptr, a.ptr);
    if (qp === null) {
      const errno = n.errno();
      throw nativeError(
        "ibv_create_qp_ex",
        errno || Errno.EOPNOTSUPP,
        `${pd.context.deviceName}, ${enumName(QpType, c.type, "IBV_QPT_")}, send_ops_flags 0x${
          sendOpsFlags.toString(16)
        }${errno ? "" : "; the provider returned NULL without errno"}`,
      );
    }
    const cap: GrantedCap = Object.freeze({
      maxSendWr: v.getUint32(F["cap.max_send_wr"].offset, true),
      maxRecvWr: v.getUint32(F["cap.max_recv_wr"].offset, true),
      maxSendSge: v.getUint32(F["cap.max_send_sge"].offset, true),
      maxRecvSge: v.getUint32(F["cap.max_recv_sge"].offset, true),
      maxInlineData: v.getUint32(F["cap.max_inline_data"].offset, true),
    });
    return [qp, cap];
  });
}

/** What the prepared batches of a QP use of it (module-private). */
interface QpExParts {
  readonly qpEx: NativePointer;
  readonly view: DataView;
  readonly wrIdAt: number;
  readonly wrFlagsAt: number;
  readonly fn: (op: WrOp) => NativePointer | null;
  readonly checkPost: () => void;
  readonly problem: (wr: SendWrEx) => string | null;
}

let partsOf: (qp: QueuePairEx) => QpExParts;

/**
 * A QP created with `ibv_create_qp_ex` and `send_ops_flags`: everything a {@link QueuePair}
 * does, plus the `ibv_wr_*` post API (see the module doc).
 */
export class QueuePairEx extends QueuePair {
  /** The `struct ibv_qp_ex *` (`ibv_qp_to_qp_ex`). */
  readonly qpEx: NativePointer;
  /** The opcodes the `ibv_wr_*` API may post on it. */
  readonly sendOps: readonly WrOpcode[];
  /** The same as `IBV_QP_EX_WITH_*` bits (`send_ops_flags`). */
  readonly sendOpsFlags: number;
  readonly #view: DataView;
  readonly #wrIdAt: number;
  readonly #wrFlagsAt: number;
  readonly #calls = new Map<WrOp, Call>();
  readonly #staging: NativeBlock;
  readonly #sgeAt: number;
  readonly #bindAt: number;
  readonly #inlineAt: number;
  readonly #limits: SendLimits;
  readonly #one = new One<SendWrEx>();
  readonly #problem: (wr: SendWrEx) => string | null;
  readonly #post: (wrs: readonly SendWrEx[], count: number) => void;
  #session = false;
  // the WR being built in an open batch: its rule, and what it still needs
  #pending: OpcodeRule | null = null;
  #pendingFlags = 0;
  #needUd = false;
  #needSrqn = false;
  #hasData = false;
  #binds: [MemoryWindow, number][] = [];

  static {
    partsOf = (qp) => ({
      qpEx: qp.qpEx,
      view: qp.#view,
      wrIdAt: qp.#wrIdAt,
      wrFlagsAt: qp.#wrFlagsAt,
      fn: (op) => qp.#fn(op),
      checkPost: () => qp.#checkPost("ibv_wr_start"),
      problem: qp.#problem,
    });
  }

  /** Not for direct use: `pd.createQpEx()` makes one. */
  constructor(pd: ProtectionDomain, init: QpExInit, token: symbol) {
    if (token !== construct) {
      throw new InvalidArgumentError("extended QPs are made by pd.createQpEx()");
    }
    checkResource<ProtectionDomain>(pd, "ProtectionDomain", "pd");
    if (typeof init !== "object" || init === null) {
      throw new InvalidArgumentError("QP init must be an object");
    }
    const types = [QpType.RC, QpType.UC, QpType.UD, QpType.XRC_SEND];
    const c = checkQpInit(pd, init as unknown as QpInit, types);
    const ops = checkSendOps(init.sendOps, c.type as ExQpType);
    const createFlags = init.createFlags ?? 0;
    if (!Number.isInteger(createFlags) || createFlags < 0 || (createFlags & ~CREATE_FLAG_MASK)) {
      throw new InvalidArgumentError(
        `createFlags must be an OR of QpCreateFlags, got ${createFlags}`,
      );
    }
    const mask = ops.reduce((m: number, op) => m | OP_FLAG.get(op)!, 0);
    const [ptr, cap] = createQpEx(pd, c, mask, createFlags);
    adoptNext({
      ptr,
      cap,
      types,
      destroy: () => {
        const rc = native().ibverbs.ibv_destroy_qp(ptr);
        if (rc !== 0) throwReturned("ibv_destroy_qp", rc);
      },
    });
    super(pd, init as unknown as QpInit);
    this.sendOps = Object.freeze(ops);
    this.sendOpsFlags = mask;
    const n = native();
    const L = layouts();
    const toEx = n.ibverbs.ibv_qp_to_qp_ex;
    const qpx = toEx ? toEx(this.ptr) : null;
    if (qpx === null) {
      this.close();
      throw nativeError("ibv_qp_to_qp_ex", Errno.EOPNOTSUPP, `QP ${this.qpNum}`);
    }
    this.qpEx = qpx;
    this.#view = new DataView(n.arrayBuffer(qpx, L.ibv_qp_ex.size));
    this.#wrIdAt = L.ibv_qp_ex.fields.wr_id.offset;
    this.#wrFlagsAt = L.ibv_qp_ex.fields.wr_flags.offset;
    const S = L.ibv_sge.size;
    this.#sgeAt = 0;
    this.#bindAt = S * Math.max(1, cap.maxSendSge);
    this.#inlineAt = this.#bindAt + L.ibv_mw_bind_info.size;
    this.#staging = new NativeBlock(this.#inlineAt + cap.maxInlineData, 64);
    try {
      for (const op of WR_OPS) {
        const fn = this.#fn(op);
        if (fn === null) continue;
        const spec = IBVERBS_OPS[op];
        const args = spec.args.map((t, i) => (i === 0 ? qpx : t === "pointer" ? null : 0));
        this.#calls.set(op, n.prepareCall(fn, spec, args as never) as Call);
      }
      for (const op of ["wr_start", "wr_complete", "wr_abort"] as const) {
        if (!this.#calls.has(op)) {
          throw nativeError(`ibv_qp_ex.${op}`, Errno.EOPNOTSUPP, "not provided");
        }
      }
    } catch (e) {
      this.close();
      throw e;
    }
    this.#limits = Object.freeze({
      type: ruleType(this.type as ExQpType),
      pd,
      maxSendSge: cap.maxSendSge,
      maxInlineData: cap.maxInlineData,
    });
    this.#problem = (wr) => this.#wrProblem(wr);
    this.#post = (wrs, count) => this.#postBatch(wrs, count);
  }

  #fn(op: WrOp): NativePointer | null {
    const F = layouts().ibv_qp_ex.fields;
    return native().readPointer(this.qpEx, F[op].offset);
  }

  #call(op: WrOp): Call {
    const c = this.#calls.get(op);
    if (!c) {
      throw nativeError(
        `ibv_${op}`,
        Errno.EOPNOTSUPP,
        `QP ${this.qpNum}: the provider has no ${op}`,
      );
    }
    return c;
  }

  /** Refuses classic posts while an `ibv_wr_*` batch holds the send queue. */
  protected override sendBlocked(): string | null {
    return this.#session
      ? "an ibv_wr_* batch is open on this QP (wrComplete() or wrAbort())"
      : null;
  }

  #checkPost(what: string): void {
    if (this.closed) this.assertOpen();
    if (this.#session) {
      throw new InvalidArgumentError(`${what}: an ibv_wr_* batch is already open on this QP`);
    }
    const s = this.state;
    if (s <= QpState.RTR) throw new QpStateError(what, this.stateName);
  }

  /** Why `wr` cannot be posted through the `ibv_wr_*` API of this QP, or null. */
  #wrProblem(wr: SendWrEx): string | null {
    if (typeof wr !== "object" || wr === null) return "a work request must be an object";
    const problem = sendWrProblem(wr, this.#limits);
    if (problem) return problem;
    const op = wr.opcode ?? WrOpcode.SEND;
    if (!this.sendOps.includes(op)) {
      return `${opName(op)} is not among the QP's sendOps (create it with sendOps including it)`;
    }
    if (this.type === QpType.XRC_SEND) {
      if (!isU32(wr.xrcSrqn) || wr.xrcSrqn > 0xffffff) {
        return "an XRC_SEND work request needs xrcSrqn, the 24-bit remote SRQ number";
      }
    } else if (wr.xrcSrqn !== undefined) return "xrcSrqn is only for XRC_SEND QPs";
    return null;
  }

  /**
   * Checks and posts send WRs through the `ibv_wr_*` API, in one batch. As with `postSend`:
   * when WR `i` is invalid, WRs 0..i-1 are posted and InvalidWorkRequestError names `i`; a
   * provider failure (`ibv_wr_complete`) posts nothing and raises PostError (index 0).
   */
  postSendEx(wrs: SendWrEx | readonly SendWrEx[]): void {
    this.#checkPost("ibv_wr_start");
    try {
      postChecked("ibv_wr_start", this.#one.of(wrs), this.#problem, this.#post);
    } finally {
      this.#one.clear();
    }
  }

  #postBatch(wrs: readonly SendWrEx[], count: number): void {
    const start = this.#call("wr_start");
    this.#session = true;
    this.#binds.length = 0;
    start.call();
    try {
      for (let i = 0; i < count; i++) this.#build(wrs[i]);
    } catch (e) {
      this.#abort();
      throw e;
    }
    this.#complete();
  }

  /** Builds one checked WR inside the open batch. */
  #build(wr: SendWrEx): void {
    const op = wr.opcode ?? WrOpcode.SEND;
    const rule = OPCODE_RULES.get(op)!;
    const bytes = "inline" in wr ? wr.inline : undefined;
    let flags = wr.flags ?? SendFlags.SIGNALED;
    if (bytes !== undefined) flags |= SendFlags.INLINE;
    setU64(this.#view, this.#wrIdAt, wr.wrId ?? 0);
    this.#view.setUint32(this.#wrFlagsAt, flags, true);
    this.#builder(wr, op);
    if (rule.ud && this.type === QpType.UD && "ud" in wr && wr.ud) this.#udAddr(wr.ud);
    if (this.type === QpType.XRC_SEND) {
      const c = this.#call("wr_set_xrc_srqn");
      c.setArg(1, wr.xrcSrqn!);
      c.call();
    }
    if (!rule.data) return;
    if (bytes !== undefined) {
      if (bytes.length > 0) this.#inline(bytes, 0, bytes.length);
    } else if ((flags & SendFlags.INLINE) !== 0) {
      let at = 0;
      for (const s of wr.sg ?? []) {
        const off = s.offset ?? 0;
        const len = sgeLength(s);
        this.#staging.bytes.set(s.mr.buffer.subarray(off, off + len), this.#inlineAt + at);
        at += len;
      }
      if (at > 0) this.#inlineStaged(at);
    } else if (wr.sg && wr.sg.length > 0) this.#sgeList(wr.sg);
  }

  /** Calls the builder of `op` with the WR's arguments. */
  #builder(wr: SendWrEx, op: WrOpcode): void {
    const c = this.#call(BUILDER[op as keyof typeof BUILDER] as BuilderOp);
    const w = wr as SendWr & {
      remote?: Remote;
      imm?: number;
      invalidateRkey?: number;
      compareAdd?: U64;
      swap?: U64;
      bind?: MwBind;
    };
    switch (op) {
      case WrOpcode.SEND:
        break;
      case WrOpcode.SEND_WITH_IMM:
        c.setArg(1, bswap32(w.imm!));
        break;
      case WrOpcode.SEND_WITH_INV:
      case WrOpcode.LOCAL_INV:
        c.setArg(1, w.invalidateRkey!);
        break;
      case WrOpcode.BIND_MW:
        this.#bindArgs(c, w.bind!);
        break;
      default:
        c.setArg(1, w.remote!.rkey);
        c.setArg(2, w.remote!.addr);
        if (op === WrOpcode.RDMA_WRITE_WITH_IMM) c.setArg(3, bswap32(w.imm!));
        if (op === WrOpcode.ATOMIC_CMP_AND_SWP || op === WrOpcode.ATOMIC_FETCH_AND_ADD) {
          c.setArg(3, w.compareAdd!);
        }
        if (op === WrOpcode.ATOMIC_CMP_AND_SWP) c.setArg(4, w.swap!);
    }
    c.call();
  }

  #bindArgs(c: Call, b: MwBind): void {
    const B = layouts().ibv_mw_bind_info.fields;
    const at = this.#bindAt;
    const off = b.offset ?? 0;
    const rkey = b.mw.nextRkey();
    this.#staging.setPointer(at + B.mr.offset, b.mr.ptr);
    setU64(this.#staging.view, at + B.addr.offset, b.mr.addrNumber + off);
    setU64(this.#staging.view, at + B.length.offset, b.length ?? b.mr.length - off);
    this.#staging.view.setUint32(at + B.mw_access_flags.offset, b.access, true);
    c.setArg(1, b.mw.ptr);
    c.setArg(2, rkey);
    c.setArg(3, this.#staging.at(at));
    this.#binds.push([b.mw, rkey]);
  }

  #udAddr(ud: UdDestination): void {
    const c = this.#call("wr_set_ud_addr");
    c.setArg(1, ud.ah.ptr);
    c.setArg(2, ud.remoteQpn);
    c.setArg(3, ud.remoteQkey);
    c.call();
  }

  #sgeList(sg: readonly Sge[]): void {
    const S = layouts().ibv_sge;
    const v = this.#staging.view;
    for (let j = 0; j < sg.length; j++) {
      const s = sg[j];
      const at = this.#sgeAt + j * S.size;
      setU64(v, at + S.fields.addr.offset, s.mr.addrNumber + (s.offset ?? 0));
      v.setUint32(at + S.fields.length.offset, sgeLength(s), true);
      v.setUint32(at + S.fields.lkey.offset, s.mr.lkey, true);
    }
    const c = this.#call("wr_set_sge_list");
    c.setArg(1, sg.length);
    c.setArg(2, this.#staging.at(this.#sgeAt));
    c.call();
  }

  #inline(bytes: Uint8Array, from: number, to: number): void {
    this.#staging.bytes.set(
      from === 0 && to === bytes.length ? bytes : bytes.subarray(from, to),
      this.#inlineAt,
    );
    this.#inlineStaged(to - from);
  }

  #inlineStaged(length: number): void {
    const c = this.#call("wr_set_inline_data");
    c.setArg(1, this.#staging.at(this.#inlineAt));
    c.setArg(2, length);
    c.call();
  }

  #complete(): void {
    const rc = this.#call("wr_complete").call() as number;
    this.#session = false;
    this.#pending = null;
    if (rc !== 0) {
      this.#binds.length = 0;
      throw new PostError("ibv_wr_complete", Math.abs(rc), 0);
    }
    for (const [mw, rkey] of this.#binds) setWindowRkey(mw, rkey);
    this.#binds.length = 0;
  }

  #abort(): void {
    if (!this.#session) return;
    this.#session = false;
    this.#pending = null;
    this.#binds.length = 0;
    this.#call("wr_abort").call();
  }

  /**
   * Builds send WRs once as prepared `ibv_wr_*` calls; `prepared.post()` replays the batch
   * (`ibv_wr_start` … `ibv_wr_complete`) allocating nothing. All are checked now; BIND_MW is
   * refused (each bind needs a new rkey: post it with `postSendEx`).
   */
  prepareSendEx(wrs: SendWrEx | readonly SendWrEx[]): PreparedSendEx {
    this.assertOpen();
    const list: readonly SendWrEx[] = Array.isArray(wrs) ? wrs : [wrs as SendWrEx];
    if (list.length === 0) throw new InvalidArgumentError("prepareSendEx: no work request");
    list.forEach((wr, i) => {
      const p = this.#problem(wr) ??
        (wr.opcode === WrOpcode.BIND_MW
          ? "BIND_MW cannot be prepared (post it with postSendEx)"
          : null);
      if (p) throw new InvalidWorkRequestError("prepareSendEx", i, p);
    });
    return new PreparedSendEx(this, list, construct);
  }

  // ---- the C API, call by call ----

  /** True while an `ibv_wr_start` batch is open. */
  get batchOpen(): boolean {
    return this.#session;
  }

  /** `qpx->wr_id`: the id the next builder gives its WR. */
  get wrId(): bigint {
    return this.#view.getBigUint64(this.#wrIdAt, true);
  }
  set wrId(id: U64) {
    this.assertOpen();
    if (!isU64(id)) throw new InvalidArgumentError(`wrId must be a U64, got ${id}`);
    setU64(this.#view, this.#wrIdAt, id);
  }

  /** `qpx->wr_flags`: the `SendFlags` the next builder gives its WR. */
  get wrFlags(): number {
    return this.#view.getUint32(this.#wrFlagsAt, true);
  }
  set wrFlags(flags: number) {
    this.assertOpen();
    if (!Number.isInteger(flags) || flags < 0 || (flags & ~SEND_FLAG_MASK) !== 0) {
      throw new InvalidArgumentError(`wrFlags must be an OR of SendFlags, got ${flags}`);
    }
    this.#view.setUint32(this.#wrFlagsAt, flags, true);
  }

  /** `ibv_wr_start`: opens a batch (the send queue is held until wrComplete/wrAbort). */
  wrStart(): void {
    this.#checkPost("ibv_wr_start");
    this.#session = true;
    this.#binds.length = 0;
    this.#pending = null;
    this.#call("wr_start").call();
  }

  /**
   * `ibv_wr_complete`: posts the batch; a provider failure posts none of it (PostError). A
   * UD WR without `wrSetUdAddr` (or an XRC one without `wrSetXrcSrqn`) aborts it instead.
   */
  wrComplete(): void {
    this.#inBatch("ibv_wr_complete");
    const missing = this.#missing();
    if (missing) {
      this.#abort();
      throw new InvalidArgumentError(`ibv_wr_complete: ${missing}; the batch was aborted`);
    }
    this.#complete();
  }

  /** `ibv_wr_abort`: discards the batch. */
  wrAbort(): void {
    this.#inBatch("ibv_wr_abort");
    this.#abort();
  }

  #inBatch(what: string): void {
    this.assertOpen();
    if (!this.#session) throw new InvalidArgumentError(`${what}: no wrStart() batch is open`);
  }

  #missing(): string | null {
    if (this.#needUd) return "the last UD work request has no wrSetUdAddr()";
    if (this.#needSrqn) return "the last XRC_SEND work request has no wrSetXrcSrqn()";
    return null;
  }

  /** Checks a builder call and records the WR it starts. */
  #begin(op: WrOpcode): OpcodeRule {
    const what = `ibv_wr_${BUILDER[op as keyof typeof BUILDER].slice(3)}`;
    this.#inBatch(what);
    const missing = this.#missing();
    if (missing) throw new InvalidArgumentError(`${what}: ${missing}`);
    const r = OPCODE_RULES.get(op)!;
    if (!this.sendOps.includes(op)) {
      throw new InvalidArgumentError(`${what}: ${r.name} is not among the QP's sendOps`);
    }
    this.#pending = r;
    this.#pendingFlags = this.wrFlags;
    this.#needUd = this.type === QpType.UD && r.ud;
    this.#needSrqn = this.type === QpType.XRC_SEND;
    this.#hasData = false;
    return r;
  }

  #remote(what: string, remote: Remote, atomic: boolean): void {
    if (
      typeof remote !== "object" || remote === null || !isU64(remote.addr) || !isU32(remote.rkey)
    ) {
      throw new InvalidArgumentError(`${what}: remote must be { addr: U64, rkey: u32 }`);
    }
    if (atomic && BigInt(remote.addr) % 8n !== 0n) {
      throw new InvalidArgumentError(`${what}: the atomic's remote address is not 8-byte aligned`);
    }
  }

  #u32(what: string, name: string, v: number): void {
    if (!isU32(v)) {
      throw new InvalidArgumentError(`${what}: ${name} must be a 32-bit unsigned integer`);
    }
  }

  /** `ibv_wr_send`. */
  wrSend(): void {
    this.#begin(WrOpcode.SEND);
    this.#call("wr_send").call();
  }

  /** `ibv_wr_send_imm` (`imm` in host order). */
  wrSendImm(imm: number): void {
    this.#u32("ibv_wr_send_imm", "imm", imm);
    this.#begin(WrOpcode.SEND_WITH_IMM);
    this.#builder({ opcode: WrOpcode.SEND_WITH_IMM, imm }, WrOpcode.SEND_WITH_IMM);
  }

  /** `ibv_wr_send_inv`. */
  wrSendInv(invalidateRkey: number): void {
    this.#u32("ibv_wr_send_inv", "invalidateRkey", invalidateRkey);
    this.#begin(WrOpcode.SEND_WITH_INV);
    this.#builder({ opcode: WrOpcode.SEND_WITH_INV, invalidateRkey }, WrOpcode.SEND_WITH_INV);
  }

  /** `ibv_wr_rdma_write`. */
  wrRdmaWrite(remote: Remote): void {
    this.#remote("ibv_wr_rdma_write", remote, false);
    this.#begin(WrOpcode.RDMA_WRITE);
    this.#builder({ opcode: WrOpcode.RDMA_WRITE, remote }, WrOpcode.RDMA_WRITE);
  }

  /** `ibv_wr_rdma_write_imm` (`imm` in host order). */
  wrRdmaWriteImm(remote: Remote, imm: number): void {
    this.#remote("ibv_wr_rdma_write_imm", remote, false);
    this.#u32("ibv_wr_rdma_write_imm", "imm", imm);
    this.#begin(WrOpcode.RDMA_WRITE_WITH_IMM);
    this.#builder(
      { opcode: WrOpcode.RDMA_WRITE_WITH_IMM, remote, imm },
      WrOpcode.RDMA_WRITE_WITH_IMM,
    );
  }

  /** `ibv_wr_rdma_read`. */
  wrRdmaRead(remote: Remote): void {
    this.#remote("ibv_wr_rdma_read", remote, false);
    this.#begin(WrOpcode.RDMA_READ);
    this.#builder({ opcode: WrOpcode.RDMA_READ, remote }, WrOpcode.RDMA_READ);
  }

  /** `ibv_wr_atomic_cmp_swp`: the old value lands in the 8-byte SGE set next. */
  wrAtomicCmpSwp(remote: Remote, compare: U64, swap: U64): void {
    this.#remote("ibv_wr_atomic_cmp_swp", remote, true);
    if (!isU64(compare) || !isU64(swap)) {
      throw new InvalidArgumentError("ibv_wr_atomic_cmp_swp: compare and swap must be U64");
    }
    this.#begin(WrOpcode.ATOMIC_CMP_AND_SWP);
    this.#builder(
      { opcode: WrOpcode.ATOMIC_CMP_AND_SWP, remote, compareAdd: compare, swap },
      WrOpcode.ATOMIC_CMP_AND_SWP,
    );
  }

  /** `ibv_wr_atomic_fetch_add`: the old value lands in the 8-byte SGE set next. */
  wrAtomicFetchAdd(remote: Remote, add: U64): void {
    this.#remote("ibv_wr_atomic_fetch_add", remote, true);
    if (!isU64(add)) throw new InvalidArgumentError("ibv_wr_atomic_fetch_add: add must be a U64");
    this.#begin(WrOpcode.ATOMIC_FETCH_AND_ADD);
    this.#builder(
      { opcode: WrOpcode.ATOMIC_FETCH_AND_ADD, remote, compareAdd: add },
      WrOpcode.ATOMIC_FETCH_AND_ADD,
    );
  }

  /** `ibv_wr_local_inv`. */
  wrLocalInv(invalidateRkey: number): void {
    this.#u32("ibv_wr_local_inv", "invalidateRkey", invalidateRkey);
    this.#begin(WrOpcode.LOCAL_INV);
    this.#builder({ opcode: WrOpcode.LOCAL_INV, invalidateRkey }, WrOpcode.LOCAL_INV);
  }

  /**
   * `ibv_wr_bind_mw`: binds a type-2 window with its next rkey (`ibv_inc_rkey`); the window's
   * `rkey` becomes it once the batch completes.
   */
  wrBindMw(bind: MwBind): void {
    const problem = sendWrProblem({ opcode: WrOpcode.BIND_MW, bind }, this.#limits);
    if (problem) throw new InvalidArgumentError(`ibv_wr_bind_mw: ${problem}`);
    this.#begin(WrOpcode.BIND_MW);
    this.#builder({ opcode: WrOpcode.BIND_MW, bind }, WrOpcode.BIND_MW);
  }

  #setter(what: string): OpcodeRule {
    this.#inBatch(what);
    const r = this.#pending;
    if (!r) {
      throw new InvalidArgumentError(`${what}: call a builder (wrSend, wrRdmaWrite, ...) first`);
    }
    return r;
  }

  #dataSetter(what: string, inline: boolean): OpcodeRule {
    const r = this.#setter(what);
    if (!r.data) throw new InvalidArgumentError(`${what}: ${r.name} carries no data`);
    if (this.#hasData) {
      throw new InvalidArgumentError(`${what}: the work request already has its data`);
    }
    const flagged = (this.#pendingFlags & SendFlags.INLINE) !== 0;
    if (inline && !r.inline) throw new InvalidArgumentError(`${what}: ${r.name} cannot be inline`);
    if (inline && !flagged) {
      throw new InvalidArgumentError(
        `${what}: set wrFlags |= SendFlags.INLINE before the builder (providers read it there)`,
      );
    }
    if (!inline && flagged) {
      throw new InvalidArgumentError(
        `${what}: the work request was built INLINE: give inline data`,
      );
    }
    return r;
  }

  /** `ibv_wr_set_sge`: the WR's data is `sge` (one buffer). */
  wrSetSge(sge: Sge): void {
    const r = this.#dataSetter("ibv_wr_set_sge", false);
    const p = sgeProblem(sge, this.pd, r.writesLocal) ??
      (r.atomic && sgeLength(sge) !== 8 ? "an atomic needs an SGE of 8 bytes" : null);
    if (p) throw new InvalidArgumentError(`ibv_wr_set_sge: ${p}`);
    const c = this.#call("wr_set_sge");
    c.setArg(1, sge.mr.lkey);
    c.setArg(2, sge.mr.addrNumber + (sge.offset ?? 0));
    c.setArg(3, sgeLength(sge));
    c.call();
    this.#hasData = true;
  }

  /** `ibv_wr_set_sge_list`: the WR's data is `sg`, concatenated (at most `cap.maxSendSge`). */
  wrSetSgeList(sg: readonly Sge[]): void {
    const r = this.#dataSetter("ibv_wr_set_sge_list", false);
    if (!Array.isArray(sg) || sg.length > this.cap.maxSendSge) {
      throw new InvalidArgumentError(
        `ibv_wr_set_sge_list: sg must be an array of at most ${this.cap.maxSendSge} SGEs`,
      );
    }
    for (const s of sg) {
      const p = sgeProblem(s, this.pd, r.writesLocal);
      if (p) throw new InvalidArgumentError(`ibv_wr_set_sge_list: ${p}`);
    }
    this.#sgeList(sg);
    this.#hasData = true;
  }

  /** `ibv_wr_set_inline_data`: the WR's data is a copy of `bytes` (at most `cap.maxInlineData`). */
  wrSetInlineData(bytes: Uint8Array): void {
    this.#dataSetter("ibv_wr_set_inline_data", true);
    this.#inlineBytes("ibv_wr_set_inline_data", [bytes]);
    this.#inline(bytes, 0, bytes.length);
    this.#hasData = true;
  }

  /**
   * `ibv_wr_set_inline_data_list`: the WR's data is a copy of `list`, concatenated (soft-RoCE
   * before rdma-core 64 sends 0 bytes for it; `wrSetInlineData` works everywhere).
   */
  wrSetInlineDataList(list: readonly Uint8Array[]): void {
    this.#dataSetter("ibv_wr_set_inline_data_list", true);
    const total = this.#inlineBytes("ibv_wr_set_inline_data_list", list);
    const D = layouts().ibv_data_buf;
    NativeBlock.with(D.size * Math.max(1, list.length) + total, (b) => {
      let at = D.size * list.length;
      list.forEach((bytes, i) => {
        b.bytes.set(bytes, at);
        setU64(b.view, i * D.size + D.fields.addr.offset, native().address(b.at(at)));
        setU64(b.view, i * D.size + D.fields.length.offset, bytes.length);
        at += bytes.length;
      });
      const c = this.#call("wr_set_inline_data_list");
      c.setArg(1, list.length);
      c.setArg(2, b.ptr);
      c.call();
    });
    this.#hasData = true;
  }

  #inlineBytes(what: string, list: readonly Uint8Array[]): number {
    if (!Array.isArray(list) || list.some((b) => !(b instanceof Uint8Array))) {
      throw new InvalidArgumentError(`${what}: inline data must be Uint8Array`);
    }
    const total = list.reduce((n, b) => n + b.length, 0);
    if (total > this.cap.maxInlineData) {
      throw new InvalidArgumentError(
        `${what}: ${total} inline bytes exceed the QP's granted max_inline_data ${this.cap.maxInlineData}`,
      );
    }
    return total;
  }

  /** `ibv_wr_set_ud_addr`: where the UD WR goes (required after every UD builder). */
  wrSetUdAddr(ud: UdDestination): void {
    const r = this.#setter("ibv_wr_set_ud_addr");
    if (this.type !== QpType.UD || !r.ud) {
      throw new InvalidArgumentError("ibv_wr_set_ud_addr: only for SEND(_WITH_IMM) on a UD QP");
    }
    if (
      typeof ud !== "object" || ud === null || !isInstance<AddressHandle>(ud.ah, "AddressHandle")
    ) {
      throw new InvalidArgumentError(
        "ibv_wr_set_ud_addr: ud.ah must be an AddressHandle made by this library",
      );
    }
    ud.ah.assertOpen();
    if (ud.ah.pd !== this.pd) {
      throw new InvalidArgumentError("ibv_wr_set_ud_addr: the AH belongs to another PD");
    }
    if (!isU32(ud.remoteQpn) || ud.remoteQpn > 0xffffff || !isU32(ud.remoteQkey)) {
      throw new InvalidArgumentError(
        "ibv_wr_set_ud_addr: remoteQpn (24 bits) and remoteQkey (32 bits)",
      );
    }
    this.#udAddr(ud);
    this.#needUd = false;
  }

  /** `ibv_wr_set_xrc_srqn`: the remote XRC SRQ of the WR (required after every XRC_SEND builder). */
  wrSetXrcSrqn(srqn: number): void {
    this.#setter("ibv_wr_set_xrc_srqn");
    if (this.type !== QpType.XRC_SEND) {
      throw new InvalidArgumentError("ibv_wr_set_xrc_srqn: only on an XRC_SEND QP");
    }
    if (!isU32(srqn) || srqn > 0xffffff) {
      throw new InvalidArgumentError(`ibv_wr_set_xrc_srqn: srqn must be 24 bits, got ${srqn}`);
    }
    const c = this.#call("wr_set_xrc_srqn");
    c.setArg(1, srqn);
    c.call();
    this.#needSrqn = false;
  }

  /** Aborts an open batch, then releases the QP (called once by `close()`). */
  protected override destroy(): void {
    try {
      this.#abort();
    } finally {
      try {
        super.destroy();
      } finally {
        for (const c of this.#calls.values()) c.free();
        this.#calls.clear();
        this.#staging?.free();
      }
    }
  }
}

/** Creates an extended QP (module-private: `pd.createQpEx`). */
export function makeQpEx(pd: ProtectionDomain, init: QpExInit): QueuePairEx {
  return new QueuePairEx(pd, init, construct);
}

/** One WR of a prepared batch: its calls and what its updates need. */
interface Step {
  readonly op: WrOpcode;
  wrId: U64;
  flags: number;
  readonly builder: Call;
  readonly ud: Call | null;
  readonly srqn: Call | null;
  readonly data: Call | null;
  /** SGE list: byte offset in the block, MRs and offsets. */
  readonly sgeAt: number;
  readonly mrs: MemoryRegion[];
  readonly offsets: number[];
  /** Inline bytes: byte offset and capacity in the block (-1 when none). */
  readonly inlineAt: number;
  /** INLINE flag with SGEs: views of the SGE bytes copied at each post. */
  gather: Uint8Array[] | null;
}

/**
 * Send WRs prepared on an extended QP (`qp.prepareSendEx`): one prepared call per builder and
 * setter, SGE arrays and inline bytes in native memory. `post()` replays the batch with one
 * FFI call per call and allocates nothing; the setters update it in place.
 */
export class PreparedSendEx extends NativeResource {
  /** Number of WRs in the batch. */
  readonly length: number;
  readonly #qp: QueuePairEx;
  readonly #parts: QpExParts;
  readonly #steps: Step[] = [];
  readonly #block: NativeBlock;
  readonly #start: Call;
  readonly #complete: Call;
  readonly #abort: Call;
  readonly #calls: Call[] = [];
  readonly #maxInline: number;

  /** Not for direct use: `qp.prepareSendEx()` checks the WRs and makes one. */
  constructor(qp: QueuePairEx, wrs: readonly SendWrEx[], token: symbol) {
    if (token !== construct) {
      throw new InvalidArgumentError("prepared batches are made by qp.prepareSendEx()");
    }
    super("PreparedSendEx", [qp]);
    const n = native();
    const L = layouts();
    const parts = this.#parts = partsOf(qp);
    this.#qp = qp;
    this.length = wrs.length;
    this.#maxInline = qp.cap.maxInlineData;
    // block: each WR's SGE array, then its inline area (maxInlineData bytes)
    const S = L.ibv_sge.size;
    let size = 0;
    const layout = wrs.map((wr) => {
      const inline = "inline" in wr && wr.inline !== undefined ||
        ((wr.flags ?? 0) & SendFlags.INLINE) !== 0;
      const sgeAt = size;
      size += inline ? 0 : S * (wr.sg?.length ?? 0);
      const inlineAt = inline ? size : -1;
      if (inline) size += Math.max(8, this.#maxInline + 7 & ~7);
      return { sgeAt, inlineAt };
    });
    this.#block = new NativeBlock(Math.max(size, 8), 64);
    const prep = (op: WrOp, args: unknown[]): Call => {
      const fn = parts.fn(op);
      if (fn === null) throw nativeError(`ibv_${op}`, Errno.EOPNOTSUPP, "not provided");
      const c = n.prepareCall(fn, IBVERBS_OPS[op], [parts.qpEx, ...args] as never) as Call;
      this.#calls.push(c);
      return c;
    };
    try {
      this.#start = prep("wr_start", []);
      this.#complete = prep("wr_complete", []);
      this.#abort = prep("wr_abort", []);
      wrs.forEach((wr, i) => this.#steps.push(this.#step(wr, layout[i], prep)));
    } catch (e) {
      this.close();
      throw e;
    }
  }

  #step(
    wr: SendWrEx,
    at: { sgeAt: number; inlineAt: number },
    prep: (op: WrOp, args: unknown[]) => Call,
  ): Step {
    const L = layouts();
    const S = L.ibv_sge;
    const op = wr.opcode ?? WrOpcode.SEND;
    const rule = OPCODE_RULES.get(op)!;
    const w = wr as SendWr & {
      remote?: Remote;
      imm?: number;
      invalidateRkey?: number;
      compareAdd?: U64;
      swap?: U64;
      ud?: UdDestination;
      inline?: Uint8Array;
    };
    const name = BUILDER[op as keyof typeof BUILDER] as BuilderOp;
    let args: unknown[];
    switch (op) {
      case WrOpcode.SEND:
        args = [];
        break;
      case WrOpcode.SEND_WITH_IMM:
        args = [bswap32(w.imm!)];
        break;
      case WrOpcode.SEND_WITH_INV:
      case WrOpcode.LOCAL_INV:
        args = [w.invalidateRkey!];
        break;
      case WrOpcode.RDMA_WRITE_WITH_IMM:
        args = [w.remote!.rkey, w.remote!.addr, bswap32(w.imm!)];
        break;
      case WrOpcode.ATOMIC_CMP_AND_SWP:
        args = [w.remote!.rkey, w.remote!.addr, w.compareAdd!, w.swap!];
        break;
      case WrOpcode.ATOMIC_FETCH_AND_ADD:
        args = [w.remote!.rkey, w.remote!.addr, w.compareAdd!];
        break;
      default:
        args = [w.remote!.rkey, w.remote!.addr];
    }
    const builder = prep(name, args);
    const ud = rule.ud && this.#qp.type === QpType.UD && w.ud
      ? prep("wr_set_ud_addr", [w.ud.ah.ptr, w.ud.remoteQpn, w.ud.remoteQkey])
      : null;
    const srqn = this.#qp.type === QpType.XRC_SEND ? prep("wr_set_xrc_srqn", [wr.xrcSrqn!]) : null;
    let flags = wr.flags ?? SendFlags.SIGNALED;
    const sg = w.inline === undefined ? wr.sg ?? [] : [];
    const mrs = sg.map((s) => s.mr);
    const offsets = sg.map((s) => s.offset ?? 0);
    let data: Call | null = null;
    let gather: Uint8Array[] | null = null;
    if (w.inline !== undefined) {
      flags |= SendFlags.INLINE;
      this.#block.bytes.set(w.inline, at.inlineAt);
      data = prep("wr_set_inline_data", [this.#block.at(at.inlineAt), w.inline.length]);
    } else if (at.inlineAt >= 0) {
      gather = sg.map((s) => s.mr.buffer.subarray(s.offset ?? 0, (s.offset ?? 0) + sgeLength(s)));
      const total = gather.reduce((t, g) => t + g.length, 0);
      data = prep("wr_set_inline_data", [this.#block.at(at.inlineAt), total]);
    } else if (sg.length > 0) {
      const v = this.#block.view;
      sg.forEach((s, j) => {
        const o = at.sgeAt + j * S.size;
        setU64(v, o + S.fields.addr.offset, s.mr.addrNumber + (s.offset ?? 0));
        v.setUint32(o + S.fields.length.offset, sgeLength(s), true);
        v.setUint32(o + S.fields.lkey.offset, s.mr.lkey, true);
      });
      data = prep("wr_set_sge_list", [sg.length, this.#block.at(at.sgeAt)]);
    }
    return {
      op,
      wrId: wr.wrId ?? 0,
      flags,
      builder,
      ud,
      srqn,
      data,
      sgeAt: at.sgeAt,
      mrs,
      offsets,
      inlineAt: at.inlineAt,
      gather,
    };
  }

  /** Posts the whole batch again (`ibv_wr_start` … `ibv_wr_complete`); allocates nothing. */
  post(): void {
    if (this.closed) this.assertOpen();
    const p = this.#parts;
    p.checkPost();
    const steps = this.#steps;
    const view = p.view;
    this.#start.call();
    try {
      for (let i = 0; i < steps.length; i++) {
        const s = steps[i];
        setU64(view, p.wrIdAt, s.wrId);
        view.setUint32(p.wrFlagsAt, s.flags, true);
        s.builder.call();
        if (s.ud !== null) s.ud.call();
        if (s.srqn !== null) s.srqn.call();
        if (s.gather !== null) {
          let at = s.inlineAt;
          const g = s.gather;
          for (let j = 0; j < g.length; j++) {
            this.#block.bytes.set(g[j], at);
            at += g[j].length;
          }
        }
        if (s.data !== null) s.data.call();
      }
    } catch (e) {
      this.#abort.call();
      throw e;
    }
    const rc = this.#complete.call() as number;
    if (rc !== 0) throw new PostError("ibv_wr_complete", Math.abs(rc), 0);
  }

  #at(i: number): Step {
    if (!Number.isInteger(i) || i < 0 || i >= this.length) {
      throw new InvalidArgumentError(`work request index ${i} is outside 0..${this.length - 1}`);
    }
    this.assertOpen();
    return this.#steps[i];
  }

  /** Sets the wr_id of WR `i`. */
  setWrId(i: number, wrId: U64): void {
    const s = this.#at(i);
    if (!isU64(wrId)) throw new InvalidArgumentError(`wrId must be a U64, got ${wrId}`);
    s.wrId = wrId;
  }

  /** Sets the send flags of WR `i` (INLINE stays as prepared). */
  setFlags(i: number, flags: number): void {
    const s = this.#at(i);
    if (!Number.isInteger(flags) || flags < 0 || (flags & ~SEND_FLAG_MASK) !== 0) {
      throw new InvalidArgumentError(`flags must be an OR of SendFlags, got ${flags}`);
    }
    s.flags = (flags & ~SendFlags.INLINE) | (s.flags & SendFlags.INLINE);
  }

  #remoteStep(i: number, what: string): Step {
    const s = this.#at(i);
    if (!OPCODE_RULES.get(s.op)!.remote) {
      throw new InvalidArgumentError(`${what}: work request ${i} has no remote address`);
    }
    return s;
  }

  /** Sets the remote address of an RDMA or atomic WR `i` (atomics: 8-byte aligned). */
  setRemoteAddr(i: number, addr: U64): void {
    const s = this.#remoteStep(i, "setRemoteAddr");
    if (!isU64(addr)) throw new InvalidArgumentError(`remote address must be a U64, got ${addr}`);
    if (OPCODE_RULES.get(s.op)!.atomic && BigInt(addr) % 8n !== 0n) {
      throw new InvalidArgumentError("atomic remote address must be 8-byte aligned");
    }
    s.builder.setArg(2, addr);
  }

  /** Sets the rkey of an RDMA or atomic WR `i`. */
  setRkey(i: number, rkey: number): void {
    const s = this.#remoteStep(i, "setRkey");
    if (!isU32(rkey)) throw new InvalidArgumentError(`rkey must be a u32, got ${rkey}`);
    s.builder.setArg(1, rkey);
  }

  /** Sets the immediate data (host order) of a SEND_WITH_IMM or RDMA_WRITE_WITH_IMM WR `i`. */
  setImm(i: number, imm: number): void {
    const s = this.#at(i);
    if (!isU32(imm)) throw new InvalidArgumentError(`imm must be a u32, got ${imm}`);
    if (s.op === WrOpcode.SEND_WITH_IMM) s.builder.setArg(1, bswap32(imm));
    else if (s.op === WrOpcode.RDMA_WRITE_WITH_IMM) s.builder.setArg(3, bswap32(imm));
    else throw new InvalidArgumentError(`setImm: work request ${i} carries no immediate data`);
  }

  /** Sets the compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand of WR `i`. */
  setCompareAdd(i: number, v: U64): void {
    const s = this.#at(i);
    if (!OPCODE_RULES.get(s.op)!.atomic) throw new InvalidArgumentError(`WR ${i} is no atomic`);
    if (!isU64(v)) throw new InvalidArgumentError(`compareAdd must be a U64, got ${v}`);
    s.builder.setArg(3, v);
  }

  /** Sets the swap operand of a CMP_AND_SWP WR `i`. */
  setSwap(i: number, v: U64): void {
    const s = this.#at(i);
    if (s.op !== WrOpcode.ATOMIC_CMP_AND_SWP) {
      throw new InvalidArgumentError(`WR ${i} is no CMP_AND_SWP`);
    }
    if (!isU64(v)) throw new InvalidArgumentError(`swap must be a U64, got ${v}`);
    s.builder.setArg(4, v);
  }

  #sge(i: number, j: number): [Step, number] {
    const s = this.#at(i);
    if (s.gather !== null || !Number.isInteger(j) || j < 0 || j >= s.mrs.length) {
      throw new InvalidArgumentError(`work request ${i} has no SGE ${j} to update`);
    }
    return [s, s.sgeAt + j * layouts().ibv_sge.size];
  }

  /** Sets the length of SGE `j` of WR `i`; it must stay inside its MR and not be 0. */
  setLength(i: number, j: number, length: number): void {
    const [s, at] = this.#sge(i, j);
    const mr = s.mrs[j];
    if (!Number.isInteger(length) || length <= 0 || s.offsets[j] + length > mr.length) {
      throw new InvalidArgumentError(
        `SGE length ${length} at offset ${s.offsets[j]} is outside its MR (${mr.length})`,
      );
    }
    this.#block.view.setUint32(at + layouts().ibv_sge.fields.length.offset, length, true);
  }

  /** Moves SGE `j` of WR `i` to `offset` in its MR (its length must still fit). */
  setOffset(i: number, j: number, offset: number): void {
    const [s, at] = this.#sge(i, j);
    const F = layouts().ibv_sge.fields;
    const mr = s.mrs[j];
    const length = this.#block.view.getUint32(at + F.length.offset, true);
    if (!Number.isInteger(offset) || offset < 0 || offset + length > mr.length) {
      throw new InvalidArgumentError(`SGE offset ${offset}+${length} is outside its MR`);
    }
    s.offsets[j] = offset;
    setU64(this.#block.view, at + F.addr.offset, mr.addrNumber + offset);
  }

  /** Replaces the inline bytes of WR `i` (prepared with `inline`; at most `maxInlineData`). */
  setInline(i: number, bytes: Uint8Array): void {
    const s = this.#at(i);
    if (s.inlineAt < 0 || s.gather !== null) {
      throw new InvalidArgumentError(`work request ${i} was not prepared with inline bytes`);
    }
    if (!(bytes instanceof Uint8Array) || bytes.length > this.#maxInline) {
      throw new InvalidArgumentError(
        `inline data must be a Uint8Array of at most ${this.#maxInline} bytes`,
      );
    }
    this.#block.bytes.set(bytes, s.inlineAt);
    s.data!.setArg(2, bytes.length);
  }

  /** Releases the prepared calls and native memory (called once by `close()`). */
  protected destroy(): void {
    for (const c of this.#calls) c.free();
    this.#calls.length = 0;
    this.#block?.free();
  }
}
