/**
 * The `ibv_wr_*` post API call by call, as an object: `qpx.startBatch()` calls `ibv_wr_start`
 * and returns a {@link SendBatch}, which holds the WR being built and what it still needs. Each
 * WR is a builder (`send()`, `rdmaWrite()`, ...) and its setters (`setSge()`, `setInlineData()`,
 * `setUdAddr()`, ...); `complete()` posts the batch (`ibv_wr_complete`), `abort()` discards it
 * (`ibv_wr_abort`), and disposing of an open batch aborts it:
 *
 * ```ts ignore
 * {
 *   using batch = qpx.startBatch();
 *   batch.wrId = 1;
 *   batch.send();
 *   batch.setSge({ mr });
 *   batch.complete();
 * } // had anything thrown before complete(), the batch would have been aborted here
 * ```
 *
 * `ibv_wr_start` takes the send queue's lock (a spin lock in soft-RoCE), so while a batch is open
 * the QP refuses other posts and a second batch, and closing the QP aborts the batch. Inline data
 * needs `SendFlags.INLINE` in `wrFlags` before the builder runs (providers read the flag there).
 * A batch ends once: after `complete()` or `abort()` every call on it raises ClosedError.
 *
 * @module
 */

import { QpType, SendFlags, WrOpcode } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { checkConstruct, isInstance, NativeResource } from "../ffi/resource.ts";
import type { AddressHandle } from "./ah.ts";
import { builderOf, type WrCalls } from "./_wr-calls.ts";
import {
  isU32,
  isU64,
  type MwBind,
  OPCODE_RULES,
  type OpcodeRule,
  type Remote,
  type SendLimits,
  sendWrProblem,
  type Sge,
  sgeLength,
  sgeProblem,
  type U64,
  type UdDestination,
} from "./wr.ts";
import type { QueuePairEx } from "./qp-ex.ts";

const SEND_FLAG_MASK = Object.values(SendFlags).reduce((m: number, b) => m | b, 0);

/** What a batch needs of its QP (module-private: `qpx.startBatch()` passes it). */
export interface BatchContext {
  /** The QP's prepared `ibv_wr_*` calls. */
  readonly calls: WrCalls;
  /** The QP's limits (type, PD, granted SGEs and inline bytes). */
  readonly limits: SendLimits;
  /** Runs once when the batch ends, however it ends. */
  readonly onEnd: () => void;
}

/**
 * An open `ibv_wr_start` ... `ibv_wr_complete` batch on an extended QP (see the module doc). Made
 * by `qpx.startBatch()`; it belongs to the QP, which aborts it when it closes.
 */
export class SendBatch extends NativeResource {
  /** The QP the batch posts on. */
  readonly qp: QueuePairEx;
  readonly #calls: WrCalls;
  readonly #limits: SendLimits;
  readonly #onEnd: () => void;
  #ended = false;
  // the WR being built: its rule, its flags, and what it still needs
  #pending: OpcodeRule | null = null;
  #pendingFlags = 0;
  #needUd = false;
  #needSrqn = false;
  #hasData = false;

  /** Not for direct use: `qpx.startBatch()` checks the QP, makes one and calls `ibv_wr_start`. */
  constructor(qp: QueuePairEx, context: BatchContext, token: symbol) {
    checkConstruct(token, "batches are made by qpx.startBatch()");
    super("SendBatch", [qp]);
    this.qp = qp;
    this.#calls = context.calls;
    this.#limits = context.limits;
    this.#onEnd = context.onEnd;
    this.#calls.start();
  }

  /** `qpx->wr_id`: the id the next builder gives its WR. */
  get wrId(): bigint {
    this.assertOpen();
    return this.#calls.wrId;
  }
  set wrId(id: U64) {
    this.assertOpen();
    if (!isU64(id)) throw new InvalidArgumentError(`wrId must be a U64, got ${id}`);
    this.#calls.wrId = id;
  }

  /** `qpx->wr_flags`: the `SendFlags` the next builder gives its WR. */
  get wrFlags(): number {
    this.assertOpen();
    return this.#calls.wrFlags;
  }
  set wrFlags(flags: number) {
    this.assertOpen();
    if (!Number.isInteger(flags) || flags < 0 || (flags & ~SEND_FLAG_MASK) !== 0) {
      throw new InvalidArgumentError(`wrFlags must be an OR of SendFlags, got ${flags}`);
    }
    this.#calls.wrFlags = flags;
  }

  /**
   * `ibv_wr_complete`: posts the batch and ends it; a provider failure posts none of it
   * (PostError). A UD WR without `setUdAddr` (or an XRC one without `setXrcSrqn`) aborts it
   * instead (InvalidArgumentError).
   */
  complete(): void {
    this.assertOpen();
    const missing = this.#missing();
    if (missing) {
      this.close();
      throw new InvalidArgumentError(`ibv_wr_complete: ${missing}; the batch was aborted`);
    }
    this.#ended = true;
    try {
      this.#calls.complete();
    } finally {
      this.close();
    }
  }

  /** `ibv_wr_abort`: discards the batch and ends it. */
  abort(): void {
    this.assertOpen();
    this.close();
  }

  /** `ibv_wr_send`. */
  send(): void {
    this.#begin(WrOpcode.SEND);
    this.#calls.builder(WrOpcode.SEND, { opcode: WrOpcode.SEND });
  }

  /** `ibv_wr_send_imm` (`imm` in host order). */
  sendImm(imm: number): void {
    this.#u32("ibv_wr_send_imm", "imm", imm);
    this.#build(WrOpcode.SEND_WITH_IMM, { opcode: WrOpcode.SEND_WITH_IMM, imm });
  }

  /** `ibv_wr_send_inv`. */
  sendInv(invalidateRkey: number): void {
    this.#u32("ibv_wr_send_inv", "invalidateRkey", invalidateRkey);
    this.#build(WrOpcode.SEND_WITH_INV, { opcode: WrOpcode.SEND_WITH_INV, invalidateRkey });
  }

  /** `ibv_wr_rdma_write`. */
  rdmaWrite(remote: Remote): void {
    this.#remote("ibv_wr_rdma_write", remote, false);
    this.#build(WrOpcode.RDMA_WRITE, { opcode: WrOpcode.RDMA_WRITE, remote });
  }

  /** `ibv_wr_rdma_write_imm` (`imm` in host order). */
  rdmaWriteImm(remote: Remote, imm: number): void {
    this.#remote("ibv_wr_rdma_write_imm", remote, false);
    this.#u32("ibv_wr_rdma_write_imm", "imm", imm);
    this.#build(WrOpcode.RDMA_WRITE_WITH_IMM, {
      opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
      remote,
      imm,
    });
  }

  /** `ibv_wr_rdma_read`. */
  rdmaRead(remote: Remote): void {
    this.#remote("ibv_wr_rdma_read", remote, false);
    this.#build(WrOpcode.RDMA_READ, { opcode: WrOpcode.RDMA_READ, remote });
  }

  /** `ibv_wr_atomic_cmp_swp`: the old value lands in the 8-byte SGE set next. */
  atomicCmpSwp(remote: Remote, compare: U64, swap: U64): void {
    this.#remote("ibv_wr_atomic_cmp_swp", remote, true);
    if (!isU64(compare) || !isU64(swap)) {
      throw new InvalidArgumentError("ibv_wr_atomic_cmp_swp: compare and swap must be U64");
    }
    const op = WrOpcode.ATOMIC_CMP_AND_SWP;
    this.#build(op, { opcode: op, remote, compareAdd: compare, swap });
  }

  /** `ibv_wr_atomic_fetch_add`: the old value lands in the 8-byte SGE set next. */
  atomicFetchAdd(remote: Remote, add: U64): void {
    this.#remote("ibv_wr_atomic_fetch_add", remote, true);
    if (!isU64(add)) throw new InvalidArgumentError("ibv_wr_atomic_fetch_add: add must be a U64");
    const op = WrOpcode.ATOMIC_FETCH_AND_ADD;
    this.#build(op, { opcode: op, remote, compareAdd: add });
  }

  /** `ibv_wr_local_inv`. */
  localInv(invalidateRkey: number): void {
    this.#u32("ibv_wr_local_inv", "invalidateRkey", invalidateRkey);
    this.#build(WrOpcode.LOCAL_INV, { opcode: WrOpcode.LOCAL_INV, invalidateRkey });
  }

  /**
   * `ibv_wr_bind_mw`: binds a type-2 window with its next rkey (`ibv_inc_rkey`); the window's
   * `rkey` becomes it once the batch completes.
   */
  bindMw(bind: MwBind): void {
    const problem = sendWrProblem({ opcode: WrOpcode.BIND_MW, bind }, this.#limits);
    if (problem) throw new InvalidArgumentError(`ibv_wr_bind_mw: ${problem}`);
    this.#build(WrOpcode.BIND_MW, { opcode: WrOpcode.BIND_MW, bind });
  }

  /** `ibv_wr_set_sge`: the WR's data is `sge` (one buffer). */
  setSge(sge: Sge): void {
    const r = this.#dataSetter("ibv_wr_set_sge", false);
    const p = sgeProblem(sge, this.qp.pd, r.writesLocal) ??
      (r.atomic && sgeLength(sge) !== 8 ? "an atomic needs an SGE of 8 bytes" : null);
    if (p) throw new InvalidArgumentError(`ibv_wr_set_sge: ${p}`);
    this.#calls.sge(sge);
    this.#hasData = true;
  }

  /** `ibv_wr_set_sge_list`: the WR's data is `sg`, concatenated (at most `cap.maxSendSge`). */
  setSgeList(sg: readonly Sge[]): void {
    const r = this.#dataSetter("ibv_wr_set_sge_list", false);
    const max = this.#limits.maxSendSge;
    if (!Array.isArray(sg) || sg.length > max) {
      throw new InvalidArgumentError(
        `ibv_wr_set_sge_list: sg must be an array of at most ${max} SGEs`,
      );
    }
    for (const s of sg) {
      const p = sgeProblem(s, this.qp.pd, r.writesLocal);
      if (p) throw new InvalidArgumentError(`ibv_wr_set_sge_list: ${p}`);
    }
    this.#calls.sgeList(sg);
    this.#hasData = true;
  }

  /** `ibv_wr_set_inline_data`: the WR's data is a copy of `bytes` (at most `cap.maxInlineData`). */
  setInlineData(bytes: Uint8Array): void {
    this.#dataSetter("ibv_wr_set_inline_data", true);
    this.#inlineBytes("ibv_wr_set_inline_data", [bytes]);
    this.#calls.inline(bytes);
    this.#hasData = true;
  }

  /**
   * `ibv_wr_set_inline_data_list`: the WR's data is a copy of `list`, concatenated (soft-RoCE
   * before rdma-core 64 sends 0 bytes for it; `setInlineData` works everywhere).
   */
  setInlineDataList(list: readonly Uint8Array[]): void {
    this.#dataSetter("ibv_wr_set_inline_data_list", true);
    const total = this.#inlineBytes("ibv_wr_set_inline_data_list", list);
    this.#calls.inlineList(list, total);
    this.#hasData = true;
  }

  /** `ibv_wr_set_ud_addr`: where the UD WR goes (required after every UD builder). */
  setUdAddr(ud: UdDestination): void {
    const r = this.#setter("ibv_wr_set_ud_addr");
    if (this.qp.type !== QpType.UD || !r.ud) {
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
    if (ud.ah.pd !== this.qp.pd) {
      throw new InvalidArgumentError("ibv_wr_set_ud_addr: the AH belongs to another PD");
    }
    if (!isU32(ud.remoteQpn) || ud.remoteQpn > 0xffffff || !isU32(ud.remoteQkey)) {
      throw new InvalidArgumentError(
        "ibv_wr_set_ud_addr: remoteQpn (24 bits) and remoteQkey (32 bits)",
      );
    }
    this.#calls.udAddr(ud);
    this.#needUd = false;
  }

  /** `ibv_wr_set_xrc_srqn`: the remote XRC SRQ of the WR (required after every XRC_SEND builder). */
  setXrcSrqn(srqn: number): void {
    this.#setter("ibv_wr_set_xrc_srqn");
    if (this.qp.type !== QpType.XRC_SEND) {
      throw new InvalidArgumentError("ibv_wr_set_xrc_srqn: only on an XRC_SEND QP");
    }
    if (!isU32(srqn) || srqn > 0xffffff) {
      throw new InvalidArgumentError(`ibv_wr_set_xrc_srqn: srqn must be 24 bits, got ${srqn}`);
    }
    this.#calls.xrcSrqn(srqn);
    this.#needSrqn = false;
  }

  /** Aborts the batch unless it completed, and gives the send queue back (once, from `close()`). */
  protected destroy(): void {
    try {
      if (!this.#ended) {
        this.#ended = true;
        this.#calls.abort();
      }
    } finally {
      this.#pending = null;
      this.#onEnd();
    }
  }

  #missing(): string | null {
    if (this.#needUd) return "the last UD work request has no setUdAddr()";
    if (this.#needSrqn) return "the last XRC_SEND work request has no setXrcSrqn()";
    return null;
  }

  /** Checks a builder call and records the WR it starts. */
  #begin(op: WrOpcode): void {
    const what = `ibv_${builderOf(op)}`;
    this.assertOpen();
    const missing = this.#missing();
    if (missing) throw new InvalidArgumentError(`${what}: ${missing}`);
    const r = OPCODE_RULES.get(op)!;
    if (!this.qp.sendOps.includes(op)) {
      throw new InvalidArgumentError(`${what}: ${r.name} is not among the QP's sendOps`);
    }
    this.#pending = r;
    this.#pendingFlags = this.#calls.wrFlags;
    this.#needUd = this.qp.type === QpType.UD && r.ud;
    this.#needSrqn = this.qp.type === QpType.XRC_SEND;
    this.#hasData = false;
  }

  #build(op: WrOpcode, wr: Parameters<WrCalls["builder"]>[1]): void {
    this.#begin(op);
    this.#calls.builder(op, wr);
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

  #setter(what: string): OpcodeRule {
    this.assertOpen();
    const r = this.#pending;
    if (!r) throw new InvalidArgumentError(`${what}: call a builder (send, rdmaWrite, ...) first`);
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

  #inlineBytes(what: string, list: readonly Uint8Array[]): number {
    if (!Array.isArray(list) || list.some((b) => !(b instanceof Uint8Array))) {
      throw new InvalidArgumentError(`${what}: inline data must be Uint8Array`);
    }
    const total = list.reduce((n, b) => n + b.length, 0);
    const max = this.#limits.maxInlineData;
    if (total > max) {
      throw new InvalidArgumentError(
        `${what}: ${total} inline bytes exceed the QP's granted max_inline_data ${max}`,
      );
    }
    return total;
  }
}
