/**
 * Work requests: one TypeScript shape per send opcode (its required fields required), the
 * checks made before the provider sees them, and the rules of every opcode in one table.
 *
 * Numbers: 64-bit values (`wrId`, remote addresses, atomic operands) are {@link U64}: a
 * `bigint`, or a non-negative safe-integer `number` (exact below 2^53, and allocation-free on
 * the hot path). They come back as `bigint` (`wc.wrId`, `mr.addr`), with a `...Number` accessor
 * where the hot path wants no BigInt (`wc.wrIdNumber`, `mr.addrNumber`).
 *
 * Flag masks (`flags`, `access`) are numbers: an OR of the bits of their table
 * (`SendFlags`, `AccessFlags`). Enumerations (`opcode`, QP types, states) use the library's own
 * enum types.
 *
 * @module
 */

import { AccessFlags, QpType, SendFlags, WrOpcode } from "../types/enums.ts";
import { isInstance } from "../ffi/resource.ts";
import { layouts } from "../ffi/native.ts";
import type { MemoryRegion } from "./mr.ts";
import type { MemoryWindow } from "./mw.ts";
import type { AddressHandle } from "./ah.ts";
import type { ProtectionDomain } from "./pd.ts";

/** A 64-bit unsigned value: a bigint, or a non-negative safe-integer number. */
export type U64 = bigint | number;

/**
 * A scatter/gather element: `length` bytes at `offset` of a registered MR (default: the rest of
 * the MR). A zero-length message has no SGE at all (`sg: []`).
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
  readonly addr: U64;
  /** Remote key (of an MR or MW). */
  readonly rkey: number;
}

/** Where a UD send goes. */
export interface UdDestination {
  /** The address handle of the destination. */
  readonly ah: AddressHandle;
  /** The remote QP number (0xffffff for a multicast group). */
  readonly remoteQpn: number;
  /** The remote Q_Key. */
  readonly remoteQkey: number;
}

/** A BIND_MW request's binding: the window, and the range of an MR it exposes. */
export interface MwBind {
  /** The memory window (type 2). */
  readonly mw: MemoryWindow;
  /** The MR whose range is bound (registered with `AccessFlags.MW_BIND`). */
  readonly mr: MemoryRegion;
  /** Offset of the range in the MR (default 0). */
  readonly offset?: number;
  /** Bytes of the range (default: to the end of the MR). */
  readonly length?: number;
  /** `AccessFlags` the window grants. */
  readonly access: number;
}

/** Fields every send work request has. */
export interface SendWrBase {
  /** Returned in the completion (default 0). */
  readonly wrId?: U64;
  /** An OR of `SendFlags` (default `SIGNALED`). */
  readonly flags?: number;
  /** The local data (none for a zero-length message). */
  readonly sg?: readonly Sge[];
}

/**
 * The payload field of the opcodes that carry data (SEND, SEND_WITH_IMM, SEND_WITH_INV,
 * RDMA_WRITE, RDMA_WRITE_WITH_IMM): the bytes themselves, sent inline, instead of `sg`.
 */
export interface InlineData {
  /**
   * The message as plain bytes, no MR needed: copied into the work request when it is posted
   * (or prepared) and sent with `IBV_SEND_INLINE`, which this field implies. At most the QP's
   * granted `maxInlineData` bytes; not together with `sg`. Empty bytes send a zero-length message.
   */
  readonly inline?: Uint8Array;
}

/** SEND (the default opcode). */
export interface SendOpWr extends SendWrBase, InlineData {
  /** `WrOpcode.SEND` (default). */
  readonly opcode?: typeof WrOpcode.SEND;
  /** UD destination (UD QPs only, required there). */
  readonly ud?: UdDestination;
}

/** SEND_WITH_IMM: a send carrying 32 bits of immediate data. */
export interface SendWithImmWr extends SendWrBase, InlineData {
  /** `WrOpcode.SEND_WITH_IMM`. */
  readonly opcode: typeof WrOpcode.SEND_WITH_IMM;
  /** Immediate data in host order (sent in network order). */
  readonly imm: number;
  /** UD destination (UD QPs only, required there). */
  readonly ud?: UdDestination;
}

/** SEND_WITH_INV: a send that invalidates an rkey at the receiver. */
export interface SendWithInvWr extends SendWrBase, InlineData {
  /** `WrOpcode.SEND_WITH_INV`. */
  readonly opcode: typeof WrOpcode.SEND_WITH_INV;
  /** The rkey the receiver invalidates. */
  readonly invalidateRkey: number;
}

/** RDMA_WRITE: local data written to remote memory. */
export interface RdmaWriteWr extends SendWrBase, InlineData {
  /** `WrOpcode.RDMA_WRITE`. */
  readonly opcode: typeof WrOpcode.RDMA_WRITE;
  /** Where the data goes. */
  readonly remote: Remote;
}

/** RDMA_WRITE_WITH_IMM: a write that also completes a receive at the peer with `imm`. */
export interface RdmaWriteWithImmWr extends SendWrBase, InlineData {
  /** `WrOpcode.RDMA_WRITE_WITH_IMM`. */
  readonly opcode: typeof WrOpcode.RDMA_WRITE_WITH_IMM;
  /** Where the data goes. */
  readonly remote: Remote;
  /** Immediate data in host order (sent in network order). */
  readonly imm: number;
}

/** RDMA_READ: remote memory read into the local SGEs (their MRs need LOCAL_WRITE). */
export interface RdmaReadWr extends SendWrBase {
  /** `WrOpcode.RDMA_READ`. */
  readonly opcode: typeof WrOpcode.RDMA_READ;
  /** Where the data comes from. */
  readonly remote: Remote;
}

/** ATOMIC_CMP_AND_SWP on an 8-byte aligned remote word; the old value lands in the one SGE. */
export interface AtomicCmpSwpWr extends SendWrBase {
  /** `WrOpcode.ATOMIC_CMP_AND_SWP`. */
  readonly opcode: typeof WrOpcode.ATOMIC_CMP_AND_SWP;
  /** The remote word (8-byte aligned). */
  readonly remote: Remote;
  /** The value compared with the remote word. */
  readonly compareAdd: U64;
  /** The value stored when they are equal. */
  readonly swap: U64;
}

/** ATOMIC_FETCH_AND_ADD on an 8-byte aligned remote word; the old value lands in the one SGE. */
export interface AtomicFetchAddWr extends SendWrBase {
  /** `WrOpcode.ATOMIC_FETCH_AND_ADD`. */
  readonly opcode: typeof WrOpcode.ATOMIC_FETCH_AND_ADD;
  /** The remote word (8-byte aligned). */
  readonly remote: Remote;
  /** The addend. */
  readonly compareAdd: U64;
}

/** LOCAL_INV: invalidates a local rkey (of a type-2 memory window). */
export interface LocalInvWr extends SendWrBase {
  /** `WrOpcode.LOCAL_INV`. */
  readonly opcode: typeof WrOpcode.LOCAL_INV;
  /** The rkey to invalidate. */
  readonly invalidateRkey: number;
}

/** BIND_MW: binds a type-2 memory window to a range of an MR; the window's `rkey` advances. */
export interface BindMwWr extends SendWrBase {
  /** `WrOpcode.BIND_MW`. */
  readonly opcode: typeof WrOpcode.BIND_MW;
  /** What to bind. */
  readonly bind: MwBind;
}

/** A send work request (`struct ibv_send_wr`): one shape per opcode. */
export type SendWr =
  | SendOpWr
  | SendWithImmWr
  | SendWithInvWr
  | RdmaWriteWr
  | RdmaWriteWithImmWr
  | RdmaReadWr
  | AtomicCmpSwpWr
  | AtomicFetchAddWr
  | LocalInvWr
  | BindMwWr;

/** A receive work request (`struct ibv_recv_wr`). */
export interface RecvWr {
  /** Returned in the completion (default 0). */
  readonly wrId?: U64;
  /** Where received data lands (none for zero-length messages). */
  readonly sg?: readonly Sge[];
}

/**
 * Every field any send WR may have: for the run-time checks of values from untyped callers and
 * for the encoder.
 */
export interface LooseSendWr {
  readonly imm?: number;
  readonly remote?: Remote;
  readonly compareAdd?: U64;
  readonly swap?: U64;
  readonly invalidateRkey?: number;
  readonly bind?: MwBind;
  readonly ud?: UdDestination;
  readonly inline?: unknown;
}

/** What a QP offers to the send-WR checks (one object per QP, made once). */
export interface SendLimits {
  /** The QP type. */
  readonly type: QpType;
  /** The PD of the QP. */
  readonly pd: ProtectionDomain;
  /** Granted send SGEs. */
  readonly maxSendSge: number;
  /** Granted inline bytes. */
  readonly maxInlineData: number;
}

/** The rules of one send opcode. */
export interface OpcodeRule {
  /** The C name, `IBV_WR_...`. */
  readonly name: string;
  /** QP types that may post it. */
  readonly qpTypes: readonly QpType[];
  /** Needs `remote`. */
  readonly remote: boolean;
  /** Needs `imm`. */
  readonly imm: boolean;
  /** An atomic: `compareAdd` (and `swap` for CMP_AND_SWP), one 8-byte SGE, aligned remote. */
  readonly atomic: "" | "cmp-swap" | "fetch-add";
  /** Needs `invalidateRkey`. */
  readonly invalidate: boolean;
  /** Needs `bind`. */
  readonly bind: boolean;
  /** The SGEs receive data (their MRs need LOCAL_WRITE). */
  readonly writesLocal: boolean;
  /** May be sent inline. */
  readonly inline: boolean;
  /** Carries a payload (SGEs or `inline` bytes); false for LOCAL_INV and BIND_MW. */
  readonly data: boolean;
  /** Carries a UD destination on UD QPs. */
  readonly ud: boolean;
}

const RC_UC = [QpType.RC, QpType.UC] as const;
const rule = (name: string, qpTypes: readonly QpType[], r: Partial<OpcodeRule>): OpcodeRule => ({
  name: `IBV_WR_${name}`,
  qpTypes,
  remote: false,
  imm: false,
  atomic: "",
  invalidate: false,
  bind: false,
  writesLocal: false,
  inline: true,
  data: true,
  ud: false,
  ...r,
});

/** Every send opcode this library posts, with its rules: the one place an opcode is described. */
export const OPCODE_RULES: ReadonlyMap<WrOpcode, OpcodeRule> = new Map<WrOpcode, OpcodeRule>([
  [WrOpcode.SEND, rule("SEND", [QpType.RC, QpType.UC, QpType.UD], { ud: true })],
  [
    WrOpcode.SEND_WITH_IMM,
    rule("SEND_WITH_IMM", [QpType.RC, QpType.UC, QpType.UD], { imm: true, ud: true }),
  ],
  [WrOpcode.SEND_WITH_INV, rule("SEND_WITH_INV", RC_UC, { invalidate: true })],
  [WrOpcode.RDMA_WRITE, rule("RDMA_WRITE", RC_UC, { remote: true })],
  [WrOpcode.RDMA_WRITE_WITH_IMM, rule("RDMA_WRITE_WITH_IMM", RC_UC, { remote: true, imm: true })],
  [
    WrOpcode.RDMA_READ,
    rule("RDMA_READ", [QpType.RC], { remote: true, writesLocal: true, inline: false }),
  ],
  [
    WrOpcode.ATOMIC_CMP_AND_SWP,
    rule("ATOMIC_CMP_AND_SWP", [QpType.RC], {
      remote: true,
      atomic: "cmp-swap",
      writesLocal: true,
      inline: false,
    }),
  ],
  [
    WrOpcode.ATOMIC_FETCH_AND_ADD,
    rule("ATOMIC_FETCH_AND_ADD", [QpType.RC], {
      remote: true,
      atomic: "fetch-add",
      writesLocal: true,
      inline: false,
    }),
  ],
  [WrOpcode.LOCAL_INV, rule("LOCAL_INV", RC_UC, { invalidate: true, data: false })],
  [WrOpcode.BIND_MW, rule("BIND_MW", RC_UC, { bind: true, data: false })],
]);

const QPT_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(QpType).map(([k, v]) => [v, `IBV_QPT_${k}`]),
);
const SEND_FLAG_MASK = Object.values(SendFlags).reduce((m: number, b) => m | b, 0);
const ACCESS_MASK = Object.values(AccessFlags).reduce((m: number, b) => m | b, 0);
const TWO_64 = 1n << 64n;
const NO_SGES: readonly Sge[] = [];

/** True for a valid {@link U64}. */
export function isU64(v: unknown): v is U64 {
  return typeof v === "bigint"
    ? v >= 0n && v < TWO_64
    : Number.isSafeInteger(v) && v as number >= 0;
}

/** True for an unsigned 32-bit integer. */
export function isU32(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 0xffffffff;
}

/** A 32-bit value with its bytes swapped: host order <-> the network order of `__be32` fields. */
export function bswap32(v: number): number {
  return (((v & 0xff) << 24) | ((v & 0xff00) << 8) | ((v >>> 8) & 0xff00) | (v >>> 24)) >>> 0;
}

function u64Problem(name: string, v: unknown): string | null {
  return isU64(v)
    ? null
    : `${name} must be a bigint or a non-negative safe integer, got ${show(v)}`;
}

function show(v: unknown): string {
  if (typeof v === "bigint") return `${v}n`;
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "object" && v !== null) return Array.isArray(v) ? "an array" : "an object";
  return String(v);
}

/** The bytes an SGE covers (after its checks). */
export function sgeLength(s: Sge): number {
  return s.length ?? s.mr.length - (s.offset ?? 0);
}

/** Checks one SGE against its MR and PD; returns the reason it is invalid, or null. */
export function sgeProblem(sge: Sge, pd: ProtectionDomain, needLocalWrite: boolean): string | null {
  if (typeof sge !== "object" || sge === null) return `an SGE must be an object, got ${show(sge)}`;
  const mr = sge.mr;
  if (!isInstance<MemoryRegion>(mr, "MemoryRegion")) {
    return "an SGE needs an MR made by this library (sge.mr)";
  }
  if (mr.closed) return "an SGE's MR is closed";
  if (mr.pd !== pd) return "an SGE's MR belongs to another PD";
  const offset = sge.offset ?? 0;
  // the offset first: the default length is computed from it
  if (!Number.isSafeInteger(offset) || offset < 0) {
    return `SGE offset ${show(offset)} must be a non-negative integer`;
  }
  const length = sge.length ?? mr.length - offset;
  if (!Number.isSafeInteger(length) || length < 0) {
    return `SGE length ${show(length)} must be a non-negative integer`;
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

function sgListProblem(
  sg: unknown,
  pd: ProtectionDomain,
  max: number,
  what: string,
  needLocalWrite: boolean,
): string | null {
  if (sg === undefined) return null;
  if (!Array.isArray(sg)) return `sg must be an array of SGEs, got ${show(sg)}`;
  if (sg.length > max) return `${sg.length} SGEs exceed the ${what} ${max}`;
  for (let i = 0; i < sg.length; i++) {
    const p = sgeProblem(sg[i], pd, needLocalWrite);
    if (p) return p;
  }
  return null;
}

function remoteProblem(name: string, r: unknown): string | null {
  if (typeof r !== "object" || r === null) return `${name} needs remote { addr, rkey }`;
  const { addr, rkey } = r as Remote;
  return u64Problem("remote.addr", addr) ??
    (isU32(rkey) ? null : `remote.rkey must be a 32-bit unsigned integer, got ${show(rkey)}`);
}

/** Returns why a send WR is invalid on a QP with `q`'s limits, or null. */
export function sendWrProblem(wr: SendWr, q: SendLimits): string | null {
  if (typeof wr !== "object" || wr === null) {
    return `a work request must be an object, got ${show(wr)}`;
  }
  const op = wr.opcode ?? WrOpcode.SEND;
  const r = OPCODE_RULES.get(op);
  if (!r) return `unknown opcode ${show(op)}`;
  if (!r.qpTypes.includes(q.type)) {
    return `${r.name} is not supported on ${QPT_NAMES[q.type] ?? `QP type ${q.type}`}`;
  }
  const w = wr as LooseSendWr;
  if (wr.wrId !== undefined && !isU64(wr.wrId)) return u64Problem("wrId", wr.wrId);
  const flags = wr.flags ?? SendFlags.SIGNALED;
  if (!Number.isInteger(flags) || flags < 0 || (flags & ~SEND_FLAG_MASK) !== 0) {
    return `flags must be an OR of SendFlags, got ${show(flags)}`;
  }
  const sgP = sgListProblem(wr.sg, q.pd, q.maxSendSge, "QP's granted max_send_sge", r.writesLocal);
  if (sgP) return sgP;
  const sg = wr.sg ?? NO_SGES;
  let total = 0;
  for (let i = 0; i < sg.length; i++) total += sgeLength(sg[i]);
  if (w.inline !== undefined) {
    const p = inlineProblem(r, w.inline, wr.sg, q.maxInlineData);
    if (p) return p;
  } else if ((flags & SendFlags.INLINE) !== 0) {
    if (!r.inline) return `${r.name} cannot be inline`;
    if (total > q.maxInlineData) {
      return `${total} inline bytes exceed the QP's granted max_inline_data ${q.maxInlineData}`;
    }
  }
  if (r.imm) {
    if (!isU32(w.imm)) return `${r.name} needs imm, a 32-bit unsigned integer`;
  } else if (w.imm !== undefined) {
    return "imm is only sent by SEND_WITH_IMM and RDMA_WRITE_WITH_IMM";
  }
  if (r.remote) {
    const p = remoteProblem(r.name, w.remote);
    if (p) return p;
  }
  if (r.atomic) {
    const addr = w.remote!.addr; // a number stays one: a check per post allocates nothing
    if (typeof addr === "bigint" ? addr % 8n !== 0n : addr % 8 !== 0) {
      return `atomic remote address 0x${addr.toString(16)} is not 8-byte aligned`;
    }
    if (sg.length !== 1 || total !== 8) return "an atomic needs exactly one SGE of 8 bytes";
    if (w.compareAdd === undefined) return `${r.name} needs compareAdd`;
    const p = u64Problem("compareAdd", w.compareAdd);
    if (p) return p;
    if (r.atomic === "cmp-swap") {
      if (w.swap === undefined) return "ATOMIC_CMP_AND_SWP needs swap";
      const s = u64Problem("swap", w.swap);
      if (s) return s;
    }
  }
  if (q.type === QpType.UD && r.ud) {
    const ud = w.ud;
    if (typeof ud !== "object" || ud === null) {
      return "a UD send needs ud { ah, remoteQpn, remoteQkey }";
    }
    if (!isInstance<AddressHandle>(ud.ah, "AddressHandle")) {
      return "ud.ah must be an AddressHandle made by this library";
    }
    if (ud.ah.closed) return "the UD address handle is closed";
    if (ud.ah.pd !== q.pd) return "the UD address handle belongs to another PD";
    if (!isU32(ud.remoteQpn) || ud.remoteQpn > 0xffffff) {
      return `ud.remoteQpn must be a 24-bit QP number, got ${show(ud.remoteQpn)}`;
    }
    if (!isU32(ud.remoteQkey)) {
      return `ud.remoteQkey must be a 32-bit Q_Key, got ${show(ud.remoteQkey)}`;
    }
  } else if (w.ud !== undefined) {
    return "ud is only sent by SEND and SEND_WITH_IMM on UD QPs";
  }
  if (r.bind) {
    const b = w.bind;
    if (typeof b !== "object" || b === null) {
      return "BIND_MW needs bind { mw, mr, offset, length, access }";
    }
    if (!isInstance<MemoryWindow>(b.mw, "MemoryWindow")) {
      return "bind.mw must be a MemoryWindow made by this library";
    }
    if (b.mw.closed) return "the memory window is closed";
    if (b.mw.pd !== q.pd) return "the memory window belongs to another PD";
    if (!isInstance<MemoryRegion>(b.mr, "MemoryRegion")) {
      return "bind.mr must be a MemoryRegion made by this library";
    }
    if (b.mr.closed) return "the MR to bind is closed";
    if ((b.mr.access & AccessFlags.MW_BIND) === 0) return "the MR to bind lacks IBV_ACCESS_MW_BIND";
    const off = b.offset ?? 0;
    // the offset first: the default length is computed from it
    const len = Number.isSafeInteger(off) ? b.length ?? b.mr.length - off : b.length;
    if (
      !Number.isSafeInteger(off) || !Number.isSafeInteger(len) || off < 0 || len! < 0 ||
      off + len! > b.mr.length
    ) {
      return `bind range [${show(off)}, +${show(len)}) is outside the MR (${b.mr.length} bytes)`;
    }
    if (!Number.isInteger(b.access) || b.access < 0 || (b.access & ~ACCESS_MASK) !== 0) {
      return `bind.access must be an OR of AccessFlags, got ${show(b.access)}`;
    }
  }
  if (r.invalidate && !isU32(w.invalidateRkey)) {
    return `${r.name} needs invalidateRkey, a 32-bit rkey`;
  }
  return null;
}

/** Why `inline` bytes cannot go with opcode rule `r` on a QP granting `maxInline` bytes, or null. */
function inlineProblem(
  r: OpcodeRule,
  bytes: unknown,
  sg: unknown,
  maxInline: number,
): string | null {
  if (!(bytes instanceof Uint8Array)) return `inline must be a Uint8Array, got ${show(bytes)}`;
  if (!r.data || !r.inline) return `${r.name} carries no inline data`;
  if (sg !== undefined) return "give the data either as sg or as inline bytes, not both";
  if (bytes.length > maxInline) {
    return `${bytes.length} inline bytes exceed the QP's granted max_inline_data ${maxInline}`;
  }
  return null;
}

/** Returns why a receive WR is invalid, or null. */
export function recvWrProblem(wr: RecvWr, pd: ProtectionDomain, maxSge: number): string | null {
  if (typeof wr !== "object" || wr === null) {
    return `a work request must be an object, got ${show(wr)}`;
  }
  if (wr.wrId !== undefined && !isU64(wr.wrId)) return u64Problem("wrId", wr.wrId);
  return sgListProblem(wr.sg, pd, maxSge, "granted max_recv_sge", true);
}

/**
 * The SGE slots of a native WR list that the first `count` WRs need (no allocation): one per
 * SGE, and for `inline` bytes one SGE pointing at them plus the slots that hold the bytes.
 */
export function countSges(
  wrs: readonly { readonly sg?: readonly Sge[]; readonly inline?: Uint8Array }[],
  count = wrs.length,
): number {
  let n = 0;
  for (let i = 0; i < count; i++) {
    const w = wrs[i];
    n += w.inline !== undefined ? inlineSlots(w.inline.length) : w.sg?.length ?? 0;
  }
  return n;
}

/**
 * SGE slots (`sizeof(struct ibv_sge)` bytes each) of `length` inline bytes: the SGE that points
 * at them, and the bytes.
 */
export function inlineSlots(length: number): number {
  return length === 0 ? 0 : 1 + Math.ceil(length / layouts().ibv_sge.size);
}
