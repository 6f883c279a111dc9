/**
 * Work completions read in place from a CQ's native WC array: one reusable
 * cursor per CQ, so polling allocates nothing per completion.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { lazyEnumNames, WcFlags, WcOpcode, WcStatus, wcStatusStr } from "../types/enums.ts";
import { WorkCompletionError } from "../types/errors.ts";
import type { Layouts } from "../types/layout.ts";
import { getU64Number } from "../ffi/memory.ts";

const statusName = lazyEnumNames(WcStatus, "IBV_WC_");
const opcodeName = lazyEnumNames(WcOpcode, "IBV_WC_");

/** A plain copy of one work completion. */
export interface WorkCompletionData {
  /** The WR's id. */
  readonly wrId: bigint;
  /** `enum ibv_wc_status`. */
  readonly status: number;
  /** Its C name (`IBV_WC_SUCCESS`). */
  readonly statusName: string;
  /** `enum ibv_wc_opcode`. */
  readonly opcode: number;
  /** Its C name. */
  readonly opcodeName: string;
  /** Vendor error. */
  readonly vendorErr: number;
  /** Bytes received (receives, RDMA read, atomics). */
  readonly byteLen: number;
  /** Immediate data in host order (when `wcFlags` has WITH_IMM), else 0. */
  readonly immData: number;
  /** Local QP number. */
  readonly qpNum: number;
  /** Remote QP number (UD). */
  readonly srcQp: number;
  /** `WcFlags` bits. */
  readonly wcFlags: number;
  /** P_Key index (UD/GSI). */
  readonly pkeyIndex: number;
  /** Source LID (UD). */
  readonly slid: number;
  /** Service level (UD). */
  readonly sl: number;
}

/**
 * A cursor over a native `struct ibv_wc` array. `at(i)` moves it and returns
 * itself; the getters read the fields in place.
 */
export class WorkCompletion {
  readonly #view: DataView;
  readonly #base: NativePointer;
  #at = 0;
  #index = 0;
  readonly #size: number;
  readonly #F: Layouts["ibv_wc"]["fields"];

  /** Creates a cursor over a WC array (owned by its CQ). */
  constructor(view: DataView, base: NativePointer) {
    this.#view = view;
    this.#base = base;
    const L = layouts().ibv_wc; // read when a CQ exists, never at import
    this.#size = L.size;
    this.#F = L.fields;
  }

  /** Moves to entry `i` and returns this cursor. */
  at(i: number): this {
    this.#index = i;
    this.#at = i * this.#size;
    return this;
  }

  /** The native address of the current `struct ibv_wc`. */
  get pointer(): NativePointer {
    return native().offset(this.#base, this.#at);
  }

  /** The index the cursor is at. */
  get index(): number {
    return this.#index;
  }

  /** The WR id as bigint (allocates a bigint; {@link WorkCompletion.wrIdNumber} does not). */
  get wrId(): bigint {
    return this.#view.getBigUint64(this.#at + this.#F.wr_id.offset, true);
  }
  /** The WR id as a number (exact below 2^53). */
  get wrIdNumber(): number {
    return getU64Number(this.#view, this.#at + this.#F.wr_id.offset);
  }
  /**
   * The low 32 bits of the WR id. With tags in the high half and small values in the low half,
   * reading the two halves keeps both small integers: a number at or above 2^31 may be boxed
   * (an allocation in V8) where it crosses a call.
   */
  get wrIdLow(): number {
    return this.#view.getUint32(this.#at + this.#F.wr_id.offset, true);
  }
  /** The high 32 bits of the WR id (see {@link WorkCompletion.wrIdLow}). */
  get wrIdHigh(): number {
    return this.#view.getUint32(this.#at + this.#F.wr_id.offset + 4, true);
  }
  /** `enum ibv_wc_status`. */
  get status(): number {
    return this.#view.getUint32(this.#at + this.#F.status.offset, true);
  }
  /** The status's C name (`IBV_WC_SUCCESS`); no allocation. */
  get statusName(): string {
    return statusName(this.status) ?? `<unknown ${this.status}>`;
  }
  /** True when the status is SUCCESS. */
  get ok(): boolean {
    return this.status === WcStatus.SUCCESS;
  }
  /** `enum ibv_wc_opcode` (valid only for a successful completion). */
  get opcode(): number {
    return this.#view.getUint32(this.#at + this.#F.opcode.offset, true);
  }
  /** The opcode's C name. */
  get opcodeName(): string {
    return opcodeName(this.opcode) ?? `<unknown ${this.opcode}>`;
  }
  /** Vendor error syndrome. */
  get vendorErr(): number {
    return this.#view.getUint32(this.#at + this.#F.vendor_err.offset, true);
  }
  /** Bytes received. */
  get byteLen(): number {
    return this.#view.getUint32(this.#at + this.#F.byte_len.offset, true);
  }
  /** Immediate data in host order (written in network order by the sender). */
  get immData(): number {
    return this.#view.getUint32(this.#at + this.#F.imm_data.offset, false);
  }
  /** The rkey invalidated by a SEND_WITH_INV (when `wcFlags` has WITH_INV). */
  get invalidatedRkey(): number {
    return this.#view.getUint32(this.#at + this.#F.invalidated_rkey.offset, true);
  }
  /** Local QP number. */
  get qpNum(): number {
    return this.#view.getUint32(this.#at + this.#F.qp_num.offset, true);
  }
  /** Remote QP number (UD). */
  get srcQp(): number {
    return this.#view.getUint32(this.#at + this.#F.src_qp.offset, true);
  }
  /** `WcFlags` bits. */
  get wcFlags(): number {
    return this.#view.getUint32(this.#at + this.#F.wc_flags.offset, true);
  }
  /** True when the completion carries immediate data. */
  get hasImm(): boolean {
    return (this.wcFlags & WcFlags.WITH_IMM) !== 0;
  }
  /** True when a GRH fills the first 40 bytes of the receive buffer (UD). */
  get hasGrh(): boolean {
    return (this.wcFlags & WcFlags.GRH) !== 0;
  }
  /** P_Key index. */
  get pkeyIndex(): number {
    return this.#view.getUint16(this.#at + this.#F.pkey_index.offset, true);
  }
  /** Source LID. */
  get slid(): number {
    return this.#view.getUint16(this.#at + this.#F.slid.offset, true);
  }
  /** Service level. */
  get sl(): number {
    return this.#view.getUint8(this.#at + this.#F.sl.offset);
  }

  /** The failure of this completion as a typed error, or null when it succeeded. */
  error(): WorkCompletionError | null {
    if (this.ok) return null;
    return new WorkCompletionError(
      this.status,
      this.statusName,
      wcStatusStr(this.status),
      this.vendorErr,
      this.wrId,
      this.qpNum,
    );
  }

  /** Throws {@link WorkCompletionError} unless the completion succeeded. */
  check(): this {
    const e = this.error();
    if (e) throw e;
    return this;
  }

  /** A plain copy of the current entry (allocates). */
  toObject(): WorkCompletionData {
    const imm = this.hasImm;
    return {
      wrId: this.wrId,
      status: this.status,
      statusName: this.statusName,
      opcode: this.opcode,
      opcodeName: this.opcodeName,
      vendorErr: this.vendorErr,
      byteLen: this.byteLen,
      immData: imm ? this.immData : 0,
      qpNum: this.qpNum,
      srcQp: this.srcQp,
      wcFlags: this.wcFlags,
      pkeyIndex: this.pkeyIndex,
      slid: this.slid,
      sl: this.sl,
    };
  }
}
