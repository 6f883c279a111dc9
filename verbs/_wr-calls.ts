/**
 * Internal: the `ibv_wr_*` calls of one extended QP - the function pointers of its
 * `struct ibv_qp_ex`, each prepared once as an FFI call - and the native staging memory their
 * arguments point into (an SGE array, one `ibv_mw_bind_info`, `maxInlineData` inline bytes).
 * Everything here assumes checked arguments: `QueuePairEx`, `SendBatch` and `PreparedSendEx`
 * check before they call.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { nativeError } from "../ffi/errors.ts";
import { NativeBlock, setU64 } from "../ffi/memory.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { QpType, SendFlags, WrOpcode } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import type { PreparedCall } from "../types/native.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { PostError } from "./post-errors.ts";
import type { GrantedCap } from "./qp-init.ts";
import { type MemoryWindow, setWindowRkey } from "./mw.ts";
import { writeSges } from "./_wr-list.ts";
import {
  bswap32,
  type MwBind,
  OPCODE_RULES,
  type Remote,
  type SendWr,
  type Sge,
  sgeLength,
  type U64,
  type UdDestination,
} from "./wr.ts";

/** The builder (`ibv_wr_*`) of each opcode. */
export const BUILDER = {
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

/** The name of a builder in `struct ibv_qp_ex`. */
export type BuilderOp = typeof BUILDER[keyof typeof BUILDER];

/** A member of `struct ibv_qp_ex` this library calls. */
export type WrOp =
  | "wr_start"
  | "wr_complete"
  | "wr_abort"
  | "wr_set_sge"
  | "wr_set_sge_list"
  | "wr_set_inline_data"
  | "wr_set_inline_data_list"
  | "wr_set_ud_addr"
  | "wr_set_xrc_srqn"
  | BuilderOp;

const WR_OPS: readonly WrOp[] = [
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
];

/** One prepared `ibv_wr_*` call. */
export type Call = PreparedCall<typeof IBVERBS_OPS[WrOp]>;

/** The builder of `op`. */
export function builderOf(op: WrOpcode): BuilderOp {
  return BUILDER[op as keyof typeof BUILDER];
}

/** A send WR seen through the fields any opcode may carry. */
type AnyWr = SendWr & {
  remote?: Remote;
  imm?: number;
  invalidateRkey?: number;
  compareAdd?: U64;
  swap?: U64;
  bind?: MwBind;
  ud?: UdDestination;
  inline?: Uint8Array;
  xrcSrqn?: number;
};

/**
 * Writes the arguments the builder of `op` takes after the QP into `out` (immediate data in
 * network order) and returns how many; BIND_MW's are staged by {@link WrCalls}.
 */
export function builderArgs(op: WrOpcode, wr: SendWr, out: unknown[]): number {
  const w = wr as AnyWr;
  switch (op) {
    case WrOpcode.SEND:
      return 0;
    case WrOpcode.SEND_WITH_IMM:
      out[0] = bswap32(w.imm!);
      return 1;
    case WrOpcode.SEND_WITH_INV:
    case WrOpcode.LOCAL_INV:
      out[0] = w.invalidateRkey!;
      return 1;
  }
  out[0] = w.remote!.rkey;
  out[1] = w.remote!.addr;
  switch (op) {
    case WrOpcode.RDMA_WRITE_WITH_IMM:
      out[2] = bswap32(w.imm!);
      return 3;
    case WrOpcode.ATOMIC_CMP_AND_SWP:
      out[2] = w.compareAdd!;
      out[3] = w.swap!;
      return 4;
    case WrOpcode.ATOMIC_FETCH_AND_ADD:
      out[2] = w.compareAdd!;
      return 3;
  }
  return 2;
}

/** The prepared `ibv_wr_*` calls of one extended QP and their staging memory. */
export class WrCalls {
  /** The `struct ibv_qp_ex *`. */
  readonly qpEx: NativePointer;
  readonly #type: QpType;
  readonly #view: DataView;
  readonly #wrIdAt: number;
  readonly #wrFlagsAt: number;
  readonly #calls = new Map<WrOp, Call>();
  readonly #staging: NativeBlock;
  readonly #bindAt: number;
  readonly #inlineAt: number;
  readonly #args: unknown[] = [];
  /** The windows bound in the open batch, with their new rkeys (recorded on completion). */
  readonly #binds: [MemoryWindow, number][] = [];

  /** Prepares every call the provider has; throws UnsupportedError without start/complete/abort. */
  constructor(qpEx: NativePointer, type: QpType, cap: GrantedCap) {
    const n = native();
    const L = layouts();
    this.qpEx = qpEx;
    this.#type = type;
    this.#view = new DataView(n.arrayBuffer(qpEx, L.ibv_qp_ex.size));
    this.#wrIdAt = L.ibv_qp_ex.fields.wr_id.offset;
    this.#wrFlagsAt = L.ibv_qp_ex.fields.wr_flags.offset;
    this.#bindAt = L.ibv_sge.size * Math.max(1, cap.maxSendSge);
    this.#inlineAt = this.#bindAt + L.ibv_mw_bind_info.size;
    this.#staging = new NativeBlock(this.#inlineAt + cap.maxInlineData, 64);
    try {
      for (const op of WR_OPS) {
        const fn = this.fn(op);
        if (fn === null) continue;
        const spec = IBVERBS_OPS[op];
        const args = spec.args.map((t, i) => (i === 0 ? qpEx : t === "pointer" ? null : 0));
        this.#calls.set(op, n.prepareCall(fn, spec, args as never) as Call);
      }
      for (const op of ["wr_start", "wr_complete", "wr_abort"] as const) {
        if (!this.#calls.has(op)) {
          throw nativeError(`ibv_qp_ex.${op}`, Errno.EOPNOTSUPP, "not provided");
        }
      }
    } catch (e) {
      this.free();
      throw e;
    }
  }

  /** The function pointer of `op` in `struct ibv_qp_ex`, or null. */
  fn(op: WrOp): NativePointer | null {
    return native().readPointer(this.qpEx, layouts().ibv_qp_ex.fields[op].offset);
  }

  /** The prepared call of `op`; UnsupportedError when the provider lacks it. */
  call(op: WrOp): Call {
    const c = this.#calls.get(op);
    if (!c) throw nativeError(`ibv_${op}`, Errno.EOPNOTSUPP, `the provider has no ${op}`);
    return c;
  }

  /** `qpx->wr_id`: the id the next builder gives its WR. */
  get wrId(): bigint {
    return this.#view.getBigUint64(this.#wrIdAt, true);
  }
  set wrId(id: U64) {
    setU64(this.#view, this.#wrIdAt, id);
  }

  /** `qpx->wr_flags`: the `SendFlags` the next builder gives its WR. */
  get wrFlags(): number {
    return this.#view.getUint32(this.#wrFlagsAt, true);
  }
  set wrFlags(flags: number) {
    this.#view.setUint32(this.#wrFlagsAt, flags, true);
  }

  /** `ibv_wr_start`: takes the send queue. */
  start(): void {
    this.#forgetBinds();
    this.call("wr_start").call();
  }

  /** `ibv_wr_complete`: posts the batch (PostError, nothing posted, when the provider refuses). */
  complete(): void {
    const rc = this.call("wr_complete").call() as number;
    if (rc !== 0) {
      this.#forgetBinds();
      throw new PostError("ibv_wr_complete", Math.abs(rc), 0);
    }
    for (const [mw, rkey] of this.#binds) setWindowRkey(mw, rkey);
    this.#forgetBinds();
  }

  // most batches bind no window: the length (set through the runtime in V8) changes only when
  // some were
  #forgetBinds(): void {
    if (this.#binds.length !== 0) this.#binds.length = 0;
  }

  /** `ibv_wr_abort`: discards the batch. */
  abort(): void {
    this.#forgetBinds();
    this.call("wr_abort").call();
  }

  /** Builds one checked WR in the open batch: id and flags, builder, address, data. */
  build(wr: SendWr & { readonly xrcSrqn?: number }): void {
    const op = wr.opcode ?? WrOpcode.SEND;
    const rule = OPCODE_RULES.get(op)!;
    const bytes = "inline" in wr ? wr.inline : undefined;
    let flags = wr.flags ?? SendFlags.SIGNALED;
    if (bytes !== undefined) flags |= SendFlags.INLINE;
    this.wrId = wr.wrId ?? 0;
    this.wrFlags = flags;
    this.builder(op, wr);
    if (rule.ud && this.#type === QpType.UD && "ud" in wr && wr.ud) this.udAddr(wr.ud);
    if (this.#type === QpType.XRC_SEND) this.xrcSrqn(wr.xrcSrqn!);
    if (!rule.data) return;
    if (bytes !== undefined) {
      if (bytes.length > 0) this.inline(bytes);
    } else if ((flags & SendFlags.INLINE) !== 0) {
      let at = 0;
      for (const s of wr.sg ?? []) {
        const off = s.offset ?? 0;
        const len = sgeLength(s);
        native().copy(this.#staging.bytes, this.#inlineAt + at, s.mr.buffer, off, len);
        at += len;
      }
      if (at > 0) this.#inlineStaged(at);
    } else if (wr.sg && wr.sg.length > 0) this.sgeList(wr.sg);
  }

  /** Calls the builder of `op` with the WR's arguments (a BIND_MW takes the window's next rkey). */
  builder(op: WrOpcode, wr: SendWr): void {
    const c = this.call(builderOf(op));
    if (op === WrOpcode.BIND_MW) this.#bindArgs(c, (wr as AnyWr).bind!);
    else {
      const args = this.#args;
      const count = builderArgs(op, wr, args);
      for (let i = 0; i < count; i++) c.setArg(i + 1, args[i] as never);
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

  /** `ibv_wr_set_ud_addr`. */
  udAddr(ud: UdDestination): void {
    const c = this.call("wr_set_ud_addr");
    c.setArg(1, ud.ah.ptr);
    c.setArg(2, ud.remoteQpn);
    c.setArg(3, ud.remoteQkey);
    c.call();
  }

  /** `ibv_wr_set_xrc_srqn`. */
  xrcSrqn(srqn: number): void {
    const c = this.call("wr_set_xrc_srqn");
    c.setArg(1, srqn);
    c.call();
  }

  /** `ibv_wr_set_sge`. */
  sge(sge: Sge): void {
    const c = this.call("wr_set_sge");
    c.setArg(1, sge.mr.lkey);
    c.setArg(2, sge.mr.addrNumber + (sge.offset ?? 0));
    c.setArg(3, sgeLength(sge));
    c.call();
  }

  /** `ibv_wr_set_sge_list` over the staged SGE array. */
  sgeList(sg: readonly Sge[]): void {
    writeSges(this.#staging.view, 0, sg);
    const c = this.call("wr_set_sge_list");
    c.setArg(1, sg.length);
    c.setArg(2, this.#staging.ptr);
    c.call();
  }

  /** `ibv_wr_set_inline_data` with a copy of `bytes` (at most `maxInlineData`). */
  inline(bytes: Uint8Array): void {
    this.#staging.bytes.set(bytes, this.#inlineAt);
    this.#inlineStaged(bytes.length);
  }

  #inlineStaged(length: number): void {
    const c = this.call("wr_set_inline_data");
    c.setArg(1, this.#staging.at(this.#inlineAt));
    c.setArg(2, length);
    c.call();
  }

  /** `ibv_wr_set_inline_data_list` over a copy of `list` (`total` bytes in all). */
  inlineList(list: readonly Uint8Array[], total: number): void {
    const D = layouts().ibv_data_buf;
    NativeBlock.with(D.size * Math.max(1, list.length) + total, (b) => {
      let at = D.size * list.length;
      list.forEach((bytes, i) => {
        b.bytes.set(bytes, at);
        setU64(b.view, i * D.size + D.fields.addr.offset, native().address(b.at(at)));
        setU64(b.view, i * D.size + D.fields.length.offset, bytes.length);
        at += bytes.length;
      });
      const c = this.call("wr_set_inline_data_list");
      c.setArg(1, list.length);
      c.setArg(2, b.ptr);
      c.call();
    });
  }

  /** Releases the prepared calls and the staging memory. */
  free(): void {
    for (const c of this.#calls.values()) c.free();
    this.#calls.clear();
    this.#staging.free();
  }
}
