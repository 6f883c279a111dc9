/**
 * Extended completion queues (`ibv_create_cq_ex`): the CQ reports the fields its `wcFlags` ask
 * for, completion timestamps among them, through the function pointers of `struct ibv_cq_ex`
 * (`ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll`, `ibv_wc_read_*`).
 *
 * A {@link CompletionQueueEx} is a {@link CompletionQueue}: QPs use it, `poll()` fills the same
 * `struct ibv_wc` array (read with `completion(i)`), and the poller's strategies, `wait()`,
 * `batches()`, `track()`, `dispatch()` and completion channels work on it unchanged. Its `poll()`
 * reads each completion between its own `ibv_start_poll` and `ibv_end_poll` and never calls
 * `ibv_next_poll`: soft-RoCE before rdma-core 55 advanced its consumer index past the producer
 * when `ibv_end_poll` followed an `ibv_next_poll` that found nothing (the sequence the manual
 * prescribes), and read stale entries afterwards; one start/end pair per completion is correct
 * on every provider. The raw session (`startPoll`/`nextPoll`/`endPoll` and the `read*`
 * accessors) is there too, with that caveat.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { PreparedCall } from "../types/native.ts";
import { CqInitAttrMask, CreateCqAttrFlags, CreateCqWcFlags, flagNames } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { nativeError, throwReturned } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, CONSTRUCT } from "../ffi/resource.ts";
import { checkCqInit, type CheckedCqInit, CompletionQueue, type CqInit } from "./cq.ts";
import type { Context } from "./context.ts";
import { bswap32 } from "./wr.ts";

/**
 * `IBV_WC_STANDARD_FLAGS`: the fields a classic `ibv_poll_cq` reports (byte_len, imm, qp_num,
 * src_qp, slid, sl, dlid_path_bits).
 */
export const WC_STANDARD_FLAGS: number = CreateCqWcFlags.WITH_BYTE_LEN |
  CreateCqWcFlags.WITH_IMM | CreateCqWcFlags.WITH_QP_NUM | CreateCqWcFlags.WITH_SRC_QP |
  CreateCqWcFlags.WITH_SLID | CreateCqWcFlags.WITH_SL | CreateCqWcFlags.WITH_DLID_PATH_BITS;

/** Options of {@link Context.createCqEx}: those of a CQ, plus what it reports. */
export interface CqExInit extends CqInit {
  /**
   * The fields the CQ reports, an OR of `CreateCqWcFlags` (default {@link WC_STANDARD_FLAGS};
   * `WITH_COMPLETION_TIMESTAMP` and `WITH_COMPLETION_TIMESTAMP_WALLCLOCK` add timestamps).
   * `WITH_QP_NUM` is always added: dispatch and tracked requests match completions by QP.
   */
  readonly wcFlags?: number;
  /** An OR of `CreateCqAttrFlags` (`SINGLE_THREADED`, `IGNORE_OVERRUN`; default none). */
  readonly flags?: number;
}

const WC_FLAG_MASK = Object.values(CreateCqWcFlags).reduce((m: number, b) => m | b, 0);
const ATTR_FLAG_MASK = Object.values(CreateCqAttrFlags).reduce((m: number, b) => m | b, 0);
const ENOENT = Errno.ENOENT;

type Op = keyof typeof IBVERBS_OPS;
type Call = PreparedCall<typeof IBVERBS_OPS[Op]>;

/** The `read_*` accessor each reported field needs. */
const READERS = {
  byteLen: ["read_byte_len", CreateCqWcFlags.WITH_BYTE_LEN],
  imm: ["read_imm_data", CreateCqWcFlags.WITH_IMM],
  qpNum: ["read_qp_num", CreateCqWcFlags.WITH_QP_NUM],
  srcQp: ["read_src_qp", CreateCqWcFlags.WITH_SRC_QP],
  slid: ["read_slid", CreateCqWcFlags.WITH_SLID],
  sl: ["read_sl", CreateCqWcFlags.WITH_SL],
  dlidPathBits: ["read_dlid_path_bits", CreateCqWcFlags.WITH_DLID_PATH_BITS],
  timestamp: ["read_completion_ts", CreateCqWcFlags.WITH_COMPLETION_TIMESTAMP],
  wallclock: [
    "read_completion_wallclock_ns",
    CreateCqWcFlags.WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
  ],
  cvlan: ["read_cvlan", CreateCqWcFlags.WITH_CVLAN],
  flowTag: ["read_flow_tag", CreateCqWcFlags.WITH_FLOW_TAG],
} as const;
type Field = keyof typeof READERS;

/** The native side of one extended CQ: its struct view and one prepared call per accessor. */
export class CqExCalls {
  readonly view: DataView;
  readonly start: Call;
  readonly next: Call;
  readonly end: Call;
  readonly opcode: Call;
  readonly vendorErr: Call;
  readonly wcFlags: Call;
  readonly read: Partial<Record<Field, Call>> = {};
  readonly #attr = new NativeBlock(layouts().ibv_poll_cq_attr.size, 8);
  readonly #calls: Call[] = [];

  constructor(cq: NativePointer, wcFlags: number) {
    const n = native();
    const L = layouts().ibv_cq_ex;
    this.view = new DataView(n.arrayBuffer(cq, L.size));
    const prep = (op: Op, args: unknown[]): Call => {
      const fn = n.readPointer(cq, L.fields[op as keyof typeof L.fields].offset);
      if (fn === null) throw nativeError(`ibv_cq_ex.${op}`, Errno.EOPNOTSUPP, "not provided");
      const c = n.prepareCall(fn, IBVERBS_OPS[op], args as never) as Call;
      this.#calls.push(c);
      return c;
    };
    try {
      this.start = prep("start_poll", [cq, this.#attr.ptr]);
      this.next = prep("next_poll", [cq]);
      this.end = prep("end_poll", [cq]);
      this.opcode = prep("read_opcode", [cq]);
      this.vendorErr = prep("read_vendor_err", [cq]);
      this.wcFlags = prep("read_wc_flags", [cq]);
      for (const [field, [op, bit]] of Object.entries(READERS)) {
        if ((wcFlags & bit) !== 0) this.read[field as Field] = prep(op, [cq]);
      }
    } catch (e) {
      this.free();
      throw e;
    }
  }

  free(): void {
    for (const c of this.#calls) c.free();
    this.#calls.length = 0;
    this.#attr.free();
  }
}

/**
 * An extended CQ (`ibv_create_cq_ex`). Everything a {@link CompletionQueue} does works on it;
 * `timestamp(i)`/`wallclock(i)` add the completion times of the last `poll()`, and the raw
 * `ibv_start_poll` session is available for code that reads fields one by one.
 */
export class CompletionQueueEx extends CompletionQueue {
  /** The reported fields (`CreateCqWcFlags` bits), as created. */
  readonly wcFlags: number;
  readonly #calls: CqExCalls;
  readonly #timestamps: BigUint64Array;
  readonly #wallclocks: BigUint64Array;
  /** Whether a raw `ibv_start_poll` session is open (shared with the poll given to the base). */
  readonly #session: { open: boolean };

  /**
   * Not for direct use: `context.createCqEx()` checks the init, creates the CQ and prepares its
   * accessor calls (`calls`), then makes one.
   */
  constructor(
    context: Context,
    init: CheckedCqInit,
    ptr: NativePointer,
    calls: CqExCalls,
    wcFlags: number,
    token: symbol,
  ) {
    checkConstruct(token, "extended CQs are made by context.createCqEx()");
    const session = { open: false };
    const ts = (flag: number) => new BigUint64Array((wcFlags & flag) !== 0 ? init.pollBatch : 0);
    const timestamps = ts(CreateCqWcFlags.WITH_COMPLETION_TIMESTAMP);
    const wallclocks = ts(CreateCqWcFlags.WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
    const poll = (wcs: NativeBlock) => {
      const fill = pollInto(calls, wcs, timestamps, wallclocks);
      return (max: number) => {
        if (session.open) {
          throw new InvalidArgumentError(
            "poll: an ibv_start_poll session is open on this CQ (endPoll() first)",
          );
        }
        return fill(max);
      };
    };
    super(context, init, { ptr, poll }, token);
    this.wcFlags = wcFlags;
    this.#calls = calls;
    this.#timestamps = timestamps;
    this.#wallclocks = wallclocks;
    this.#session = session;
  }

  /** The names of the reported fields (`IBV_WC_EX_WITH_...`). */
  get wcFlagNames(): string[] {
    return flagNames(CreateCqWcFlags, this.wcFlags, "IBV_WC_EX_");
  }

  /**
   * The completion timestamp (device clock ticks, `WITH_COMPLETION_TIMESTAMP`) of entry `i` of
   * the last `poll()`.
   */
  timestamp(i: number): bigint {
    return this.#fromPoll(this.#timestamps, i, "WITH_COMPLETION_TIMESTAMP");
  }

  /** The wall-clock completion time in ns (`WITH_COMPLETION_TIMESTAMP_WALLCLOCK`) of entry `i`. */
  wallclock(i: number): bigint {
    return this.#fromPoll(this.#wallclocks, i, "WITH_COMPLETION_TIMESTAMP_WALLCLOCK");
  }

  #fromPoll(a: BigUint64Array, i: number, flag: string): bigint {
    this.assertOpen();
    if (a.length === 0) throw new InvalidArgumentError(`the CQ was not created ${flag}`);
    if (!Number.isInteger(i) || i < 0 || i >= a.length) {
      throw new InvalidArgumentError(`completion index ${i} is outside 0..${a.length - 1}`);
    }
    return a[i];
  }

  /**
   * `ibv_start_poll`: opens a session at the first completion; true when there is one (read it
   * with `wrId`, `status` and the `read*` accessors), false when the CQ is empty (no session).
   * Every session ends with {@link CompletionQueueEx.endPoll}; `poll()` and `wait()` refuse to
   * run meanwhile.
   */
  startPoll(): boolean {
    this.assertOpen();
    if (this.#session.open) {
      throw new InvalidArgumentError("startPoll: a session is already open");
    }
    const rc = this.#calls.start.call() as number;
    if (rc === ENOENT) return false;
    if (rc !== 0) throwReturned("ibv_start_poll", rc);
    this.#session.open = true;
    return true;
  }

  /**
   * `ibv_next_poll`: moves to the next completion; false when there is none (end the session
   * with `endPoll()` all the same, as the manual says; soft-RoCE before rdma-core 55 then
   * advances its consumer index once too often: on those, poll a known number of completions).
   */
  nextPoll(): boolean {
    this.#inSession("nextPoll");
    const rc = this.#calls.next.call() as number;
    if (rc === ENOENT) return false;
    if (rc !== 0) throwReturned("ibv_next_poll", rc);
    return true;
  }

  /** `ibv_end_poll`: ends the session, consuming what was read. */
  endPoll(): void {
    this.#inSession("endPoll");
    this.#session.open = false;
    this.#calls.end.call();
  }

  /** True while a `startPoll` session is open. */
  get polling(): boolean {
    return this.#session.open;
  }

  /** The current completion's `wr_id` (`ibv_cq_ex.wr_id`). */
  get wrId(): bigint {
    this.#inSession("wrId");
    return this.#calls.view.getBigUint64(layouts().ibv_cq_ex.fields.wr_id.offset, true);
  }

  /** The current completion's status (`ibv_cq_ex.status`, an `enum ibv_wc_status`). */
  get status(): number {
    this.#inSession("status");
    return this.#calls.view.getUint32(layouts().ibv_cq_ex.fields.status.offset, true);
  }

  /** `ibv_wc_read_opcode`. */
  readOpcode(): number {
    this.#inSession("readOpcode");
    return this.#calls.opcode.call() as number;
  }

  /** `ibv_wc_read_vendor_err`. */
  readVendorErr(): number {
    this.#inSession("readVendorErr");
    return this.#calls.vendorErr.call() as number;
  }

  /** `ibv_wc_read_wc_flags` (`WcFlags` bits). */
  readWcFlags(): number {
    this.#inSession("readWcFlags");
    return this.#calls.wcFlags.call() as number;
  }

  /** `ibv_wc_read_byte_len` (needs `WITH_BYTE_LEN`). */
  readByteLen(): number {
    return this.#read("byteLen") as number;
  }

  /** `ibv_wc_read_imm_data`, in host order (needs `WITH_IMM`). */
  readImmData(): number {
    return bswap32(this.#read("imm") as number);
  }

  /**
   * `ibv_wc_read_invalidated_rkey`: the rkey a SEND_WITH_INV invalidated (when `readWcFlags()`
   * has `WcFlags.WITH_INV`; shares the immediate-data field, needs `WITH_IMM`).
   */
  readInvalidatedRkey(): number {
    return this.#read("imm") as number;
  }

  /** `ibv_wc_read_qp_num`. */
  readQpNum(): number {
    return this.#read("qpNum") as number;
  }

  /** `ibv_wc_read_src_qp` (needs `WITH_SRC_QP`). */
  readSrcQp(): number {
    return this.#read("srcQp") as number;
  }

  /** `ibv_wc_read_slid` (needs `WITH_SLID`). */
  readSlid(): number {
    return this.#read("slid") as number;
  }

  /** `ibv_wc_read_sl` (needs `WITH_SL`). */
  readSl(): number {
    return this.#read("sl") as number;
  }

  /** `ibv_wc_read_dlid_path_bits` (needs `WITH_DLID_PATH_BITS`). */
  readDlidPathBits(): number {
    return this.#read("dlidPathBits") as number;
  }

  /** `ibv_wc_read_completion_ts`, device clock ticks (needs `WITH_COMPLETION_TIMESTAMP`). */
  readCompletionTs(): bigint {
    return BigInt(this.#read("timestamp"));
  }

  /** `ibv_wc_read_completion_wallclock_ns` (needs `WITH_COMPLETION_TIMESTAMP_WALLCLOCK`). */
  readCompletionWallclockNs(): bigint {
    return BigInt(this.#read("wallclock"));
  }

  /** `ibv_wc_read_cvlan` (needs `WITH_CVLAN`). */
  readCvlan(): number {
    return this.#read("cvlan") as number;
  }

  /** `ibv_wc_read_flow_tag` (needs `WITH_FLOW_TAG`). */
  readFlowTag(): number {
    return this.#read("flowTag") as number;
  }

  #read(field: Field): number | bigint {
    this.#inSession(`read ${field}`);
    const c = this.#calls.read[field];
    if (!c) {
      throw new InvalidArgumentError(
        `the CQ was not created with IBV_WC_EX_${
          flagNames(CreateCqWcFlags, READERS[field][1], "").join("")
        }`,
      );
    }
    return c.call() as number | bigint;
  }

  #inSession(what: string): void {
    this.assertOpen();
    if (!this.#session.open) {
      throw new InvalidArgumentError(`${what}: no startPoll() session is open`);
    }
  }

  /** Ends an open session, then releases the CQ (called once by `close()`). */
  protected override destroy(): void {
    if (this.#session.open) {
      this.#session.open = false;
      this.#calls.end.call();
    }
    try {
      super.destroy();
    } finally {
      this.#calls.free();
    }
  }
}

/** `ibv_create_cq_ex` (module-private: `context.createCqEx`). */
export function createCqEx(context: Context, init: CqExInit): CompletionQueueEx {
  const c = checkCqInit(context, init);
  const wcFlags = (init.wcFlags ?? WC_STANDARD_FLAGS) | CreateCqWcFlags.WITH_QP_NUM;
  if (!Number.isInteger(wcFlags) || wcFlags < 0 || (wcFlags & ~WC_FLAG_MASK) !== 0) {
    throw new InvalidArgumentError(`wcFlags must be an OR of CreateCqWcFlags, got ${init.wcFlags}`);
  }
  const flags = init.flags ?? 0;
  if (!Number.isInteger(flags) || flags < 0 || (flags & ~ATTR_FLAG_MASK) !== 0) {
    throw new InvalidArgumentError(`flags must be an OR of CreateCqAttrFlags, got ${flags}`);
  }
  const ptr = createNativeCqEx(context, c, wcFlags, flags);
  let calls: CqExCalls | null = null;
  try {
    calls = new CqExCalls(ptr, wcFlags);
    return new CompletionQueueEx(context, c, ptr, calls, wcFlags, CONSTRUCT);
  } catch (e) {
    calls?.free();
    native().ibverbs.ibv_destroy_cq(ptr);
    throw e;
  }
}

/** `ibv_create_cq_ex` through `verbs_context.create_cq_ex`. */
function createNativeCqEx(
  context: Context,
  init: CheckedCqInit,
  wcFlags: number,
  flags: number,
): NativePointer {
  const n = native();
  const fn = context.extendedOp("create_cq_ex");
  if (!fn) {
    throw nativeError(
      "ibv_create_cq_ex",
      Errno.EOPNOTSUPP,
      `${context.deviceName}: no extended context`,
    );
  }
  const A = layouts().ibv_cq_init_attr_ex;
  const F = A.fields;
  return NativeBlock.with(A.size, (a) => {
    const v = a.view;
    v.setUint32(F.cqe.offset, init.cqe, true);
    a.setPointer(F.channel.offset, init.channel?.ptr ?? null);
    v.setUint32(F.comp_vector.offset, init.compVector, true);
    v.setBigUint64(F.wc_flags.offset, BigInt(wcFlags), true);
    v.setUint32(F.comp_mask.offset, flags !== 0 ? CqInitAttrMask.FLAGS : 0, true);
    v.setUint32(F.flags.offset, flags, true);
    n.setErrno(0);
    const cq = n.fnPointer(fn, IBVERBS_OPS.create_cq_ex)(context.ptr, a.ptr);
    if (cq === null) {
      const errno = n.errno();
      throw nativeError(
        "ibv_create_cq_ex",
        errno || Errno.EOPNOTSUPP,
        `${context.deviceName}, wc_flags ${
          flagNames(CreateCqWcFlags, wcFlags, "IBV_WC_EX_").join("|")
        }${errno ? "" : "; the provider returned NULL without errno"}`,
      );
    }
    return cq;
  });
}

/**
 * The poll of an extended CQ: each completion between its own start_poll and end_poll, copied
 * into the CQ's `struct ibv_wc` array (and the timestamp arrays).
 */
function pollInto(
  calls: CqExCalls,
  wcs: NativeBlock,
  timestamps: BigUint64Array,
  wallclocks: BigUint64Array,
): (max: number) => number {
  const L = layouts();
  const W = L.ibv_wc.fields;
  const X = L.ibv_cq_ex.fields;
  const size = L.ibv_wc.size;
  const out = wcs.view;
  const cqv = calls.view;
  const r = calls.read;
  return (max) => {
    let got = 0;
    while (got < max) {
      const rc = calls.start.call() as number;
      if (rc === ENOENT) break;
      if (rc !== 0) throwReturned("ibv_start_poll", rc);
      const at = got * size;
      try {
        // wr_id: copied as two halves (no BigInt)
        out.setUint32(at + W.wr_id.offset, cqv.getUint32(X.wr_id.offset, true), true);
        out.setUint32(at + W.wr_id.offset + 4, cqv.getUint32(X.wr_id.offset + 4, true), true);
        const status = cqv.getUint32(X.status.offset, true);
        out.setUint32(at + W.status.offset, status, true);
        out.setUint32(at + W.vendor_err.offset, calls.vendorErr.call() as number, true);
        out.setUint32(at + W.qp_num.offset, r.qpNum ? r.qpNum.call() as number : 0, true);
        if (status === 0) {
          out.setUint32(at + W.opcode.offset, calls.opcode.call() as number, true);
          out.setUint32(at + W.wc_flags.offset, calls.wcFlags.call() as number, true);
          out.setUint32(at + W.byte_len.offset, r.byteLen ? r.byteLen.call() as number : 0, true);
          // __be32 kept in its memory order, as ibv_wc holds it
          out.setUint32(at + W.imm_data.offset, r.imm ? r.imm.call() as number : 0, true);
          out.setUint32(at + W.src_qp.offset, r.srcQp ? r.srcQp.call() as number : 0, true);
          out.setUint16(at + W.slid.offset, r.slid ? r.slid.call() as number : 0, true);
          out.setUint8(at + W.sl.offset, r.sl ? r.sl.call() as number : 0);
          out.setUint8(
            at + W.dlid_path_bits.offset,
            r.dlidPathBits ? r.dlidPathBits.call() as number : 0,
          );
          if (r.timestamp) timestamps[got] = BigInt(r.timestamp.call() as number | bigint);
          if (r.wallclock) wallclocks[got] = BigInt(r.wallclock.call() as number | bigint);
        } else {
          out.setUint32(at + W.opcode.offset, 0, true);
          out.setUint32(at + W.wc_flags.offset, 0, true);
          out.setUint32(at + W.byte_len.offset, 0, true);
          out.setUint32(at + W.imm_data.offset, 0, true);
          out.setUint32(at + W.src_qp.offset, 0, true);
          out.setUint16(at + W.slid.offset, 0, true);
          out.setUint8(at + W.sl.offset, 0);
          out.setUint8(at + W.dlid_path_bits.offset, 0);
        }
        out.setUint16(at + W.pkey_index.offset, 0, true);
      } finally {
        calls.end.call();
      }
      got++;
    }
    return got;
  };
}
