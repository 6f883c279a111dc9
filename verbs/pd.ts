/**
 * Protection domains: the owner of MRs, MWs, QPs, SRQs and AHs.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { AccessFlags, AdviseMrAdvice, AdviseMrFlags, type MwType } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { asBytes, type Bytes } from "../types/bytes.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { nativeError, throwErrno, throwReturned } from "../ffi/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { type Sge, sgeLength, sgeProblem } from "./wr.ts";
import { checkConstruct, checkResource, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import {
  allocNullMr,
  type DmabufRange,
  type MemoryRegion,
  registerArray,
  registerBlock,
  registerDmabuf,
  type RegisterOptions,
} from "./mr.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { MemoryWindow } from "./mw.ts";
import { createQp, type QueuePair } from "./qp.ts";
import { createQpEx, type QpExInit, type QueuePairEx } from "./qp-ex.ts";
import type { QpInit } from "./qp-init.ts";
import { SharedReceiveQueue, type SrqInit } from "./srq.ts";
import { type AddressHandle, type AhAttr, createAh, createAhFromWc } from "./ah.ts";
import type { Context } from "./context.ts";
import type { WorkCompletion } from "./wc.ts";
import { checkInteger, checkObject } from "../types/check.ts";

/** A protection domain (`ibv_alloc_pd`). */
export class ProtectionDomain extends NativeResource {
  /** The `struct ibv_pd *`. */
  readonly ptr: NativePointer;
  /** The context it was allocated on. */
  readonly context: Context;

  /** Not for direct use: `context.allocPd()` makes one. */
  constructor(context: Context, token: symbol) {
    checkConstruct(token, "PDs are made by context.allocPd()");
    checkResource<Context>(context, "Context", "context");
    const pd = native().ibverbs.ibv_alloc_pd(context.ptr);
    if (pd === null) throwErrno("ibv_alloc_pd");
    super("ProtectionDomain", [context]);
    this.ptr = pd;
    this.context = context;
  }

  /**
   * Allocates `length` bytes of page-aligned native memory and registers it. The MR
   * owns the memory (freed by `close()`); `mr.buffer` views it zero-copy.
   */
  allocBuffer(length: number, options: RegisterOptions = {}): MemoryRegion {
    this.assertOpen();
    checkInteger("buffer length", length, 1, Number.MAX_SAFE_INTEGER);
    const o = registerOptions(options);
    return registerBlock(this, new NativeBlock(length, 4096), o.access, o.iova);
  }

  /**
   * Registers caller-provided memory. Rules: the array must stay alive and in place
   * while registered (the MR holds a reference); it must not be a resizable or
   * transferable (detachable) buffer; its bytes are read and written by the device
   * at any time while work requests use them.
   */
  registerMemory(data: Bytes, options: RegisterOptions = {}): MemoryRegion {
    this.assertOpen();
    const array = asBytes(data, "registerMemory");
    if (array.byteLength === 0) throw new InvalidArgumentError("cannot register 0 bytes");
    const buf = array.buffer as ArrayBuffer & { resizable?: boolean; growable?: boolean };
    if (buf.resizable || buf.growable) {
      throw new InvalidArgumentError("cannot register a resizable or growable buffer");
    }
    const o = registerOptions(options);
    return registerArray(this, array, o.access, o.iova);
  }

  /**
   * `ibv_reg_dmabuf_mr`: registers a range of a dma-buf (a GPU buffer, a udmabuf, ...) by its
   * file descriptor. The MR has no `buffer`; its SGE addresses are I/O virtual addresses from
   * `range.iova`. Providers without it raise UnsupportedError.
   */
  registerDmabuf(range: DmabufRange, options: { readonly access?: number } = {}): MemoryRegion {
    this.assertOpen();
    if (typeof range !== "object" || range === null) {
      throw new InvalidArgumentError("registerDmabuf: range must be { fd, offset, length, iova }");
    }
    if (!Number.isInteger(range.fd) || range.fd < 0) {
      throw new InvalidArgumentError(
        `registerDmabuf: fd must be a file descriptor, got ${range.fd}`,
      );
    }
    if (!Number.isSafeInteger(range.length) || range.length <= 0) {
      throw new InvalidArgumentError(
        `registerDmabuf: length must be positive, got ${range.length}`,
      );
    }
    for (const k of ["offset", "iova"] as const) {
      const v = range[k];
      if (
        v !== undefined && !(typeof v === "bigint" ? v >= 0n : Number.isSafeInteger(v) && v >= 0)
      ) {
        throw new InvalidArgumentError(`registerDmabuf: ${k} must be a U64, got ${v}`);
      }
    }
    const o = registerOptions(options);
    return registerDmabuf(this, range, o.access);
  }

  /**
   * `ibv_alloc_null_mr`: an MR whose lkey reads zeros and drops writes (padding, discarding
   * data). Providers without it raise UnsupportedError.
   */
  allocNullMr(): MemoryRegion {
    this.assertOpen();
    return allocNullMr(this);
  }

  /**
   * `ibv_advise_mr`: asks the provider to prefetch the pages of on-demand-paging MRs behind
   * `sg` (`AdviseMrAdvice.PREFETCH`, `PREFETCH_WRITE`, `PREFETCH_NO_FAULT`; `flags`:
   * `AdviseMrFlags.FLUSH` waits for it). Providers without it raise UnsupportedError.
   */
  adviseMr(advice: AdviseMrAdvice, sg: readonly Sge[], flags = 0): void {
    this.assertOpen();
    if (!(Object.values(AdviseMrAdvice) as number[]).includes(advice)) {
      throw new InvalidArgumentError(`adviseMr: unknown advice ${advice}`);
    }
    if (!Number.isInteger(flags) || flags < 0 || (flags & ~AdviseMrFlags.FLUSH) !== 0) {
      throw new InvalidArgumentError(`adviseMr: flags must be AdviseMrFlags bits, got ${flags}`);
    }
    if (!Array.isArray(sg) || sg.length === 0) {
      throw new InvalidArgumentError("adviseMr: sg must be a non-empty array of SGEs");
    }
    for (const s of sg) {
      const p = sgeProblem(s, this, false);
      if (p) throw new InvalidArgumentError(`adviseMr: ${p}`);
    }
    const n = native();
    const fn = this.context.extendedOp("advise_mr");
    if (!fn) throw nativeError("ibv_advise_mr", Errno.EOPNOTSUPP, "no extended context");
    const S = layouts().ibv_sge;
    const rc = NativeBlock.with(S.size * sg.length, (b) => {
      sg.forEach((s, j) => {
        const at = j * S.size;
        b.view.setBigUint64(
          at + S.fields.addr.offset,
          BigInt(s.mr.addrNumber + (s.offset ?? 0)),
          true,
        );
        b.view.setUint32(at + S.fields.length.offset, sgeLength(s), true);
        b.view.setUint32(at + S.fields.lkey.offset, s.mr.lkey, true);
      });
      return n.fnPointer(fn, IBVERBS_OPS.advise_mr)(this.ptr, advice, flags, b.ptr, sg.length);
    });
    if (rc !== 0) throwReturned("ibv_advise_mr", rc, this.context.deviceName);
  }

  /** Allocates a memory window (type 2 by default). */
  allocMw(type?: MwType): MemoryWindow {
    this.assertOpen();
    return new MemoryWindow(this, type, CONSTRUCT);
  }

  /** Creates a queue pair; the real capabilities granted are in `qp.cap`. */
  createQp(init: QpInit): QueuePair {
    this.assertOpen();
    return createQp(this, init);
  }

  /**
   * `ibv_create_qp_ex` with `send_ops_flags`: a QP that also posts through the `ibv_wr_*` API
   * (`postSendEx`, `prepareSendEx`, `startBatch` ...). Providers without it raise UnsupportedError.
   */
  createQpEx(init: QpExInit): QueuePairEx {
    this.assertOpen();
    return createQpEx(this, init);
  }

  /** Creates a shared receive queue. */
  createSrq(init: SrqInit): SharedReceiveQueue {
    this.assertOpen();
    return new SharedReceiveQueue(this, init, CONSTRUCT);
  }

  /** Creates an address handle from attributes. */
  createAh(attr: AhAttr): AddressHandle {
    this.assertOpen();
    return createAh(this, attr);
  }

  /**
   * Creates an address handle that replies to the sender of a received UD completion;
   * `grh` is the receive buffer's first 40 bytes (MR and offset of the receive SGE).
   */
  createAhFromWc(
    wc: WorkCompletion,
    grh: { mr: MemoryRegion; offset?: number },
    port: number,
  ): AddressHandle {
    this.assertOpen();
    return createAhFromWc(this, wc, grh, port);
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    const rc = native().ibverbs.ibv_dealloc_pd(this.ptr);
    if (rc !== 0) throwReturned("ibv_dealloc_pd", rc);
  }
}

function registerOptions(o: RegisterOptions): { access: number; iova: RegisterOptions["iova"] } {
  checkObject("register options", o);
  return { access: o.access ?? AccessFlags.LOCAL_WRITE, iova: o.iova };
}
