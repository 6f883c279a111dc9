/**
 * Prepared work requests: a WR list built once in native memory and re-posted with one FFI
 * call. Fields such as wr_id, length, remote address and imm are updated in place; posting and
 * updating allocate nothing on the JS heap.
 *
 * @module
 */

import { layouts } from "../ffi/native.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { WrOpcode } from "../types/enums.ts";
import { setU64 } from "../ffi/memory.ts";
import { checkConstruct, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import { PostCall, type PostOp } from "./_post.ts";
import { countSges, isU32, isU64, type RecvWr, type SendWr, type U64 } from "./wr.ts";
import { WrList, wrOffsets } from "./_wr-list.ts";
import type { MemoryRegion } from "./mr.ts";
import type { QueuePair } from "./qp.ts";
import type { SharedReceiveQueue } from "./srq.ts";
import { checkInteger, describe } from "../types/check.ts";

/** A queue that prepared lists post on. */
export type PostOwner = QueuePair | SharedReceiveQueue;

/**
 * What a prepared list calls before each post, with its queue: a module-level function of the
 * queue's class (shared by all its queues, so a queue stores no callback of its own:
 * docs/06-lifetimes.md). The factories below pair each list with its queue's own check.
 */
export type StateCheck = (owner: PostOwner) => void;

/** The state check of a queue whose posts need none (an SRQ's). */
export const NO_STATE_CHECK: StateCheck = () => {};

/** Makes checked send WRs into a PreparedSend (module-private: `qp.prepareSend`). */
export function prepareSend(
  qp: QueuePair,
  wrs: readonly SendWr[],
  check: (qp: QueuePair) => void,
): PreparedSend {
  return new PreparedSend(qp, wrs, check as StateCheck, CONSTRUCT);
}

/** Makes checked receive WRs into a PreparedRecv (module-private: `prepareRecv`). */
export function prepareRecv<O extends PostOwner>(
  owner: O,
  op: "post_recv" | "post_srq_recv",
  wrs: readonly RecvWr[],
  check: (owner: O) => void,
): PreparedRecv {
  return new PreparedRecv(owner, op, wrs, check as StateCheck, CONSTRUCT);
}

// what a WR without SGEs keeps (shared: nothing is ever written to them, see `#sge`)
const NO_MRS: MemoryRegion[] = [];
const NO_OFFSETS: number[] = [];

/** The common part of prepared sends and receives: a native list, its call, the SGE bookkeeping. */
export abstract class PreparedList extends NativeResource {
  /** Number of WRs in the list. */
  readonly length: number;
  /** The native list's view (WR `i` starts at `wrAt(i)`). */
  protected readonly view: DataView;
  readonly #list: WrList;
  readonly #call: PostCall;
  readonly #owner: PostOwner;
  readonly #check: StateCheck;
  readonly #sgeMr: MemoryRegion[][];
  readonly #sgeOffset: number[][];
  readonly #sgeAt: number[];
  readonly #sgeSize: number;
  readonly #sgeAddr: number;
  readonly #sgeLength: number;

  /** Builds the list; the subclass encodes the WRs. */
  protected constructor(
    kind: "PreparedSend" | "PreparedRecv",
    owner: PostOwner,
    op: PostOp,
    wrs: readonly SendWr[] | readonly RecvWr[],
    check: StateCheck,
    token: symbol,
  ) {
    checkConstruct(token, "prepared WRs are made by qp/srq.prepareSend/prepareRecv()");
    super(kind, [owner]);
    const L = layouts();
    const send = kind === "PreparedSend";
    const wrSize = send ? L.ibv_send_wr.size : L.ibv_recv_wr.size;
    this.length = wrs.length;
    const list = this.#list = new WrList(wrSize, wrs.length, countSges(wrs));
    if (send) list.encodeSend(wrs as readonly SendWr[], wrs.length);
    else list.encodeRecv(wrs as readonly RecvWr[], wrs.length);
    this.view = list.block.view;
    this.#owner = owner;
    this.#check = check;
    this.#call = new PostCall(op, owner.context.op(op)!, owner.ptr, list);
    this.#sgeMr = wrs.map((w) => w.sg?.length ? w.sg.map((s) => s.mr) : NO_MRS);
    this.#sgeOffset = wrs.map((w) => w.sg?.length ? w.sg.map((s) => s.offset ?? 0) : NO_OFFSETS);
    this.#sgeAt = wrs.map((_, i) => list.sgeStart(i, send));
    const o = wrOffsets();
    this.#sgeSize = o.sgeSize;
    this.#sgeAddr = o.sgeAddr;
    this.#sgeLength = o.sgeLength;
  }

  /** Posts the whole list again: one FFI call, no allocation. */
  post(): void {
    if (this.closed) this.assertOpen();
    this.#check(this.#owner);
    this.#call.run(this.#list);
  }

  /** The byte offset of WR `i` in the list (throws for an index outside it). */
  protected wrAt(i: number): number {
    checkInteger("work request index", i, 0, this.length - 1);
    return i * this.#list.wrSize;
  }

  /** Sets the wr_id of WR `i` (a number below 2^53 or a bigint). */
  setWrId(i: number, wrId: U64): void {
    const at = this.wrAt(i);
    if (!isU64(wrId)) throw new InvalidArgumentError(`wrId must be a U64, got ${describe(wrId)}`);
    setU64(this.view, at, wrId);
  }

  #sge(i: number, j: number): number {
    const mrs = this.#sgeMr[this.wrAt(i) / this.#list.wrSize];
    if (!Number.isInteger(j) || j < 0 || j >= mrs.length) {
      throw new InvalidArgumentError(`work request ${i} has no SGE ${describe(j)}`);
    }
    return this.#sgeAt[i] + j * this.#sgeSize;
  }

  /** Sets the length of SGE `j` of WR `i`; it must stay inside its MR and not be 0. */
  setLength(i: number, j: number, length: number): void {
    const at = this.#sge(i, j);
    const mr = this.#sgeMr[i][j];
    if (!Number.isInteger(length) || length <= 0 || this.#sgeOffset[i][j] + length > mr.length) {
      throw new InvalidArgumentError(
        `SGE length ${describe(length)} at offset ${
          this.#sgeOffset[i][j]
        } is outside its MR (${mr.length})`,
      );
    }
    this.view.setUint32(at + this.#sgeLength, length, true);
  }

  /** Moves SGE `j` of WR `i` to `offset` in its MR (its length must still fit). */
  setOffset(i: number, j: number, offset: number): void {
    const at = this.#sge(i, j);
    const mr = this.#sgeMr[i][j];
    const length = this.view.getUint32(at + this.#sgeLength, true);
    if (!Number.isInteger(offset) || offset < 0 || offset + length > mr.length) {
      throw new InvalidArgumentError(`SGE offset ${describe(offset)}+${length} is outside its MR`);
    }
    this.#sgeOffset[i][j] = offset;
    setU64(this.view, at + this.#sgeAddr, mr.addrNumber + offset);
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    this.#call.free();
    this.#list.block.free();
  }
}

/** Send WRs prepared on a QP (`qp.prepareSend`). */
export class PreparedSend extends PreparedList {
  readonly #ops: WrOpcode[];
  readonly #o = wrOffsets();

  /** Not for direct use: `qp.prepareSend()` checks the WRs and makes one. */
  constructor(qp: QueuePair, wrs: readonly SendWr[], check: StateCheck, token: symbol) {
    super("PreparedSend", qp, "post_send", wrs, check, token);
    this.#ops = wrs.map((w) => w.opcode ?? WrOpcode.SEND);
  }

  #atomic(i: number): boolean {
    const op = this.#ops[i];
    return op === WrOpcode.ATOMIC_CMP_AND_SWP || op === WrOpcode.ATOMIC_FETCH_AND_ADD;
  }

  /** Sets the immediate data (host order) of WR `i`. */
  setImm(i: number, imm: number): void {
    const at = this.wrAt(i);
    this.view.setUint32(
      at + this.#o.imm,
      checkInteger("imm", imm, 0, 0xffffffff),
      false,
    );
  }

  /** Sets the remote address of an RDMA or atomic WR `i` (atomics: 8-byte aligned). */
  setRemoteAddr(i: number, addr: U64): void {
    if (!isU64(addr)) {
      throw new InvalidArgumentError(`remote address must be a U64, got ${describe(addr)}`);
    }
    if (typeof addr === "bigint") {
      this.#setRemote(i, Number(addr >> 32n), Number(addr & 0xffff_ffffn));
    } else this.#setRemote(i, Math.floor(addr / 0x1_0000_0000), addr >>> 0);
  }

  /**
   * {@link PreparedSend.setRemoteAddr} with the address as its two 32-bit words (each a signed or
   * an unsigned 32-bit integer, e.g. `x | 0`): for hot paths in V8, where a number at or above
   * 2^31 that crosses a call is a heap allocation and a 32-bit integer is not.
   */
  setRemoteAddrWords(i: number, high: number, low: number): void {
    if (!isWord(high) || !isWord(low)) {
      throw new InvalidArgumentError(
        `remote address words must be 32-bit integers, got ${describe(high)}, ${describe(low)}`,
      );
    }
    this.#setRemote(i, high, low);
  }

  /** Writes the remote address of WR `i` from its words (checked by the caller). */
  #setRemote(i: number, high: number, low: number): void {
    const at = this.wrAt(i);
    const atomic = this.#atomic(i);
    if (atomic && (low & 7) !== 0) {
      throw new InvalidArgumentError("atomic remote address must be 8-byte aligned");
    }
    const addrAt = at + (atomic ? this.#o.atomicAddr : this.#o.rdmaAddr);
    this.view.setInt32(addrAt, low | 0, true);
    this.view.setInt32(addrAt + 4, high | 0, true);
  }

  /** Sets the rkey of an RDMA or atomic WR `i`. */
  setRkey(i: number, rkey: number): void {
    const rkeyAt = this.#atomic(i) ? this.#o.atomicRkey : this.#o.rdmaRkey;
    this.view.setUint32(this.wrAt(i) + rkeyAt, checkInteger("rkey", rkey, 0, 0xffffffff), true);
  }

  /** Sets the compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand of WR `i`. */
  setCompareAdd(i: number, v: U64): void {
    const at = this.wrAt(i);
    if (!isU64(v)) throw new InvalidArgumentError(`compareAdd must be a U64, got ${describe(v)}`);
    setU64(this.view, at + this.#o.atomicCompareAdd, v);
  }

  /** Sets the swap operand of WR `i`. */
  setSwap(i: number, v: U64): void {
    const at = this.wrAt(i);
    if (!isU64(v)) throw new InvalidArgumentError(`swap must be a U64, got ${describe(v)}`);
    setU64(this.view, at + this.#o.atomicSwap, v);
  }

  /** Sets the send flags of WR `i` (an OR of `SendFlags`). */
  setFlags(i: number, flags: number): void {
    const at = this.wrAt(i);
    this.view.setUint32(
      at + this.#o.sendFlags,
      checkInteger("flags", flags, 0, 0x1f),
      true,
    );
  }
}

/** Receive WRs prepared on a QP or SRQ (`qp.prepareRecv`, `srq.prepareRecv`). */
export class PreparedRecv extends PreparedList {
  /** Not for direct use: `qp.prepareRecv()` / `srq.prepareRecv()` check the WRs and make one. */
  constructor(
    owner: PostOwner,
    op: "post_recv" | "post_srq_recv",
    wrs: readonly RecvWr[],
    check: StateCheck,
    token: symbol,
  ) {
    super("PreparedRecv", owner, op, wrs, check, token);
  }
}

/** A signed or unsigned 32-bit integer. */
function isWord(v: number): boolean {
  return (v | 0) === v || isU32(v);
}
