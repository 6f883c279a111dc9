/**
 * Work requests: their TypeScript shape, the checks made before the provider sees
 * them, and their encoding into native `ibv_send_wr`/`ibv_recv_wr` lists.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { AccessFlags, QpType, SendFlags, WrOpcode } from "../types/enums.ts";
import { layoutFor } from "../types/layout.ts";
import { NativeBlock, setU64 } from "./memory.ts";
import type { MemoryRegion } from "./mr.ts";
import type { MemoryWindow } from "./mw.ts";
import type { AddressHandle } from "./ah.ts";
import type { ProtectionDomain } from "./pd.ts";

/**
 * A scatter/gather element: `length` bytes at `offset` of a registered MR (default:
 * the rest of the MR). A zero-length message has no SGE at all (`sg: []`).
 */
export interface Sge {
  /** The MR the bytes are in. */
  readonly mr: MemoryRegion;
  /** Offset into the MR (default 0). */
  readonly offset?: number;
  /** Bytes (default: to the end of the MR). Never 0. */
  readonly length?: number;
}

/** A remote address: where an RDMA or atomic operation goes. */
export interface Remote {
  /** Remote virtual address. */
  readonly addr: bigint | number;
  /** Remote key (of an MR or MW). */
  readonly rkey: number;
}

/** A send work request (`struct ibv_send_wr`). */
export interface SendWr {
  /** Returned in the completion (default 0). */
  readonly wrId?: bigint | number;
  /** `WrOpcode` (default SEND). */
  readonly opcode?: number;
  /** `SendFlags` bits (default SIGNALED). */
  readonly flags?: number;
  /** The local data (none for a zero-length message). */
  readonly sg?: readonly Sge[];
  /** Immediate data in host order (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM); sent in network order. */
  readonly imm?: number;
  /** The remote side of RDMA_WRITE/READ and atomics. */
  readonly remote?: Remote;
  /** ATOMIC_CMP_AND_SWP's compare value or ATOMIC_FETCH_AND_ADD's addend. */
  readonly compareAdd?: bigint | number;
  /** ATOMIC_CMP_AND_SWP's swap value. */
  readonly swap?: bigint | number;
  /** UD destination. */
  readonly ud?: {
    readonly ah: AddressHandle;
    readonly remoteQpn: number;
    readonly remoteQkey: number;
  };
  /** BIND_MW: the window, and the range of an MR it exposes with `access` (AccessFlags). */
  readonly bind?: {
    readonly mw: MemoryWindow;
    readonly mr: MemoryRegion;
    readonly offset?: number;
    readonly length?: number;
    readonly access: number;
  };
  /** LOCAL_INV / SEND_WITH_INV: the rkey to invalidate. */
  readonly invalidateRkey?: number;
}

/** A receive work request (`struct ibv_recv_wr`). */
export interface RecvWr {
  /** Returned in the completion (default 0). */
  readonly wrId?: bigint | number;
  /** Where received data lands (none for zero-length messages). */
  readonly sg?: readonly Sge[];
}

/** What a QP offers to the send-WR checks. */
export interface SendLimits {
  /** `QpType`. */
  readonly type: number;
  /** The PD of the QP. */
  readonly pd: ProtectionDomain;
  /** Granted send SGEs. */
  readonly maxSendSge: number;
  /** Granted inline bytes. */
  readonly maxInlineData: number;
}

const W = WrOpcode;
const ALLOWED: Readonly<Record<number, ReadonlySet<number>>> = {
  [QpType.RC]: new Set([
    W.SEND,
    W.SEND_WITH_IMM,
    W.RDMA_WRITE,
    W.RDMA_WRITE_WITH_IMM,
    W.RDMA_READ,
    W.ATOMIC_CMP_AND_SWP,
    W.ATOMIC_FETCH_AND_ADD,
    W.LOCAL_INV,
    W.BIND_MW,
    W.SEND_WITH_INV,
  ]),
  [QpType.UC]: new Set([
    W.SEND,
    W.SEND_WITH_IMM,
    W.RDMA_WRITE,
    W.RDMA_WRITE_WITH_IMM,
    W.LOCAL_INV,
    W.BIND_MW,
    W.SEND_WITH_INV,
  ]),
  [QpType.UD]: new Set([W.SEND, W.SEND_WITH_IMM]),
};
const OPCODE_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(WrOpcode).map(([k, v]) => [v, `IBV_WR_${k}`]),
);
const QPT_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(QpType).map(([k, v]) => [v, `IBV_QPT_${k}`]),
);
const RDMA = new Set<number>([W.RDMA_WRITE, W.RDMA_WRITE_WITH_IMM, W.RDMA_READ]);
const ATOMIC = new Set<number>([W.ATOMIC_CMP_AND_SWP, W.ATOMIC_FETCH_AND_ADD]);
const WITH_IMM = new Set<number>([W.SEND_WITH_IMM, W.RDMA_WRITE_WITH_IMM]);

/** Checks one SGE against its MR and PD; returns the reason it is invalid, or null. */
export function sgeProblem(sge: Sge, pd: ProtectionDomain, needLocalWrite: boolean): string | null {
  const mr = sge.mr;
  if (!mr || typeof mr !== "object") return "an SGE needs an MR";
  if (mr.closed) return "an SGE's MR is closed";
  if (mr.pd !== pd) return "an SGE's MR belongs to another PD";
  const offset = sge.offset ?? 0;
  const length = sge.length ?? mr.length - offset;
  if (!Number.isInteger(offset) || !Number.isInteger(length) || offset < 0 || length < 0) {
    return `SGE offset ${offset} and length ${length} must be non-negative integers`;
  }
  if (length === 0) {
    return "an SGE of 0 bytes is not allowed: send a zero-length message with no SGE (sg: [])";
  }
  if (offset + length > mr.length) {
    return `SGE [${offset}, ${offset + length}) is outside its MR (${mr.length} bytes)`;
  }
  if (needLocalWrite && (mr.access & AccessFlags.LOCAL_WRITE) === 0) {
    return "the SGE's MR lacks IBV_ACCESS_LOCAL_WRITE, which received data needs";
  }
  return null;
}

/** Returns why a send WR is invalid on a QP with `limits`, or null. */
export function sendWrProblem(wr: SendWr, q: SendLimits): string | null {
  const op = wr.opcode ?? W.SEND;
  const allowed = ALLOWED[q.type];
  if (!OPCODE_NAMES[op]) return `unknown opcode ${op}`;
  if (!allowed?.has(op)) {
    return `${OPCODE_NAMES[op]} is not supported on ${QPT_NAMES[q.type] ?? `QP type ${q.type}`}`;
  }
  const flags = wr.flags ?? SendFlags.SIGNALED;
  const sg = wr.sg ?? [];
  if (sg.length > q.maxSendSge) {
    return `${sg.length} SGEs exceed the QP's granted max_send_sge ${q.maxSendSge}`;
  }
  const inline = (flags & SendFlags.INLINE) !== 0;
  const needLocalWrite = op === W.RDMA_READ || ATOMIC.has(op);
  let total = 0;
  for (const s of sg) {
    const p = sgeProblem(s, q.pd, needLocalWrite);
    if (p) return p;
    total += s.length ?? s.mr.length - (s.offset ?? 0);
  }
  if (inline) {
    if (op === W.RDMA_READ || ATOMIC.has(op)) return `${OPCODE_NAMES[op]} cannot be inline`;
    if (total > q.maxInlineData) {
      return `${total} inline bytes exceed the QP's granted max_inline_data ${q.maxInlineData}`;
    }
  }
  if (WITH_IMM.has(op)) {
    if (wr.imm === undefined || !Number.isInteger(wr.imm) || wr.imm < 0 || wr.imm > 0xffffffff) {
      return `${OPCODE_NAMES[op]} needs imm, a 32-bit unsigned integer`;
    }
  } else if (wr.imm !== undefined) {
    return `imm is only sent by SEND_WITH_IMM and RDMA_WRITE_WITH_IMM`;
  }
  if (RDMA.has(op) || ATOMIC.has(op)) {
    if (!wr.remote) return `${OPCODE_NAMES[op]} needs remote { addr, rkey }`;
  }
  if (ATOMIC.has(op)) {
    if (BigInt(wr.remote!.addr) % 8n !== 0n) {
      return `atomic remote address 0x${
        BigInt(wr.remote!.addr).toString(16)
      } is not 8-byte aligned`;
    }
    if (sg.length !== 1 || total !== 8) return "an atomic needs exactly one SGE of 8 bytes";
    if (wr.compareAdd === undefined) return `${OPCODE_NAMES[op]} needs compareAdd`;
    if (op === W.ATOMIC_CMP_AND_SWP && wr.swap === undefined) {
      return "ATOMIC_CMP_AND_SWP needs swap";
    }
  }
  if (q.type === QpType.UD) {
    if (!wr.ud) return "a UD send needs ud { ah, remoteQpn, remoteQkey }";
    if (wr.ud.ah.closed) return "the UD address handle is closed";
  }
  if (op === W.BIND_MW) {
    const b = wr.bind;
    if (!b) return "BIND_MW needs bind { mw, mr, offset, length, access }";
    if (b.mw.closed) return "the memory window is closed";
    if (b.mw.pd !== q.pd) return "the memory window belongs to another PD";
    if (b.mr.closed) return "the MR to bind is closed";
    if ((b.mr.access & AccessFlags.MW_BIND) === 0) {
      return "the MR to bind lacks IBV_ACCESS_MW_BIND";
    }
    const off = b.offset ?? 0;
    const len = b.length ?? b.mr.length - off;
    if (off < 0 || len < 0 || off + len > b.mr.length) {
      return `bind range [${off}, ${off + len}) is outside the MR (${b.mr.length} bytes)`;
    }
  }
  if ((op === W.LOCAL_INV || op === W.SEND_WITH_INV) && wr.invalidateRkey === undefined) {
    return `${OPCODE_NAMES[op]} needs invalidateRkey`;
  }
  return null;
}

/** Returns why a receive WR is invalid, or null. */
export function recvWrProblem(wr: RecvWr, pd: ProtectionDomain, maxSge: number): string | null {
  const sg = wr.sg ?? [];
  if (sg.length > maxSge) return `${sg.length} SGEs exceed the granted max_recv_sge ${maxSge}`;
  for (const s of sg) {
    const p = sgeProblem(s, pd, true);
    if (p) return p;
  }
  return null;
}

/** A native list of work requests followed by their SGEs. */
export class WrList {
  /** The native memory: `capacity` WRs then `sgeCapacity` SGEs. */
  readonly block: NativeBlock;
  /** WR capacity. */
  readonly capacity: number;
  /** SGE capacity. */
  readonly sgeCapacity: number;
  /** Size of one WR struct. */
  readonly wrSize: number;
  /** Where each WR's SGEs start (byte offset), after `encode`. */
  readonly sgeAt: number[] = [];

  /** Allocates room for `capacity` WRs of `wrSize` bytes and `sgeCapacity` SGEs. */
  constructor(wrSize: number, capacity: number, sgeCapacity: number) {
    this.wrSize = wrSize;
    this.capacity = capacity;
    this.sgeCapacity = sgeCapacity;
    this.block = new NativeBlock(wrSize * capacity + SGE_SIZE() * sgeCapacity, 64);
  }

  /** The address of WR `i`. */
  wr(i: number): NativePointer {
    return this.block.at(i * this.wrSize);
  }

  /** The index of a WR from its address (for `bad_wr`). */
  indexOf(p: NativePointer | null): number {
    if (p === null) return 0;
    const n = native();
    return Number((n.address(p) - n.address(this.block.ptr)) / BigInt(this.wrSize));
  }

  #writeSges(at: number, sgeBase: number, sg: readonly Sge[] | undefined, recv: boolean): number {
    const L = layoutFor(native().arch);
    const S = L.ibv_sge.fields;
    const view = this.block.view;
    const list = sg ?? [];
    const start = this.wrSize * this.capacity + L.ibv_sge.size * sgeBase;
    for (let j = 0; j < list.length; j++) {
      const s = list[j];
      const off = start + j * L.ibv_sge.size;
      const offset = s.offset ?? 0;
      setU64(view, off + S.addr.offset, s.mr.addrNumber + offset);
      view.setUint32(off + S.length.offset, s.length ?? s.mr.length - offset, true);
      view.setUint32(off + S.lkey.offset, s.mr.lkey, true);
    }
    const F = recv ? L.ibv_recv_wr.fields : L.ibv_send_wr.fields;
    native().writePointer(
      this.block.ptr,
      at + F.sg_list.offset,
      list.length ? this.block.at(start) : null,
    );
    view.setInt32(at + F.num_sge.offset, list.length, true);
    this.sgeAt.push(start);
    return list.length;
  }

  #link(i: number, count: number, nextOffset: number): void {
    const at = i * this.wrSize;
    native().writePointer(this.block.ptr, at + nextOffset, i + 1 < count ? this.wr(i + 1) : null);
  }

  /** Encodes `count` send WRs (already checked). */
  encodeSend(wrs: readonly SendWr[], count: number): void {
    const F = layoutFor(native().arch).ibv_send_wr.fields;
    const view = this.block.view;
    this.block.bytes.fill(0, 0, this.wrSize * count);
    this.sgeAt.length = 0;
    let sges = 0;
    for (let i = 0; i < count; i++) {
      const wr = wrs[i];
      const at = i * this.wrSize;
      const op = wr.opcode ?? W.SEND;
      setU64(view, at + F.wr_id.offset, wr.wrId ?? 0);
      this.#link(i, count, F.next.offset);
      sges += this.#writeSges(at, sges, wr.sg, false);
      view.setUint32(at + F.opcode.offset, op, true);
      view.setUint32(at + F.send_flags.offset, wr.flags ?? SendFlags.SIGNALED, true);
      if (wr.imm !== undefined) view.setUint32(at + F.imm_data.offset, wr.imm, false);
      if (wr.invalidateRkey !== undefined) {
        view.setUint32(at + F.invalidate_rkey.offset, wr.invalidateRkey, true);
      }
      if (wr.remote) {
        if (ATOMIC.has(op)) {
          setU64(view, at + F["wr.atomic.remote_addr"].offset, wr.remote.addr);
          view.setUint32(at + F["wr.atomic.rkey"].offset, wr.remote.rkey, true);
          setU64(view, at + F["wr.atomic.compare_add"].offset, wr.compareAdd ?? 0);
          setU64(view, at + F["wr.atomic.swap"].offset, wr.swap ?? 0);
        } else {
          setU64(view, at + F["wr.rdma.remote_addr"].offset, wr.remote.addr);
          view.setUint32(at + F["wr.rdma.rkey"].offset, wr.remote.rkey, true);
        }
      }
      if (wr.ud) {
        native().writePointer(this.block.ptr, at + F["wr.ud.ah"].offset, wr.ud.ah.ptr);
        view.setUint32(at + F["wr.ud.remote_qpn"].offset, wr.ud.remoteQpn, true);
        view.setUint32(at + F["wr.ud.remote_qkey"].offset, wr.ud.remoteQkey, true);
      }
      if (wr.bind) {
        const b = wr.bind;
        const off = b.offset ?? 0;
        native().writePointer(this.block.ptr, at + F["bind_mw.mw"].offset, b.mw.ptr);
        view.setUint32(at + F["bind_mw.rkey"].offset, b.mw.nextRkey(), true);
        native().writePointer(this.block.ptr, at + F["bind_mw.bind_info.mr"].offset, b.mr.ptr);
        setU64(view, at + F["bind_mw.bind_info.addr"].offset, b.mr.addrNumber + off);
        setU64(view, at + F["bind_mw.bind_info.length"].offset, b.length ?? b.mr.length - off);
        view.setUint32(at + F["bind_mw.bind_info.mw_access_flags"].offset, b.access, true);
      }
    }
  }

  /** Encodes `count` receive WRs (already checked). */
  encodeRecv(wrs: readonly RecvWr[], count: number): void {
    const F = layoutFor(native().arch).ibv_recv_wr.fields;
    const view = this.block.view;
    this.block.bytes.fill(0, 0, this.wrSize * count);
    this.sgeAt.length = 0;
    let sges = 0;
    for (let i = 0; i < count; i++) {
      const wr = wrs[i];
      setU64(view, i * this.wrSize + F.wr_id.offset, wr.wrId ?? 0);
      this.#link(i, count, F.next.offset);
      sges += this.#writeSges(i * this.wrSize, sges, wr.sg, true);
    }
  }
}

function SGE_SIZE(): number {
  return layoutFor(native().arch).ibv_sge.size;
}

/** The number of SGEs in a list of WRs. */
export function countSges(wrs: readonly { readonly sg?: readonly Sge[] }[]): number {
  let n = 0;
  for (const w of wrs) n += w.sg?.length ?? 0;
  return n;
}
