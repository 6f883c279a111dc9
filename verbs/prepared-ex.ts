/**
 * Send work requests prepared once on an extended QP (`qpx.prepareSendEx`): one prepared FFI
 * call per `ibv_wr_*` builder and setter, their SGE arrays and inline bytes in native memory.
 * `post()` replays the whole batch (`ibv_wr_start` ... `ibv_wr_complete`) and allocates nothing;
 * the setters change one WR in place between posts.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { nativeError } from "../ffi/errors.ts";
import { NativeBlock, setU64 } from "../ffi/memory.ts";
import { checkConstruct, NativeResource } from "../ffi/resource.ts";
import { QpType, SendFlags, WrOpcode } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { PostError } from "./post-errors.ts";
import { builderArgs, builderOf, type Call, type WrCalls, type WrOp } from "./_wr-calls.ts";
import { writeSges } from "./_wr-list.ts";
import { bswap32, isU32, isU64, OPCODE_RULES, sgeLength, type U64 } from "./wr.ts";
import type { MemoryRegion } from "./mr.ts";
import type { QueuePairEx, SendWrEx } from "./qp-ex.ts";

const SEND_FLAG_MASK = Object.values(SendFlags).reduce((m: number, b) => m | b, 0);

/** One WR of a prepared batch: its calls and what its updates need. */
interface Step {
  readonly op: WrOpcode;
  wrId: U64;
  flags: number;
  readonly builder: Call;
  readonly ud: Call | null;
  readonly srqn: Call | null;
  readonly data: Call | null;
  /** SGE list: byte offset in the block, MRs and offsets. */
  readonly sgeAt: number;
  readonly mrs: MemoryRegion[];
  readonly offsets: number[];
  /** Inline bytes: byte offset and capacity in the block (-1 when none). */
  readonly inlineAt: number;
  /** INLINE flag with SGEs: views of the SGE bytes copied at each post. */
  gather: Uint8Array[] | null;
}

/** Where one WR's SGE array and inline bytes sit in the batch's native block. */
interface Place {
  readonly sgeAt: number;
  readonly inlineAt: number;
}

/**
 * Send WRs prepared on an extended QP (`qpx.prepareSendEx`): one prepared call per builder and
 * setter, SGE arrays and inline bytes in native memory. `post()` replays the batch with one
 * FFI call per call and allocates nothing; the setters update it in place.
 */
export class PreparedSendEx extends NativeResource {
  /** Number of WRs in the batch. */
  readonly length: number;
  readonly #qp: QueuePairEx;
  readonly #wr: WrCalls;
  readonly #checkPost: () => void;
  readonly #steps: Step[] = [];
  readonly #block: NativeBlock;
  readonly #start: Call;
  readonly #complete: Call;
  readonly #abort: Call;
  readonly #calls: Call[] = [];
  readonly #maxInline: number;

  /**
   * Not for direct use: `qpx.prepareSendEx()` checks the WRs and makes one; `checkPost` refuses
   * a post the QP cannot take now.
   */
  constructor(
    qp: QueuePairEx,
    wrs: readonly SendWrEx[],
    wr: WrCalls,
    checkPost: () => void,
    token: symbol,
  ) {
    checkConstruct(token, "prepared batches are made by qpx.prepareSendEx()");
    super("PreparedSendEx", [qp]);
    this.#qp = qp;
    this.#wr = wr;
    this.#checkPost = checkPost;
    this.length = wrs.length;
    this.#maxInline = qp.cap.maxInlineData;
    // block: each WR's SGE array, then its inline area (maxInlineData bytes)
    const S = layouts().ibv_sge.size;
    let size = 0;
    const places = wrs.map((w): Place => {
      const inline = "inline" in w && w.inline !== undefined ||
        ((w.flags ?? 0) & SendFlags.INLINE) !== 0;
      const sgeAt = size;
      size += inline ? 0 : S * (w.sg?.length ?? 0);
      const inlineAt = inline ? size : -1;
      if (inline) size += Math.max(8, this.#maxInline + 7 & ~7);
      return { sgeAt, inlineAt };
    });
    this.#block = new NativeBlock(Math.max(size, 8), 64);
    try {
      this.#start = this.#prepare("wr_start", []);
      this.#complete = this.#prepare("wr_complete", []);
      this.#abort = this.#prepare("wr_abort", []);
      wrs.forEach((w, i) => this.#steps.push(this.#step(w, places[i])));
    } catch (e) {
      this.close();
      throw e;
    }
  }

  #prepare(op: WrOp, args: unknown[]): Call {
    const fn = this.#wr.fn(op);
    if (fn === null) throw nativeError(`ibv_${op}`, Errno.EOPNOTSUPP, "not provided");
    const spec = IBVERBS_OPS[op];
    const c = native().prepareCall(fn, spec, [this.#wr.qpEx, ...args] as never) as Call;
    this.#calls.push(c);
    return c;
  }

  #step(wr: SendWrEx, at: Place): Step {
    const op = wr.opcode ?? WrOpcode.SEND;
    const rule = OPCODE_RULES.get(op)!;
    const inline = "inline" in wr ? wr.inline : undefined;
    const args: unknown[] = [];
    const builder = this.#prepare(builderOf(op), args.slice(0, builderArgs(op, wr, args)));
    const type = this.#qp.type;
    const ud = "ud" in wr && wr.ud && rule.ud && type === QpType.UD
      ? this.#prepare("wr_set_ud_addr", [wr.ud.ah.ptr, wr.ud.remoteQpn, wr.ud.remoteQkey])
      : null;
    const srqn = type === QpType.XRC_SEND ? this.#prepare("wr_set_xrc_srqn", [wr.xrcSrqn!]) : null;
    let flags = wr.flags ?? SendFlags.SIGNALED;
    const sg = inline === undefined ? wr.sg ?? [] : [];
    let data: Call | null = null;
    let gather: Uint8Array[] | null = null;
    if (inline !== undefined) {
      flags |= SendFlags.INLINE;
      this.#block.bytes.set(inline, at.inlineAt);
      data = this.#prepare("wr_set_inline_data", [this.#block.at(at.inlineAt), inline.length]);
    } else if (at.inlineAt >= 0) {
      gather = sg.map((s) => s.mr.buffer.subarray(s.offset ?? 0, (s.offset ?? 0) + sgeLength(s)));
      const total = gather.reduce((t, g) => t + g.length, 0);
      data = this.#prepare("wr_set_inline_data", [this.#block.at(at.inlineAt), total]);
    } else if (sg.length > 0) {
      writeSges(this.#block.view, at.sgeAt, sg);
      data = this.#prepare("wr_set_sge_list", [sg.length, this.#block.at(at.sgeAt)]);
    }
    return {
      op,
      wrId: wr.wrId ?? 0,
      flags,
      builder,
      ud,
      srqn,
      data,
      sgeAt: at.sgeAt,
      mrs: sg.map((s) => s.mr),
      offsets: sg.map((s) => s.offset ?? 0),
      inlineAt: at.inlineAt,
      gather,
    };
  }

  /** Posts the whole batch again (`ibv_wr_start` ... `ibv_wr_complete`); allocates nothing. */
  post(): void {
    if (this.closed) this.assertOpen();
    this.#checkPost();
    const steps = this.#steps;
    const wr = this.#wr;
    this.#start.call();
    try {
      for (let i = 0; i < steps.length; i++) {
        const s = steps[i];
        wr.wrId = s.wrId;
        wr.wrFlags = s.flags;
        s.builder.call();
        if (s.ud !== null) s.ud.call();
        if (s.srqn !== null) s.srqn.call();
        if (s.gather !== null) {
          let at = s.inlineAt;
          const g = s.gather;
          for (let j = 0; j < g.length; j++) {
            this.#block.bytes.set(g[j], at);
            at += g[j].length;
          }
        }
        if (s.data !== null) s.data.call();
      }
    } catch (e) {
      this.#abort.call();
      throw e;
    }
    const rc = this.#complete.call() as number;
    if (rc !== 0) throw new PostError("ibv_wr_complete", Math.abs(rc), 0);
  }

  #at(i: number): Step {
    if (!Number.isInteger(i) || i < 0 || i >= this.length) {
      throw new InvalidArgumentError(`work request index ${i} is outside 0..${this.length - 1}`);
    }
    this.assertOpen();
    return this.#steps[i];
  }

  /** Sets the wr_id of WR `i`. */
  setWrId(i: number, wrId: U64): void {
    const s = this.#at(i);
    if (!isU64(wrId)) throw new InvalidArgumentError(`wrId must be a U64, got ${wrId}`);
    s.wrId = wrId;
  }

  /** Sets the send flags of WR `i` (INLINE stays as prepared). */
  setFlags(i: number, flags: number): void {
    const s = this.#at(i);
    if (!Number.isInteger(flags) || flags < 0 || (flags & ~SEND_FLAG_MASK) !== 0) {
      throw new InvalidArgumentError(`flags must be an OR of SendFlags, got ${flags}`);
    }
    s.flags = (flags & ~SendFlags.INLINE) | (s.flags & SendFlags.INLINE);
  }

  #remoteStep(i: number, what: string): Step {
    const s = this.#at(i);
    if (!OPCODE_RULES.get(s.op)!.remote) {
      throw new InvalidArgumentError(`${what}: work request ${i} has no remote address`);
    }
    return s;
  }

  /** Sets the remote address of an RDMA or atomic WR `i` (atomics: 8-byte aligned). */
  setRemoteAddr(i: number, addr: U64): void {
    const s = this.#remoteStep(i, "setRemoteAddr");
    if (!isU64(addr)) throw new InvalidArgumentError(`remote address must be a U64, got ${addr}`);
    if (OPCODE_RULES.get(s.op)!.atomic && BigInt(addr) % 8n !== 0n) {
      throw new InvalidArgumentError("atomic remote address must be 8-byte aligned");
    }
    s.builder.setArg(2, addr);
  }

  /** Sets the rkey of an RDMA or atomic WR `i`. */
  setRkey(i: number, rkey: number): void {
    const s = this.#remoteStep(i, "setRkey");
    if (!isU32(rkey)) throw new InvalidArgumentError(`rkey must be a u32, got ${rkey}`);
    s.builder.setArg(1, rkey);
  }

  /** Sets the immediate data (host order) of a SEND_WITH_IMM or RDMA_WRITE_WITH_IMM WR `i`. */
  setImm(i: number, imm: number): void {
    const s = this.#at(i);
    if (!isU32(imm)) throw new InvalidArgumentError(`imm must be a u32, got ${imm}`);
    if (s.op === WrOpcode.SEND_WITH_IMM) s.builder.setArg(1, bswap32(imm));
    else if (s.op === WrOpcode.RDMA_WRITE_WITH_IMM) s.builder.setArg(3, bswap32(imm));
    else throw new InvalidArgumentError(`setImm: work request ${i} carries no immediate data`);
  }

  /** Sets the compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand of WR `i`. */
  setCompareAdd(i: number, v: U64): void {
    const s = this.#at(i);
    if (!OPCODE_RULES.get(s.op)!.atomic) throw new InvalidArgumentError(`WR ${i} is no atomic`);
    if (!isU64(v)) throw new InvalidArgumentError(`compareAdd must be a U64, got ${v}`);
    s.builder.setArg(3, v);
  }

  /** Sets the swap operand of a CMP_AND_SWP WR `i`. */
  setSwap(i: number, v: U64): void {
    const s = this.#at(i);
    if (s.op !== WrOpcode.ATOMIC_CMP_AND_SWP) {
      throw new InvalidArgumentError(`WR ${i} is no CMP_AND_SWP`);
    }
    if (!isU64(v)) throw new InvalidArgumentError(`swap must be a U64, got ${v}`);
    s.builder.setArg(4, v);
  }

  #sge(i: number, j: number): [Step, number] {
    const s = this.#at(i);
    if (s.gather !== null || !Number.isInteger(j) || j < 0 || j >= s.mrs.length) {
      throw new InvalidArgumentError(`work request ${i} has no SGE ${j} to update`);
    }
    return [s, s.sgeAt + j * layouts().ibv_sge.size];
  }

  /** Sets the length of SGE `j` of WR `i`; it must stay inside its MR and not be 0. */
  setLength(i: number, j: number, length: number): void {
    const [s, at] = this.#sge(i, j);
    const mr = s.mrs[j];
    if (!Number.isInteger(length) || length <= 0 || s.offsets[j] + length > mr.length) {
      throw new InvalidArgumentError(
        `SGE length ${length} at offset ${s.offsets[j]} is outside its MR (${mr.length})`,
      );
    }
    this.#block.view.setUint32(at + layouts().ibv_sge.fields.length.offset, length, true);
  }

  /** Moves SGE `j` of WR `i` to `offset` in its MR (its length must still fit). */
  setOffset(i: number, j: number, offset: number): void {
    const [s, at] = this.#sge(i, j);
    const F = layouts().ibv_sge.fields;
    const mr = s.mrs[j];
    const length = this.#block.view.getUint32(at + F.length.offset, true);
    if (!Number.isInteger(offset) || offset < 0 || offset + length > mr.length) {
      throw new InvalidArgumentError(`SGE offset ${offset}+${length} is outside its MR`);
    }
    s.offsets[j] = offset;
    setU64(this.#block.view, at + F.addr.offset, mr.addrNumber + offset);
  }

  /** Replaces the inline bytes of WR `i` (prepared with `inline`; at most `maxInlineData`). */
  setInline(i: number, bytes: Uint8Array): void {
    const s = this.#at(i);
    if (s.inlineAt < 0 || s.gather !== null) {
      throw new InvalidArgumentError(`work request ${i} was not prepared with inline bytes`);
    }
    if (!(bytes instanceof Uint8Array) || bytes.length > this.#maxInline) {
      throw new InvalidArgumentError(
        `inline data must be a Uint8Array of at most ${this.#maxInline} bytes`,
      );
    }
    this.#block.bytes.set(bytes, s.inlineAt);
    s.data!.setArg(2, bytes.length);
  }

  /** Releases the prepared calls and native memory (called once by `close()`). */
  protected destroy(): void {
    for (const c of this.#calls) c.free();
    this.#calls.length = 0;
    this.#block?.free();
  }
}
