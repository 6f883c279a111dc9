/**
 * The native encoding of work requests: a {@link WrList} holds `ibv_send_wr`/`ibv_recv_wr`
 * structs followed by their SGEs in one native block, linked through `next`. The `inline`
 * bytes of a WR are copied into its SGE area, behind one SGE that points at them. Memory-window
 * bookkeeping (the rkey a BIND_MW gives its window) sits beside the encoding.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { NativeBlock, setU64 } from "../ffi/memory.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { Layouts } from "../types/layout.ts";
import { SendFlags, WrOpcode } from "../types/enums.ts";
import { inlineSlots, OPCODE_RULES, type RecvWr, type SendWr, type Sge } from "./wr.ts";
import { setWindowRkey } from "./mw.ts";

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
  /** Where each WR's SGEs start (byte offset), after an encode. */
  readonly sgeAt: number[] = [];
  /** The pointer slot a post writes `bad_wr` into (the block's last 8 bytes). */
  readonly badWr: NativePointer;
  readonly #L: Layouts;
  readonly #badAt: number;

  /** Allocates room for `capacity` WRs of `wrSize` bytes, `sgeCapacity` SGEs and `bad_wr`. */
  constructor(wrSize: number, capacity: number, sgeCapacity: number) {
    this.#L = layouts();
    this.wrSize = wrSize;
    this.capacity = capacity;
    this.sgeCapacity = sgeCapacity;
    this.#badAt = wrSize * capacity + this.#L.ibv_sge.size * sgeCapacity;
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

  #writeSges(at: number, sgeBase: number, sg: readonly Sge[] | undefined, recv: boolean): number {
    const L = this.#L;
    const S = L.ibv_sge.fields;
    const view = this.block.view;
    const start = this.wrSize * this.capacity + L.ibv_sge.size * sgeBase;
    const count = sg?.length ?? 0;
    for (let j = 0; j < count; j++) {
      const s = sg![j];
      const off = start + j * L.ibv_sge.size;
      const offset = s.offset ?? 0;
      setU64(view, off + S.addr.offset, s.mr.addrNumber + offset);
      view.setUint32(off + S.length.offset, s.length ?? s.mr.length - offset, true);
      view.setUint32(off + S.lkey.offset, s.mr.lkey, true);
    }
    const F = recv ? L.ibv_recv_wr.fields : L.ibv_send_wr.fields;
    this.block.setInnerPointer(at + F.sg_list.offset, count ? start : null);
    view.setInt32(at + F.num_sge.offset, count, true);
    this.sgeAt.push(start);
    return count;
  }

  /**
   * Writes `bytes` into the SGE area at slot `sgeBase` + 1 and one SGE at slot `sgeBase`
   * pointing at them (lkey 0: providers copy inline data by address), as `#writeSges` does for
   * a WR's SGE list. Returns the slots used.
   */
  #writeInline(at: number, sgeBase: number, bytes: Uint8Array): number {
    const L = this.#L;
    const S = L.ibv_sge.fields;
    const view = this.block.view;
    const start = this.wrSize * this.capacity + L.ibv_sge.size * sgeBase;
    const slots = inlineSlots(bytes.length);
    const F = L.ibv_send_wr.fields;
    if (slots > 0) {
      const data = start + L.ibv_sge.size;
      this.block.bytes.set(bytes, data);
      setU64(view, start + S.addr.offset, this.block.addrNumber + data);
      view.setUint32(start + S.length.offset, bytes.length, true);
      view.setUint32(start + S.lkey.offset, 0, true);
    }
    this.block.setInnerPointer(at + F.sg_list.offset, slots ? start : null);
    view.setInt32(at + F.num_sge.offset, slots ? 1 : 0, true);
    this.sgeAt.push(start);
    return slots;
  }

  #link(i: number, count: number, nextOffset: number): void {
    this.block.setInnerPointer(
      i * this.wrSize + nextOffset,
      i + 1 < count ? (i + 1) * this.wrSize : null,
    );
  }

  /** Encodes the first `count` send WRs (already checked). */
  encodeSend(wrs: readonly SendWr[], count: number): void {
    const F = this.#L.ibv_send_wr.fields;
    const view = this.block.view;
    const block = this.block;
    block.bytes.fill(0, 0, this.wrSize * count);
    this.sgeAt.length = 0;
    let sges = 0;
    for (let i = 0; i < count; i++) {
      const wr = wrs[i];
      const at = i * this.wrSize;
      const op = wr.opcode ?? WrOpcode.SEND;
      const rule = OPCODE_RULES.get(op)!;
      setU64(view, at + F.wr_id.offset, wr.wrId ?? 0);
      this.#link(i, count, F.next.offset);
      const bytes = "inline" in wr ? wr.inline : undefined;
      sges += bytes === undefined
        ? this.#writeSges(at, sges, wr.sg, false)
        : this.#writeInline(at, sges, bytes);
      view.setUint32(at + F.opcode.offset, op, true);
      const flags = wr.flags ?? SendFlags.SIGNALED;
      view.setUint32(
        at + F.send_flags.offset,
        bytes === undefined ? flags : flags | SendFlags.INLINE,
        true,
      );
      switch (wr.opcode) {
        case WrOpcode.SEND_WITH_IMM:
        case WrOpcode.RDMA_WRITE_WITH_IMM:
          view.setUint32(at + F.imm_data.offset, wr.imm, false);
          break;
        case WrOpcode.SEND_WITH_INV:
        case WrOpcode.LOCAL_INV:
          view.setUint32(at + F.invalidate_rkey.offset, wr.invalidateRkey, true);
          break;
      }
      if (rule.atomic) {
        const a = wr as Extract<SendWr, { compareAdd: unknown }>;
        setU64(view, at + F["wr.atomic.remote_addr"].offset, a.remote.addr);
        view.setUint32(at + F["wr.atomic.rkey"].offset, a.remote.rkey, true);
        setU64(view, at + F["wr.atomic.compare_add"].offset, a.compareAdd);
        if ("swap" in a) setU64(view, at + F["wr.atomic.swap"].offset, a.swap);
      } else if (rule.remote) {
        const r = (wr as Extract<SendWr, { remote: unknown }>).remote;
        setU64(view, at + F["wr.rdma.remote_addr"].offset, r.addr);
        view.setUint32(at + F["wr.rdma.rkey"].offset, r.rkey, true);
      }
      if (rule.ud && "ud" in wr && wr.ud) {
        block.setPointer(at + F["wr.ud.ah"].offset, wr.ud.ah.ptr);
        view.setUint32(at + F["wr.ud.remote_qpn"].offset, wr.ud.remoteQpn, true);
        view.setUint32(at + F["wr.ud.remote_qkey"].offset, wr.ud.remoteQkey, true);
      }
      if (wr.opcode === WrOpcode.BIND_MW) {
        const b = wr.bind;
        const off = b.offset ?? 0;
        block.setPointer(at + F["bind_mw.mw"].offset, b.mw.ptr);
        view.setUint32(at + F["bind_mw.rkey"].offset, b.mw.nextRkey(), true);
        block.setPointer(at + F["bind_mw.bind_info.mr"].offset, b.mr.ptr);
        setU64(view, at + F["bind_mw.bind_info.addr"].offset, b.mr.addrNumber + off);
        setU64(view, at + F["bind_mw.bind_info.length"].offset, b.length ?? b.mr.length - off);
        view.setUint32(at + F["bind_mw.bind_info.mw_access_flags"].offset, b.access, true);
      }
    }
  }

  /** Encodes the first `count` receive WRs (already checked). */
  encodeRecv(wrs: readonly RecvWr[], count: number): void {
    const F = this.#L.ibv_recv_wr.fields;
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
