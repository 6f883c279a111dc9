/**
 * Protection domains: the owner of MRs, MWs, QPs, SRQs and AHs.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { AccessFlags, type MwType } from "../types/enums.ts";
import { asBytes, type Bytes } from "../types/bytes.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { throwErrno, throwReturned } from "../ffi/errors.ts";
import { checkResource, NativeResource } from "../ffi/resource.ts";
import { type MemoryRegion, registerArray, registerBlock, type RegisterOptions } from "./mr.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { MemoryWindow } from "./mw.ts";
import { QueuePair } from "./qp.ts";
import type { QpInit } from "./qp-init.ts";
import { SharedReceiveQueue, type SrqInit } from "./srq.ts";
import { type AddressHandle, type AhAttr, createAh, createAhFromWc } from "./ah.ts";
import { Context } from "./context.ts";
import type { WorkCompletion } from "./wc.ts";
import { checkInteger, checkObject } from "../types/check.ts";

/** A protection domain (`ibv_alloc_pd`). */
export class ProtectionDomain extends NativeResource {
  /** The `struct ibv_pd *`. */
  readonly ptr: NativePointer;
  /** The context it was allocated on. */
  readonly context: Context;

  /** Allocates a PD; prefer `context.allocPd()`. */
  constructor(context: Context) {
    checkResource(context, Context, "context");
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

  /** Allocates a memory window (type 2 by default). */
  allocMw(type?: MwType): MemoryWindow {
    this.assertOpen();
    return new MemoryWindow(this, type);
  }

  /** Creates a queue pair; the real capabilities granted are in `qp.cap`. */
  createQp(init: QpInit): QueuePair {
    this.assertOpen();
    return new QueuePair(this, init);
  }

  /** Creates a shared receive queue. */
  createSrq(init: SrqInit): SharedReceiveQueue {
    this.assertOpen();
    return new SharedReceiveQueue(this, init);
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
