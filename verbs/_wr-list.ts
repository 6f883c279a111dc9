/**
 * The native encoding of work requests: a {@link WrList} holds `ibv_send_wr`/`ibv_recv_wr`
 * structs followed by their SGEs in one native block, linked through `next`. The `inline`
 * bytes of a WR are copied into its SGE area, behind one SGE that points at them. Memory-window
 * bookkeeping (the rkey a BIND_MW gives its window) sits beside the encoding.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { getU64Number, NativeBlock, setU64 } from "../ffi/memory.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { Layouts } from "../types/layout.ts";
import { SendFlags, WrOpcode } from "../types/enums.ts";
import {
  inlineSlots,
  type LooseSendWr,
  type MwBind,
  type RecvWr,
  type Remote,
  type SendWr,
  type Sge,
  type UdDestination,
} from "./wr.ts";
import { setWindowRkey } from "./mw.ts";

/**
 * The field offsets the encoders and the prepared lists' setters write, read once from the layout
 * table: a lookup by field name per field and per post would cost more than the encoding itself.
 */
export class WrOffsets {
  readonly sgeSize: number;
  readonly sgeAddr: number;
  readonly sgeLength: number;
  readonly sgeLkey: number;
  readonly recvWrId: number;
  readonly recvNext: number;
  readonly recvSgList: number;
  readonly recvNumSge: number;
  readonly wrId: number;
  readonly next: number;
  readonly sgList: number;
  readonly numSge: number;
  readonly opcode: number;
  readonly sendFlags: number;
  /** Where a send WR's fields that depend on its kind start (the header before is always written). */
  readonly sendTail: number;
  readonly imm: number;
  readonly invalidateRkey: number;
  readonly rdmaAddr: number;
  readonly rdmaRkey: number;
  readonly atomicAddr: number;
  readonly atomicRkey: number;
  readonly atomicCompareAdd: number;
  readonly atomicSwap: number;
  readonly udAh: number;
  readonly udQpn: number;
  readonly udQkey: number;
  readonly bindMw: number;
  readonly bindRkey: number;
  readonly bindMr: number;
  readonly bindAddr: number;
  readonly bindLength: number;
  readonly bindAccess: number;

  constructor(L: Layouts) {
    const G = L.ibv_sge.fields, R = L.ibv_recv_wr.fields, F = L.ibv_send_wr.fields;
    this.sgeSize = L.ibv_sge.size;
    this.sgeAddr = G.addr.offset;
    this.sgeLength = G.length.offset;
    this.sgeLkey = G.lkey.offset;
    this.recvWrId = R.wr_id.offset;
    this.recvNext = R.next.offset;
    this.recvSgList = R.sg_list.offset;
    this.recvNumSge = R.num_sge.offset;
    this.wrId = F.wr_id.offset;
    this.next = F.next.offset;
    this.sgList = F.sg_list.offset;
    this.numSge = F.num_sge.offset;
    this.opcode = F.opcode.offset;
    this.sendFlags = F.send_flags.offset;
    const header = [F.wr_id, F.next, F.sg_list, F.num_sge, F.opcode, F.send_flags];
    this.sendTail = Math.max(...header.map((f) => f.offset + f.size));
    this.imm = F.imm_data.offset;
    this.invalidateRkey = F.invalidate_rkey.offset;
    this.rdmaAddr = F["wr.rdma.remote_addr"].offset;
    this.rdmaRkey = F["wr.rdma.rkey"].offset;
    this.atomicAddr = F["wr.atomic.remote_addr"].offset;
    this.atomicRkey = F["wr.atomic.rkey"].offset;
    this.atomicCompareAdd = F["wr.atomic.compare_add"].offset;
    this.atomicSwap = F["wr.atomic.swap"].offset;
    this.udAh = F["wr.ud.ah"].offset;
    this.udQpn = F["wr.ud.remote_qpn"].offset;
    this.udQkey = F["wr.ud.remote_qkey"].offset;
    this.bindMw = F["bind_mw.mw"].offset;
    this.bindRkey = F["bind_mw.rkey"].offset;
    this.bindMr = F["bind_mw.bind_info.mr"].offset;
    this.bindAddr = F["bind_mw.bind_info.addr"].offset;
    this.bindLength = F["bind_mw.bind_info.length"].offset;
    this.bindAccess = F["bind_mw.bind_info.mw_access_flags"].offset;
  }
}

let offsets: WrOffsets | null = null;

/** The process's WR field offsets (its architecture's table, read on first use). */
export function wrOffsets(): WrOffsets {
  return offsets ??= new WrOffsets(layouts());
}

/** Writes `sg` as an `ibv_sge` array at byte `at` of `view`. */
export function writeSges(view: DataView, at: number, sg: readonly Sge[]): void {
  const o = wrOffsets();
  for (let j = 0; j < sg.length; j++) {
    const s = sg[j];
    const mr = s.mr;
    const offset = s.offset ?? 0;
    const e = at + j * o.sgeSize;
    setU64(view, e + o.sgeAddr, mr.addrNumber + offset);
    view.setUint32(e + o.sgeLength, s.length ?? mr.length - offset, true);
    view.setUint32(e + o.sgeLkey, mr.lkey, true);
  }
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
  /** The pointer slot a post writes `bad_wr` into (the block's last 8 bytes). */
  readonly badWr: NativePointer;
  readonly #o: WrOffsets;
  readonly #sgeBase: number;
  readonly #badAt: number;

  /** Allocates room for `capacity` WRs of `wrSize` bytes, `sgeCapacity` SGEs and `bad_wr`. */
  constructor(wrSize: number, capacity: number, sgeCapacity: number) {
    const o = this.#o = wrOffsets();
    this.wrSize = wrSize;
    this.capacity = capacity;
    this.sgeCapacity = sgeCapacity;
    this.#sgeBase = wrSize * capacity;
    this.#badAt = this.#sgeBase + o.sgeSize * sgeCapacity;
    this.block = new NativeBlock(this.#badAt + 8, 64);
    this.badWr = this.block.at(this.#badAt);
  }

  /** The index of the WR a failed post named in `bad_wr`. */
  badIndex(): number {
    return this.indexOf(this.block.pointerAt(this.#badAt));
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

  /**
   * The byte offset of WR `i`'s first SGE after an encode (`send`: a send WR list), -1 when it
   * has none. An int32, so that offsets computed from it stay integers for the engines' `DataView`
   * fast paths (JSC takes a slow path for a double index).
   */
  sgeStart(i: number, send: boolean): number {
    const at = i * this.wrSize + (send ? this.#o.sgList : this.#o.recvSgList);
    const p = getU64Number(this.block.view, at);
    return p === 0 ? -1 : (p - this.block.addrNumber) | 0;
  }

  /**
   * Writes a WR's SGE list into SGE slot `slot` onward and its `sg_list` and `num_sge` (at
   * `sgListAt` and `numSgeAt`: NULL and 0 without SGEs). Returns the slots used.
   */
  #sges(sgListAt: number, numSgeAt: number, slot: number, sg: readonly Sge[] | undefined): number {
    const count = sg === undefined ? 0 : sg.length;
    if (count > 0) {
      const start = this.#sgeBase + this.#o.sgeSize * slot;
      writeSges(this.block.view, start, sg!);
      this.block.setInnerPointer(sgListAt, start);
    } else this.block.setInnerPointer(sgListAt, null);
    this.block.view.setInt32(numSgeAt, count, true);
    return count;
  }

  /**
   * Writes `bytes` into the SGE area at slot `slot` + 1 and one SGE at slot `slot` pointing at
   * them (lkey 0: providers copy inline data by address), for the send WR at `at`. Returns the
   * slots used.
   */
  #inline(at: number, slot: number, bytes: Uint8Array): number {
    const o = this.#o;
    const slots = inlineSlots(bytes.length);
    const view = this.block.view;
    if (slots > 0) {
      const start = this.#sgeBase + o.sgeSize * slot;
      const data = start + o.sgeSize;
      this.block.bytes.set(bytes, data);
      setU64(view, start + o.sgeAddr, this.block.addrNumber + data);
      view.setUint32(start + o.sgeLength, bytes.length, true);
      view.setUint32(start + o.sgeLkey, 0, true);
      this.block.setInnerPointer(at + o.sgList, start);
    } else this.block.setInnerPointer(at + o.sgList, null);
    view.setInt32(at + o.numSge, slots > 0 ? 1 : 0, true);
    return slots;
  }

  /** Encodes the first `count` send WRs (already checked). */
  encodeSend(wrs: readonly SendWr[], count: number): void {
    const o = this.#o;
    const block = this.block;
    const view = block.view;
    const wrSize = this.wrSize;
    let slot = 0;
    for (let i = 0; i < count; i++) {
      const wr = wrs[i] as SendWr & LooseSendWr;
      const at = i * wrSize;
      const op = wr.opcode ?? WrOpcode.SEND;
      setU64(view, at + o.wrId, wr.wrId ?? 0);
      this.#zeroTail(at); // 0 in every union, whatever the previous post left there
      block.setInnerPointer(at + o.next, i + 1 < count ? at + wrSize : null);
      const bytes = wr.inline as Uint8Array | undefined;
      slot += bytes === undefined
        ? this.#sges(at + o.sgList, at + o.numSge, slot, wr.sg)
        : this.#inline(at, slot, bytes);
      view.setUint32(at + o.opcode, op, true);
      const flags = wr.flags ?? SendFlags.SIGNALED;
      view.setUint32(
        at + o.sendFlags,
        bytes === undefined ? flags : flags | SendFlags.INLINE,
        true,
      );
      switch (op) {
        case WrOpcode.RDMA_WRITE:
        case WrOpcode.RDMA_READ:
          this.#remote(at, wr.remote!);
          break;
        case WrOpcode.RDMA_WRITE_WITH_IMM:
          this.#remote(at, wr.remote!);
          view.setUint32(at + o.imm, wr.imm!, false);
          break;
        case WrOpcode.SEND_WITH_IMM:
          view.setUint32(at + o.imm, wr.imm!, false);
          if (wr.ud) this.#ud(at, wr.ud);
          break;
        case WrOpcode.SEND:
          if (wr.ud) this.#ud(at, wr.ud);
          break;
        case WrOpcode.SEND_WITH_INV:
        case WrOpcode.LOCAL_INV:
          view.setUint32(at + o.invalidateRkey, wr.invalidateRkey!, true);
          break;
        case WrOpcode.ATOMIC_CMP_AND_SWP:
        case WrOpcode.ATOMIC_FETCH_AND_ADD:
          setU64(view, at + o.atomicAddr, wr.remote!.addr);
          view.setUint32(at + o.atomicRkey, wr.remote!.rkey, true);
          setU64(view, at + o.atomicCompareAdd, wr.compareAdd!);
          if (wr.swap !== undefined) setU64(view, at + o.atomicSwap, wr.swap);
          break;
        case WrOpcode.BIND_MW:
          this.#bind(at, wr.bind!);
          break;
      }
    }
  }

  /**
   * Zeroes the send WR at `at` from {@link WrOffsets.sendTail} to its end, 8 bytes a store: the
   * header before it is written field by field, and `TypedArray.fill` is a builtin call that costs
   * Deno about four times as much as these stores.
   */
  #zeroTail(at: number): void {
    const view = this.block.view;
    const end = at + this.wrSize;
    let p = at + this.#o.sendTail;
    for (; (p & 7) !== 0 && p < end; p++) view.setUint8(p, 0);
    for (; p + 8 <= end; p += 8) view.setBigUint64(p, 0n, true);
    for (; p < end; p++) view.setUint8(p, 0);
  }

  #remote(at: number, r: Remote): void {
    setU64(this.block.view, at + this.#o.rdmaAddr, r.addr);
    this.block.view.setUint32(at + this.#o.rdmaRkey, r.rkey, true);
  }

  // the checks let `ud` through only on UD QPs
  #ud(at: number, ud: UdDestination): void {
    const o = this.#o;
    this.block.setPointer(at + o.udAh, ud.ah.ptr);
    this.block.view.setUint32(at + o.udQpn, ud.remoteQpn, true);
    this.block.view.setUint32(at + o.udQkey, ud.remoteQkey, true);
  }

  #bind(at: number, b: MwBind): void {
    const o = this.#o;
    const view = this.block.view;
    const off = b.offset ?? 0;
    this.block.setPointer(at + o.bindMw, b.mw.ptr);
    view.setUint32(at + o.bindRkey, b.mw.nextRkey(), true);
    this.block.setPointer(at + o.bindMr, b.mr.ptr);
    setU64(view, at + o.bindAddr, b.mr.addrNumber + off);
    setU64(view, at + o.bindLength, b.length ?? b.mr.length - off);
    view.setUint32(at + o.bindAccess, b.access, true);
  }

  /** Encodes the first `count` receive WRs (already checked). */
  encodeRecv(wrs: readonly RecvWr[], count: number): void {
    const o = this.#o;
    const block = this.block;
    const wrSize = this.wrSize;
    let slot = 0;
    // every field is written (an ibv_recv_wr has no others), so nothing is zeroed first
    for (let i = 0; i < count; i++) {
      const wr = wrs[i];
      const at = i * wrSize;
      setU64(block.view, at + o.recvWrId, wr.wrId ?? 0);
      block.setInnerPointer(at + o.recvNext, i + 1 < count ? at + wrSize : null);
      slot += this.#sges(at + o.recvSgList, at + o.recvNumSge, slot, wr.sg);
    }
  }
}

/**
 * After the first `count` send WRs were posted: each BIND_MW gave its window the next rkey
 * (`ibv_inc_rkey`), which the window now reports.
 */
export function commitBinds(wrs: readonly SendWr[], count: number): void {
  for (let i = 0; i < count; i++) {
    const wr = wrs[i];
    if (wr.opcode === WrOpcode.BIND_MW) setWindowRkey(wr.bind.mw, wr.bind.mw.nextRkey());
  }
}
