/**
 * Shared receive queues: one pool of receive WRs for many QPs, with a limit
 * that raises `SRQ_LIMIT_REACHED` as an async event when armed.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { SrqAttrMask } from "../types/enums.ts";
import { throwErrno, throwReturned } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, checkResource, NativeResource } from "../ffi/resource.ts";
import { SrqRecvPoster } from "./_post.ts";
import { InvalidWorkRequestError } from "./post-errors.ts";
import { NO_STATE_CHECK, type PreparedRecv, prepareRecv } from "./prepared.ts";
import type { RecvWr } from "./wr.ts";
import type { Context } from "./context.ts";
import { forgetObject, rememberObject } from "./_objects.ts";
import type { ProtectionDomain } from "./pd.ts";
import { checkInteger, checkObject } from "../types/check.ts";

/** How to create an SRQ. */
export interface SrqInit {
  /** Number of receive WRs it holds. */
  readonly maxWr: number;
  /** SGEs per receive WR (default 1). */
  readonly maxSge?: number;
  /** Initial limit (0: not armed). */
  readonly limit?: number;
}

/** `struct ibv_srq_attr`. */
export interface SrqAttr {
  /** Receive WRs it holds. */
  readonly maxWr: number;
  /** SGEs per WR. */
  readonly maxSge: number;
  /** The armed limit (0 when not armed or after it fired). */
  readonly limit: number;
}

/** A shared receive queue. */
export class SharedReceiveQueue extends NativeResource {
  /** The `struct ibv_srq *`. */
  readonly ptr: NativePointer;
  /** Its PD. */
  readonly pd: ProtectionDomain;
  /** Its context. */
  readonly context: Context;
  /** The granted sizes at creation. */
  readonly maxWr: number;
  /** SGEs per receive WR as granted. */
  readonly maxSge: number;
  readonly #attr: NativeBlock;
  readonly #recv: SrqRecvPoster;

  /** Not for direct use: `pd.createSrq()` makes one. */
  constructor(pd: ProtectionDomain, init: SrqInit, token: symbol) {
    checkConstruct(token, "SRQs are made by pd.createSrq()");
    checkResource<ProtectionDomain>(pd, "ProtectionDomain", "pd");
    checkObject("SRQ init", init);
    const u32 = (name: string, v: number | undefined, dflt: number, min: number) =>
      v === undefined ? dflt : checkInteger(`SRQ ${name}`, v, min, 0x7fffffff);
    const reqWr = u32("maxWr", init.maxWr, 0, 1);
    const reqSge = u32("maxSge", init.maxSge, 1, 1);
    const reqLimit = u32("limit", init.limit, 0, 0);
    const n = native();
    const L = layouts();
    const F = L.ibv_srq_init_attr.fields;
    const a = new NativeBlock(L.ibv_srq_init_attr.size, 8);
    let srq: NativePointer | null;
    let maxWr: number, maxSge: number;
    try {
      a.view.setUint32(F["attr.max_wr"].offset, reqWr, true);
      a.view.setUint32(F["attr.max_sge"].offset, reqSge, true);
      a.view.setUint32(F["attr.srq_limit"].offset, reqLimit, true);
      srq = n.ibverbs.ibv_create_srq(pd.ptr, a.ptr);
      if (srq === null) throwErrno("ibv_create_srq");
      maxWr = a.view.getUint32(F["attr.max_wr"].offset, true);
      maxSge = a.view.getUint32(F["attr.max_sge"].offset, true);
    } finally {
      a.free();
    }
    super("SharedReceiveQueue", [pd]);
    this.ptr = srq;
    this.pd = pd;
    this.context = pd.context;
    this.maxWr = maxWr;
    this.maxSge = maxSge;
    this.#attr = new NativeBlock(L.ibv_srq_attr.size, 8);
    this.#recv = new SrqRecvPoster(
      this.pd,
      this.maxSge,
      pd.context.op("post_srq_recv")!,
      srq,
      L.ibv_recv_wr.size,
    );
    rememberObject(pd.context, srq, this);
  }

  /** Checks and posts receive WRs (WRs before an invalid one are posted). */
  postRecv(wrs: RecvWr | readonly RecvWr[]): void {
    if (this.closed) this.assertOpen();
    this.#recv.post(wrs);
  }

  /** Builds receive WRs once in native memory for repeated posting. */
  prepareRecv(wrs: RecvWr | readonly RecvWr[]): PreparedRecv {
    this.assertOpen();
    const list: readonly RecvWr[] = Array.isArray(wrs) ? wrs : [wrs as RecvWr];
    list.forEach((wr, i) => {
      const p = this.#recv.problem(wr);
      if (p) throw new InvalidWorkRequestError("prepareRecv", i, p);
    });
    return prepareRecv(this, "post_srq_recv", list, NO_STATE_CHECK);
  }

  /**
   * Arms the limit: when fewer than `limit` WRs remain, the device raises
   * `SRQ_LIMIT_REACHED` once (an async event) and disarms it.
   */
  setLimit(limit: number): void {
    this.assertOpen();
    checkInteger("SRQ limit", limit, 0, 0x7fffffff);
    const F = layouts().ibv_srq_attr.fields;
    this.#attr.clear();
    this.#attr.view.setUint32(F.srq_limit.offset, limit, true);
    const rc = native().ibverbs.ibv_modify_srq(this.ptr, this.#attr.ptr, SrqAttrMask.LIMIT);
    if (rc !== 0) throwReturned("ibv_modify_srq", rc, `limit ${limit}`);
  }

  /** Resizes the SRQ (`IBV_SRQ_MAX_WR`), where the provider supports it. */
  resize(maxWr: number): void {
    this.assertOpen();
    checkInteger("SRQ maxWr", maxWr, 1, 0x7fffffff);
    const F = layouts().ibv_srq_attr.fields;
    this.#attr.clear();
    this.#attr.view.setUint32(F.max_wr.offset, maxWr, true);
    const rc = native().ibverbs.ibv_modify_srq(this.ptr, this.#attr.ptr, SrqAttrMask.MAX_WR);
    if (rc !== 0) throwReturned("ibv_modify_srq", rc, `max_wr ${maxWr}`);
  }

  /** `ibv_query_srq`. */
  query(): SrqAttr {
    this.assertOpen();
    const F = layouts().ibv_srq_attr.fields;
    const rc = native().ibverbs.ibv_query_srq(this.ptr, this.#attr.ptr);
    if (rc !== 0) throwReturned("ibv_query_srq", rc);
    const v = this.#attr.view;
    return {
      maxWr: v.getUint32(F.max_wr.offset, true),
      maxSge: v.getUint32(F.max_sge.offset, true),
      limit: v.getUint32(F.srq_limit.offset, true),
    };
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    const n = native();
    forgetObject(this.context, this.ptr);
    const rc = n.ibverbs.ibv_destroy_srq(this.ptr);
    this.#recv.free();
    this.#attr.free();
    if (rc !== 0) throwReturned("ibv_destroy_srq", rc);
  }
}
