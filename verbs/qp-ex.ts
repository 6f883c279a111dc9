/**
 * Extended QPs (`ibv_create_qp_ex` with `send_ops_flags`) and the `ibv_wr_*` post API: work
 * requests are built by calls through the function pointers of `struct ibv_qp_ex` between
 * `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort`, instead of an `ibv_send_wr` list.
 *
 * Three ways to post, all checked before the provider sees anything:
 * - `postSendEx(wrs)`: the same work-request shapes as `postSend` (plus `xrcSrqn` on XRC_SEND
 *   QPs), posted in one `ibv_wr_start` ... `ibv_wr_complete` batch.
 * - `prepareSendEx(wrs)`: every call prepared once (arguments, SGE arrays and inline bytes in
 *   native memory); `post()` replays the batch and allocates nothing (`prepared-ex.ts`).
 * - the C API itself: `startBatch()` opens a {@link SendBatch} with one builder per opcode and
 *   the setters, `complete()`/`abort()`, disposed of by `using` (`send-batch.ts`).
 *
 * Decisions: `ibv_wr_start` takes the send queue's lock (a spin lock in soft-RoCE), so a batch
 * left open would hang the next post; while one is open, `startBatch`, `postSend`, `postSendEx`
 * and prepared posts on the QP are refused, and `close()` aborts it. `postSendEx` sets
 * `SendFlags.INLINE` for `inline` bytes (providers read the flag when the builder runs).
 * `ibv_wr_complete` failing posts nothing of the batch (`PostError` with index 0). SGE lists go
 * through `ibv_wr_set_sge_list` (rdma-core before 64 computes a soft-RoCE message's length from
 * the first SGE times their number, so SGEs of different lengths in one WR are wrong there);
 * inline bytes always go through one `ibv_wr_set_inline_data` (`ibv_wr_set_inline_data_list`
 * sends 0 bytes on soft-RoCE before rdma-core 64; `setInlineDataList` calls it as asked).
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import {
  enumName,
  QpCreateFlags,
  QpCreateSendOpsFlags,
  QpInitAttrMask,
  QpState,
  QpType,
  WrOpcode,
} from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { nativeError } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, CONSTRUCT } from "../ffi/resource.ts";
import { destroyVerbsQp, type QpHandle, QueuePair, wrapQp } from "./qp.ts";
import {
  type CheckedQpInit,
  checkQpInit,
  type QpInit,
  readGrantedCap,
  writeInitAttr,
} from "./qp-init.ts";
import { One, postChecked } from "./_post.ts";
import { InvalidWorkRequestError, QpStateError } from "./post-errors.ts";
import { isU32, OPCODE_RULES, type SendLimits, type SendWr, sendWrProblem } from "./wr.ts";
import { WrCalls } from "./_wr-calls.ts";
import { SendBatch } from "./send-batch.ts";
import { PreparedSendEx } from "./prepared-ex.ts";
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

const MW_OPS: readonly WrOpcode[] = [WrOpcode.LOCAL_INV, WrOpcode.BIND_MW, WrOpcode.SEND_WITH_INV];
const CREATE_FLAG_MASK = Object.values(QpCreateFlags).reduce((m: number, b) => m | b, 0);
const EX_TYPES: readonly QpType[] = [QpType.RC, QpType.UC, QpType.UD, QpType.XRC_SEND];

/** The opcode's C name. */
const opName = (op: WrOpcode): string => enumName(WrOpcode, op, "IBV_WR_");

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
function createNativeQpEx(
  pd: ProtectionDomain,
  c: CheckedQpInit,
  sendOpsFlags: number,
  createFlags: number,
): QpHandle {
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
  return NativeBlock.with(A.size, (a) => {
    const v = a.view;
    writeInitAttr(a, F, c);
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
    return { ptr: qp, cap: readGrantedCap(v, F), destroy: destroyVerbsQp(qp) };
  });
}

/** What an extended QP adds to a {@link QueuePair} when it is made (module-private). */
interface ExParts {
  readonly sendOps: readonly WrOpcode[];
  readonly sendOpsFlags: number;
  readonly calls: WrCalls;
}

/**
 * What `postChecked` calls on an extended QP (module-private; filled by the class's static
 * block): shared by every one, so a QP stores no callback of its own (docs/06-lifetimes.md).
 */
let internals: {
  problem(qp: QueuePairEx, wr: SendWrEx): string | null;
  post(qp: QueuePairEx, wrs: readonly SendWrEx[], count: number): void;
};

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
  readonly #calls: WrCalls;
  readonly #limits: SendLimits;
  readonly #one = new One<SendWrEx>();
  #batch: SendBatch | null = null;

  /** Not for direct use: `pd.createQpEx()` checks the init, creates the QP and makes one. */
  constructor(
    pd: ProtectionDomain,
    c: CheckedQpInit,
    handle: QpHandle,
    ex: ExParts,
    token: symbol,
  ) {
    checkConstruct(token, "extended QPs are made by pd.createQpEx()");
    super(pd, c, handle, token);
    this.qpEx = ex.calls.qpEx;
    this.sendOps = Object.freeze([...ex.sendOps]);
    this.sendOpsFlags = ex.sendOpsFlags;
    this.#calls = ex.calls;
    this.#limits = Object.freeze({
      type: ruleType(this.type as ExQpType),
      pd,
      maxSendSge: this.cap.maxSendSge,
      maxInlineData: this.cap.maxInlineData,
    });
  }

  static {
    internals = {
      problem: (qp, wr) => qp.#wrProblem(wr),
      post: (qp, wrs, count) => qp.#postValid(wrs, count),
    };
  }

  /** Posts checked WRs as one `ibv_wr_start` ... `ibv_wr_complete` batch. */
  #postValid(wrs: readonly SendWrEx[], count: number): void {
    const calls = this.#calls;
    calls.start();
    try {
      for (let i = 0; i < count; i++) calls.build(wrs[i]);
    } catch (e) {
      calls.abort();
      throw e;
    }
    calls.complete();
  }

  /** Refuses classic posts while an `ibv_wr_*` batch holds the send queue. */
  protected override sendBlocked(): string | null {
    return this.#batch ? "an ibv_wr_* batch is open on this QP (complete() or abort() it)" : null;
  }

  #checkPost(what: string): void {
    if (this.closed) this.assertOpen();
    if (this.#batch) {
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
      postChecked("ibv_wr_start", this, this.#one.of(wrs), internals.problem, internals.post);
    } finally {
      this.#one.clear();
    }
  }

  /**
   * Builds send WRs once as prepared `ibv_wr_*` calls; `prepared.post()` replays the batch
   * (`ibv_wr_start` ... `ibv_wr_complete`) allocating nothing. All are checked now; BIND_MW is
   * refused (each bind needs a new rkey: post it with `postSendEx`).
   */
  prepareSendEx(wrs: SendWrEx | readonly SendWrEx[]): PreparedSendEx {
    this.assertOpen();
    const list: readonly SendWrEx[] = Array.isArray(wrs) ? wrs : [wrs as SendWrEx];
    if (list.length === 0) throw new InvalidArgumentError("prepareSendEx: no work request");
    list.forEach((wr, i) => {
      const p = this.#wrProblem(wr) ??
        (wr.opcode === WrOpcode.BIND_MW
          ? "BIND_MW cannot be prepared (post it with postSendEx)"
          : null);
      if (p) throw new InvalidWorkRequestError("prepareSendEx", i, p);
    });
    const check = () => this.#checkPost("ibv_wr_start");
    return new PreparedSendEx(this, list, this.#calls, check, CONSTRUCT);
  }

  /**
   * `ibv_wr_start`: opens a batch to build work requests call by call (see {@link SendBatch});
   * the send queue is held until it completes or aborts. Refused while another batch is open and
   * before RTS.
   */
  startBatch(): SendBatch {
    this.#checkPost("ibv_wr_start");
    const onEnd = () => {
      this.#batch = null;
    };
    this.#batch = new SendBatch(
      this,
      { calls: this.#calls, limits: this.#limits, onEnd },
      CONSTRUCT,
    );
    return this.#batch;
  }

  /** True while a {@link SendBatch} is open. */
  get batchOpen(): boolean {
    return this.#batch !== null;
  }

  /** Releases the QP and its prepared calls (called once by `close()`, after an open batch aborted). */
  protected override destroy(): void {
    try {
      super.destroy();
    } finally {
      this.#calls.free();
    }
  }
}

/** `ibv_create_qp_ex` (module-private: `pd.createQpEx`). */
export function createQpEx(pd: ProtectionDomain, init: QpExInit): QueuePairEx {
  if (typeof init !== "object" || init === null) {
    throw new InvalidArgumentError("QP init must be an object");
  }
  const c = checkQpInit(pd, init as unknown as QpInit, EX_TYPES);
  const sendOps = checkSendOps(init.sendOps, c.type as ExQpType);
  const createFlags = init.createFlags ?? 0;
  if (!Number.isInteger(createFlags) || createFlags < 0 || (createFlags & ~CREATE_FLAG_MASK)) {
    throw new InvalidArgumentError(
      `createFlags must be an OR of QpCreateFlags, got ${createFlags}`,
    );
  }
  const sendOpsFlags = sendOps.reduce((m: number, op) => m | OP_FLAG.get(op)!, 0);
  return wrapQp(createNativeQpEx(pd, c, sendOpsFlags, createFlags), (h) => {
    const toEx = native().ibverbs.ibv_qp_to_qp_ex;
    const qpEx = toEx ? toEx(h.ptr) : null;
    if (qpEx === null) {
      throw nativeError("ibv_qp_to_qp_ex", Errno.EOPNOTSUPP, "no struct ibv_qp_ex");
    }
    const calls = new WrCalls(qpEx, c.type, h.cap);
    try {
      return new QueuePairEx(pd, c, h, { sendOps, sendOpsFlags, calls }, CONSTRUCT);
    } catch (e) {
      calls.free();
      throw e;
    }
  });
}
