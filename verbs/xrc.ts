/**
 * XRC (eXtended Reliable Connected transport): an XRC domain (`ibv_open_xrcd`) holds XRC SRQs
 * (`ibv_create_srq_ex`, type XRC) and XRC receive QPs (`ibv_create_qp_ex` type XRC_RECV, or
 * `ibv_open_qp` to share one across processes); a sender's XRC_SEND QP
 * (`pd.createQpEx({ type: QpType.XRC_SEND, ... })`) reaches any SRQ of the remote domain by its
 * number (`xrcSrqn` of each work request, posted with `postSendEx`).
 *
 * Lifetimes: the domain belongs to its context and closes its SRQs and receive QPs first; an
 * XRC SRQ also belongs to its PD and CQ.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import {
  QpAttrMask,
  QpInitAttrMask,
  QpOpenAttrMask,
  QpType,
  SrqInitAttrMask,
  SrqType,
  XrcdInitAttrMask,
} from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { nativeError, throwReturned } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, checkResource, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import { SrqRecvPoster } from "./_post.ts";
import type { RecvWr } from "./wr.ts";
import { modifyQp, type QpAttr, type QpAttrs, queryQp } from "./qp-attr.ts";
import {
  initAttr,
  type QpTransitionOptions,
  type RemoteEndpoint,
  rtrAttr,
} from "./qp-transition.ts";
import type { Context } from "./context.ts";
import { forgetObject, rememberObject } from "./_objects.ts";
import type { ProtectionDomain } from "./pd.ts";
import type { CompletionQueue } from "./cq.ts";

/** `O_CREAT` of Linux (x86-64 and aarch64): create the domain's inode association. */
const O_CREAT = 0o100;

/** Options of {@link Context.openXrcd} (`struct ibv_xrcd_init_attr`). */
export interface XrcdInit {
  /**
   * A file whose inode names the domain, so processes opening the same file share it
   * (default -1: a domain of this process only).
   */
  readonly fd?: number;
  /** `open(2)` flags: `O_CREAT` (default) creates the association, `O_EXCL` refuses to share. */
  readonly oflags?: number;
}

/** How to create an XRC SRQ. */
export interface XrcSrqInit {
  /** The PD of the receive buffers. */
  readonly pd: ProtectionDomain;
  /** The CQ the receives complete on. */
  readonly cq: CompletionQueue;
  /** Receive WRs it holds. */
  readonly maxWr: number;
  /** SGEs per receive WR (default 1). */
  readonly maxSge?: number;
  /** Initial limit (default 0: not armed). */
  readonly limit?: number;
}

/** An XRC domain (`ibv_open_xrcd`). */
export class XrcDomain extends NativeResource {
  /** The `struct ibv_xrcd *`. */
  readonly ptr: NativePointer;
  /** Its context. */
  readonly context: Context;

  /** Not for direct use: `context.openXrcd()` makes one. */
  constructor(context: Context, init: XrcdInit, token: symbol) {
    checkConstruct(token, "XRC domains are made by context.openXrcd()");
    checkResource<Context>(context, "Context", "context");
    if (typeof init !== "object" || init === null) {
      throw new InvalidArgumentError("XRC domain options must be an object");
    }
    const fd = init.fd ?? -1;
    const oflags = init.oflags ?? O_CREAT;
    if (!Number.isInteger(fd) || fd < -1) {
      throw new InvalidArgumentError(`fd must be -1 or an fd, got ${fd}`);
    }
    if (!Number.isInteger(oflags) || oflags < 0) {
      throw new InvalidArgumentError(`oflags must be open(2) flags, got ${oflags}`);
    }
    const n = native();
    const fn = extended(context, "open_xrcd", "ibv_open_xrcd");
    const A = layouts().ibv_xrcd_init_attr;
    const ptr = NativeBlock.with(A.size, (a) => {
      a.view.setUint32(
        A.fields.comp_mask.offset,
        XrcdInitAttrMask.FD | XrcdInitAttrMask.OFLAGS,
        true,
      );
      a.view.setInt32(A.fields.fd.offset, fd, true);
      a.view.setInt32(A.fields.oflags.offset, oflags, true);
      n.setErrno(0);
      const x = n.fnPointer(fn, IBVERBS_OPS.open_xrcd)(context.ptr, a.ptr);
      if (x === null) throw failed("ibv_open_xrcd", context);
      return x;
    });
    super("XrcDomain", [context]);
    this.ptr = ptr;
    this.context = context;
  }

  /** `ibv_create_srq_ex` (type XRC): an SRQ of this domain; senders address it by `srqNum`. */
  createSrq(init: XrcSrqInit): XrcSrq {
    this.assertOpen();
    return new XrcSrq(this, init, CONSTRUCT);
  }

  /** `ibv_create_qp_ex` (type XRC_RECV): a receive QP of this domain. */
  createRecvQp(): XrcRecvQp {
    this.assertOpen();
    return new XrcRecvQp(this, null, CONSTRUCT);
  }

  /** `ibv_open_qp`: opens the XRC_RECV QP `qpNum` of this domain (made by another process). */
  openQp(qpNum: number): XrcRecvQp {
    this.assertOpen();
    if (!Number.isInteger(qpNum) || qpNum < 0 || qpNum > 0xffffff) {
      throw new InvalidArgumentError(`qpNum must be a 24-bit QP number, got ${qpNum}`);
    }
    return new XrcRecvQp(this, qpNum, CONSTRUCT);
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    if (this.context.closed) return;
    const fn = this.context.extendedOp("close_xrcd");
    if (!fn) return;
    const rc = native().fnPointer(fn, IBVERBS_OPS.close_xrcd)(this.ptr);
    if (rc !== 0) throwReturned("ibv_close_xrcd", rc);
  }
}

/** An XRC shared receive queue: receives for every XRC_SEND QP that names its `srqNum`. */
export class XrcSrq extends NativeResource {
  /** The `struct ibv_srq *`. */
  readonly ptr: NativePointer;
  /** Its domain. */
  readonly xrcd: XrcDomain;
  /** The PD of its receive buffers. */
  readonly pd: ProtectionDomain;
  /** The CQ its receives complete on. */
  readonly cq: CompletionQueue;
  /** Its context. */
  readonly context: Context;
  /** The SRQ number senders address (`ibv_get_srq_num`). */
  readonly srqNum: number;
  /** Receive WRs it holds, as granted. */
  readonly maxWr: number;
  /** SGEs per receive WR, as granted. */
  readonly maxSge: number;
  readonly #recv: SrqRecvPoster;

  /** Not for direct use: `xrcd.createSrq()` makes one. */
  constructor(xrcd: XrcDomain, init: XrcSrqInit, token: symbol) {
    checkConstruct(token, "XRC SRQs are made by xrcd.createSrq()");
    if (typeof init !== "object" || init === null) {
      throw new InvalidArgumentError("XRC SRQ init must be an object");
    }
    const pd = checkResource<ProtectionDomain>(init.pd, "ProtectionDomain", "pd");
    const cq = checkResource<CompletionQueue>(init.cq, "CompletionQueue", "cq");
    const context = xrcd.context;
    if (pd.context !== context || cq.context !== context) {
      throw new InvalidArgumentError("the PD and CQ must be on the domain's device");
    }
    const int = (name: string, v: number | undefined, dflt: number, min: number) => {
      const x = v ?? dflt;
      if (!Number.isInteger(x) || x < min || x > 0x7fffffff) {
        throw new InvalidArgumentError(`XRC SRQ ${name} must be an integer >= ${min}, got ${v}`);
      }
      return x;
    };
    const maxWr = int("maxWr", init.maxWr, 0, 1);
    const maxSge = int("maxSge", init.maxSge, 1, 1);
    const limit = int("limit", init.limit, 0, 0);
    const n = native();
    const L = layouts();
    const A = L.ibv_srq_init_attr_ex;
    const F = A.fields;
    const fn = extended(context, "create_srq_ex", "ibv_create_srq_ex");
    const [ptr, wr, sge] = NativeBlock.with(A.size, (a) => {
      const v = a.view;
      v.setUint32(F["attr.max_wr"].offset, maxWr, true);
      v.setUint32(F["attr.max_sge"].offset, maxSge, true);
      v.setUint32(F["attr.srq_limit"].offset, limit, true);
      v.setUint32(
        F.comp_mask.offset,
        SrqInitAttrMask.TYPE | SrqInitAttrMask.PD | SrqInitAttrMask.XRCD | SrqInitAttrMask.CQ,
        true,
      );
      v.setUint32(F.srq_type.offset, SrqType.XRC, true);
      a.setPointer(F.pd.offset, pd.ptr);
      a.setPointer(F.xrcd.offset, xrcd.ptr);
      a.setPointer(F.cq.offset, cq.ptr);
      n.setErrno(0);
      const srq = n.fnPointer(fn, IBVERBS_OPS.create_srq_ex)(context.ptr, a.ptr);
      if (srq === null) throw failed("ibv_create_srq_ex", context);
      return [
        srq,
        v.getUint32(F["attr.max_wr"].offset, true),
        v.getUint32(F["attr.max_sge"].offset, true),
      ] as const;
    });
    const num = NativeBlock.with(4, (b) => {
      const get = context.extendedOp("get_srq_num");
      const rc = get ? n.fnPointer(get, IBVERBS_OPS.get_srq_num)(ptr, b.ptr) : Errno.EOPNOTSUPP;
      if (rc !== 0) {
        n.ibverbs.ibv_destroy_srq(ptr);
        throwReturned("ibv_get_srq_num", rc);
      }
      return b.view.getUint32(0, true);
    });
    super("XrcSrq", [xrcd, pd, cq]);
    this.ptr = ptr;
    this.xrcd = xrcd;
    this.pd = pd;
    this.cq = cq;
    this.context = context;
    this.srqNum = num;
    this.maxWr = wr;
    this.maxSge = sge;
    this.#recv = new SrqRecvPoster(
      this.pd,
      this.maxSge,
      context.op("post_srq_recv")!,
      ptr,
      L.ibv_recv_wr.size,
    );
    rememberObject(context, ptr, this);
  }

  /** Checks and posts receive WRs (WRs before an invalid one are posted). */
  postRecv(wrs: RecvWr | readonly RecvWr[]): void {
    if (this.closed) this.assertOpen();
    this.#recv.post(wrs);
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    forgetObject(this.context, this.ptr);
    const rc = native().ibverbs.ibv_destroy_srq(this.ptr);
    this.#recv.free();
    if (rc !== 0) throwReturned("ibv_destroy_srq", rc);
  }
}

/**
 * An XRC receive QP (created, or opened by number): the target of a remote XRC_SEND QP's
 * connection. It has no queues of its own (receives go to the domain's SRQs); it only moves
 * through INIT and RTR.
 */
export class XrcRecvQp extends NativeResource {
  /** The `struct ibv_qp *`. */
  readonly ptr: NativePointer;
  /** Its domain. */
  readonly xrcd: XrcDomain;
  /** The QP number (what the remote XRC_SEND QP connects to). */
  readonly qpNum: number;
  /** True when opened (`ibv_open_qp`) rather than created. */
  readonly opened: boolean;
  readonly #attr: NativeBlock;

  /** Not for direct use: `xrcd.createRecvQp()` / `xrcd.openQp()` make one. */
  constructor(xrcd: XrcDomain, qpNum: number | null, token: symbol) {
    checkConstruct(token, "XRC receive QPs are made by the XRC domain");
    const n = native();
    const L = layouts();
    const context = xrcd.context;
    let ptr: NativePointer;
    if (qpNum === null) {
      const A = L.ibv_qp_init_attr_ex;
      const fn = extended(context, "create_qp_ex", "ibv_create_qp_ex");
      ptr = NativeBlock.with(A.size, (a) => {
        a.view.setUint32(A.fields.qp_type.offset, QpType.XRC_RECV, true);
        a.view.setUint32(A.fields.comp_mask.offset, QpInitAttrMask.XRCD, true);
        a.setPointer(A.fields.xrcd.offset, xrcd.ptr);
        n.setErrno(0);
        const qp = n.fnPointer(fn, IBVERBS_OPS.create_qp_ex)(context.ptr, a.ptr);
        if (qp === null) throw failed("ibv_create_qp_ex", context);
        return qp;
      });
    } else {
      const A = L.ibv_qp_open_attr;
      const fn = extended(context, "open_qp", "ibv_open_qp");
      ptr = NativeBlock.with(A.size, (a) => {
        a.view.setUint32(
          A.fields.comp_mask.offset,
          QpOpenAttrMask.NUM | QpOpenAttrMask.XRCD | QpOpenAttrMask.TYPE,
          true,
        );
        a.view.setUint32(A.fields.qp_num.offset, qpNum, true);
        a.setPointer(A.fields.xrcd.offset, xrcd.ptr);
        a.view.setUint32(A.fields.qp_type.offset, QpType.XRC_RECV, true);
        n.setErrno(0);
        const qp = n.fnPointer(fn, IBVERBS_OPS.open_qp)(context.ptr, a.ptr);
        if (qp === null) throw failed("ibv_open_qp", context);
        return qp;
      });
    }
    super("XrcRecvQp", [xrcd]);
    this.ptr = ptr;
    this.xrcd = xrcd;
    const F = L.ibv_qp.fields.qp_num;
    this.qpNum = new DataView(n.arrayBuffer(ptr, F.offset + 4)).getUint32(F.offset, true);
    this.opened = qpNum !== null;
    this.#attr = new NativeBlock(L.ibv_qp_attr.size + L.ibv_qp_init_attr.size, 8);
  }

  /** `ibv_modify_qp` with the given attributes. */
  modify(attr: QpAttr): void {
    this.assertOpen();
    modifyQp(this.ptr, this.#attr, attr, `XRC QP ${this.qpNum}`);
  }

  /** `ibv_query_qp`: its attributes. */
  query(): QpAttrs {
    this.assertOpen();
    return queryQp(this.ptr, this.#attr, QpStateMask);
  }

  /** RESET -> INIT -> RTR towards the remote XRC_SEND QP (its number and PSN, GID on RoCE). */
  activate(remote: RemoteEndpoint, o: QpTransitionOptions = {}): void {
    const rtr = rtrAttr("activate", "the remote XRC_SEND endpoint is required", remote, o, true);
    this.modify(initAttr(QpType.XRC_RECV, o));
    this.modify(rtr);
  }

  /** Releases (destroys, or closes when opened) the QP (called once by `close()`). */
  protected destroy(): void {
    const rc = native().ibverbs.ibv_destroy_qp(this.ptr);
    this.#attr.free();
    if (rc !== 0) throwReturned("ibv_destroy_qp", rc);
  }
}

/** The query mask of an XRC receive QP (state, port, path MTU, remote QP). */
const QpStateMask = QpAttrMask.STATE | QpAttrMask.PORT | QpAttrMask.PATH_MTU | QpAttrMask.DEST_QPN;

/** A `verbs_context` op or UnsupportedError naming the device. */
function extended(
  context: Context,
  op: "open_xrcd" | "create_srq_ex" | "create_qp_ex" | "open_qp",
  name: string,
): NativePointer {
  const fn = context.extendedOp(op);
  if (!fn) throw nativeError(name, Errno.EOPNOTSUPP, `${context.deviceName}: no extended context`);
  return fn;
}

/** The typed error of a call that returned NULL (EOPNOTSUPP when the provider set no errno). */
function failed(op: string, context: Context): Error {
  const errno = native().errno();
  return nativeError(
    op,
    errno || Errno.EOPNOTSUPP,
    `${context.deviceName}${errno ? "" : "; the provider returned NULL without errno"}`,
  );
}

/** Opens an XRC domain (module-private: `context.openXrcd`). */
export function openXrcd(context: Context, init: XrcdInit): XrcDomain {
  return new XrcDomain(context, init, CONSTRUCT);
}
