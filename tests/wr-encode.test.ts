/**
 * The classic post path's encoder without a device: each send kind's fields land where the
 * generated layout puts them, a reused list keeps nothing of its previous post, and receive
 * lists (written field by field, not zeroed first) link and terminate correctly.
 */
import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { layouts } from "../ffi/native.ts";
import { getU64Number, NativeBlock } from "../ffi/memory.ts";
import { WrList } from "../verbs/_wr-list.ts";
import { type SendLimits, type SendWr, sendWrProblem } from "../verbs/wr.ts";
import type { MemoryRegion } from "../verbs/mr.ts";
import type { AddressHandle } from "../verbs/ah.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import { QpType, SendFlags, WrOpcode } from "../types/enums.ts";

// what the encoder reads of an MR (the checks, which it trusts, are tested in verbs.test.ts)
const mr = { addrNumber: 0x7f00_0000_1000, length: 4096, lkey: 0x1234 } as MemoryRegion;

function fields(send: boolean) {
  const L = layouts();
  return send ? L.ibv_send_wr.fields : L.ibv_recv_wr.fields;
}

/** Reads the list's WR `i` field `name` (u64 fields as numbers, u32 ones little-endian). */
function read(list: WrList, i: number, name: string, send = true, size = 0): number {
  const f = (fields(send) as Record<string, { offset: number; size: number }>)[name];
  const at = i * list.wrSize + f.offset;
  const v = list.block.view;
  return (size || f.size) === 8 ? getU64Number(v, at) : v.getUint32(at, true);
}

/** The byte offset inside the list a native pointer field points at (-1: NULL). */
function inner(list: WrList, i: number, name: string, send = true): number {
  const p = read(list, i, name, send, 8);
  return p === 0 ? -1 : p - list.block.addrNumber;
}

function sge(list: WrList, at: number): [number, number, number] {
  const S = layouts().ibv_sge.fields;
  const v = list.block.view;
  return [
    getU64Number(v, at + S.addr.offset),
    v.getUint32(at + S.length.offset, true),
    v.getUint32(at + S.lkey.offset, true),
  ];
}

test("wr encoding: each send kind's fields land where the layout says; a reused list keeps none of the last", () => {
  const L = layouts();
  const ahBlock = new NativeBlock(8); // stands for an ibv_ah: only its address is written
  const ah = { ptr: ahBlock.ptr } as unknown as AddressHandle;
  const list = new WrList(L.ibv_send_wr.size, 4, 8);
  try {
    const remote = { addr: 0x7f00_0000_8000, rkey: 0xabcd };
    const wrs: SendWr[] = [
      {
        wrId: 2 ** 40 + 5,
        opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
        sg: [{ mr, offset: 16, length: 100 }, { mr, offset: 200 }],
        remote,
        imm: 0x01020304,
        flags: SendFlags.SIGNALED | SendFlags.FENCE,
      },
      { wrId: 7n, inline: new Uint8Array([1, 2, 3, 4, 5]), flags: 0 },
      {
        opcode: WrOpcode.ATOMIC_CMP_AND_SWP,
        sg: [{ mr, offset: 8, length: 8 }],
        remote,
        compareAdd: 3,
        swap: 2n ** 63n,
      },
    ];
    list.encodeSend(wrs, 3);
    // WR 0: two SGEs, the second's length the rest of its MR; imm in network order
    assert.equal(read(list, 0, "wr_id"), 2 ** 40 + 5);
    assert.equal(inner(list, 0, "next"), list.wrSize);
    assert.equal(read(list, 0, "opcode"), WrOpcode.RDMA_WRITE_WITH_IMM);
    assert.equal(read(list, 0, "send_flags"), SendFlags.SIGNALED | SendFlags.FENCE);
    assert.equal(read(list, 0, "num_sge"), 2);
    const sg0 = inner(list, 0, "sg_list");
    assert.deepEqual(sge(list, sg0), [mr.addrNumber + 16, 100, 0x1234]);
    assert.deepEqual(sge(list, sg0 + L.ibv_sge.size), [mr.addrNumber + 200, 4096 - 200, 0x1234]);
    const immAt = L.ibv_send_wr.fields.imm_data.offset;
    assert.equal(list.block.view.getUint32(immAt, false), 0x01020304);
    assert.equal(read(list, 0, "wr.rdma.remote_addr"), remote.addr);
    assert.equal(read(list, 0, "wr.rdma.rkey"), remote.rkey);
    list.encodeSend([{ inline: new Uint8Array(0) }], 1); // a zero-length inline SEND: no SGE
    assert.equal(inner(list, 0, "sg_list"), -1);
    assert.equal(read(list, 0, "num_sge"), 0);
    assert.equal(read(list, 0, "wr.rdma.remote_addr"), 0);
    // WR 1: a SEND of inline bytes, one SGE (lkey 0) pointing at the copy behind it
    assert.equal(read(list, 1, "wr_id"), 7);
    assert.equal(inner(list, 1, "next"), 2 * list.wrSize);
    assert.equal(read(list, 1, "opcode"), WrOpcode.SEND);
    assert.equal(read(list, 1, "send_flags"), SendFlags.INLINE);
    assert.equal(read(list, 1, "num_sge"), 1);
    const sg1 = inner(list, 1, "sg_list");
    assert.equal(sg1, sg0 + 2 * L.ibv_sge.size);
    const [addr, length, lkey] = sge(list, sg1);
    assert.deepEqual([addr - list.block.addrNumber, length, lkey], [sg1 + L.ibv_sge.size, 5, 0]);
    assert.deepEqual([...list.block.bytes.subarray(sg1 + L.ibv_sge.size).slice(0, 5)], [
      1,
      2,
      3,
      4,
      5,
    ]);
    // WR 2: the atomic's four fields; the end of the list
    assert.equal(inner(list, 2, "next"), -1);
    assert.equal(read(list, 2, "wr.atomic.remote_addr"), remote.addr);
    assert.equal(read(list, 2, "wr.atomic.rkey"), remote.rkey);
    assert.equal(read(list, 2, "wr.atomic.compare_add"), 3);
    const swapAt = 2 * list.wrSize + L.ibv_send_wr.fields["wr.atomic.swap"].offset;
    assert.equal(list.block.view.getBigUint64(swapAt, true), 2n ** 63n);
    assert.equal(list.sgeStart(2, true), sg1 + 2 * L.ibv_sge.size);

    // the same list again, one UD SEND with no SGE: nothing of the atomic or the links is left
    list.encodeSend([{ sg: [], ud: { ah, remoteQpn: 0x123456, remoteQkey: 0x11111111 } }], 1);
    assert.equal(inner(list, 0, "next"), -1);
    assert.equal(inner(list, 0, "sg_list"), -1);
    assert.equal(read(list, 0, "num_sge"), 0);
    assert.equal(read(list, 0, "send_flags"), SendFlags.SIGNALED);
    assert.equal(list.block.view.getUint32(immAt, false), 0);
    assert.equal(read(list, 0, "wr.ud.ah"), Number(ahBlock.addrNumber));
    assert.equal(read(list, 0, "wr.ud.remote_qpn"), 0x123456);
    assert.equal(read(list, 0, "wr.ud.remote_qkey"), 0x11111111);
    list.encodeSend([{ opcode: WrOpcode.RDMA_WRITE, sg: [], remote }], 1);
    // the atomic's swap lies past the RDMA member of the same union: zeroed, not left over
    assert.equal(read(list, 0, "wr.atomic.swap"), 0);
    assert.equal(read(list, 0, "wr.rdma.rkey"), remote.rkey);
    list.encodeSend([{ inline: new Uint8Array(0) }], 1); // a zero-length inline SEND: no SGE
    assert.equal(inner(list, 0, "sg_list"), -1);
    assert.equal(read(list, 0, "num_sge"), 0);
    assert.equal(read(list, 0, "wr.rdma.remote_addr"), 0);
  } finally {
    list.block.free();
    ahBlock.free();
  }
});

test("wr encoding: receive lists link, end and drop SGEs of the previous post without zeroing", () => {
  const L = layouts();
  const list = new WrList(L.ibv_recv_wr.size, 4, 8);
  try {
    list.encodeRecv(
      [{ wrId: 1, sg: [{ mr, length: 64 }] }, { wrId: 2, sg: [{ mr, offset: 64 }] }],
      2,
    );
    assert.equal(inner(list, 0, "next", false), list.wrSize);
    assert.equal(inner(list, 1, "next", false), -1);
    assert.deepEqual(sge(list, inner(list, 1, "sg_list", false)), [
      mr.addrNumber + 64,
      4032,
      0x1234,
    ]);
    assert.equal(list.sgeStart(1, false), inner(list, 1, "sg_list", false));
    list.encodeRecv([{ wrId: 3, sg: [{ mr }] }, { wrId: 4 }], 2);
    assert.equal(read(list, 1, "wr_id", false), 4);
    assert.equal(inner(list, 1, "sg_list", false), -1);
    assert.equal(read(list, 1, "num_sge", false), 0);
    assert.equal(inner(list, 0, "next", false), list.wrSize);
    list.encodeRecv([{ wrId: 5 }], 1);
    assert.equal(inner(list, 0, "next", false), -1);
  } finally {
    list.block.free();
  }
});

test("wr checks: an atomic's remote address is checked for alignment as a number too", () => {
  const pd = {} as ProtectionDomain;
  const q: SendLimits = { type: QpType.RC, pd, maxSendSge: 1, maxInlineData: 0 };
  const wr = (addr: number | bigint): SendWr => ({
    opcode: WrOpcode.ATOMIC_FETCH_AND_ADD,
    sg: [],
    remote: { addr, rkey: 1 },
    compareAdd: 1,
  });
  assert.match(sendWrProblem(wr(8196), q)!, /address 0x2004 is not 8-byte aligned/);
  assert.match(sendWrProblem(wr(8196n), q)!, /address 0x2004 is not 8-byte aligned/);
  assert.match(sendWrProblem(wr(8192), q)!, /exactly one SGE of 8 bytes/);
});
