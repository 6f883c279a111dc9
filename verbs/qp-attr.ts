/**
 * `struct ibv_qp_attr` as a typed object: the attribute mask is derived from the
 * fields given.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { throwReturned } from "../ffi/errors.ts";
import type { NativeBlock } from "../ffi/memory.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { enumName, Mtu, QpAttrMask, QpState } from "../types/enums.ts";
import { type AhAttr, encodeAhAttr } from "./ah.ts";
import { formatGid } from "./gid.ts";
import { readScalars } from "./_structs.ts";
import { checkInteger, checkObject } from "../types/check.ts";

/** QP attributes to modify; each field given sets its bit of the attribute mask. */
export interface QpAttr {
  /** Next state. */
  readonly qpState?: QpState;
  /** Assumed current state. */
  readonly curQpState?: QpState;
  /** MTU of the path. */
  readonly pathMtu?: Mtu;
  /** Q_Key (UD). */
  readonly qkey?: number;
  /** Receive PSN. */
  readonly rqPsn?: number;
  /** Send PSN. */
  readonly sqPsn?: number;
  /** Remote QP number. */
  readonly destQpNum?: number;
  /** Remote access allowed on this QP (an OR of `AccessFlags`). */
  readonly accessFlags?: number;
  /** P_Key index. */
  readonly pkeyIndex?: number;
  /** Port number. */
  readonly port?: number;
  /** Primary path address vector. */
  readonly ahAttr?: AhAttr;
  /** Outstanding RDMA reads/atomics as initiator. */
  readonly maxRdAtomic?: number;
  /** Outstanding RDMA reads/atomics as responder. */
  readonly maxDestRdAtomic?: number;
  /** Minimum RNR NAK timer (encoded, 1..31; 12 = 0.64 ms). */
  readonly minRnrTimer?: number;
  /** Local ACK timeout (4.096 µs × 2^timeout). */
  readonly timeout?: number;
  /** Transport retries. */
  readonly retryCnt?: number;
  /** RNR retries (7 = infinite). */
  readonly rnrRetry?: number;
}

/** Writes the attributes into `view` (an `ibv_qp_attr`) and returns the mask. */
export function encodeQpAttr(view: DataView, a: QpAttr): number {
  const F: Readonly<Record<string, { offset: number }>> = layouts().ibv_qp_attr
    .fields;
  checkObject("QP attributes", a);
  let mask = 0;
  const set = (
    name: keyof QpAttr,
    f: string,
    bit: number,
    size: 1 | 2 | 4,
    max = size === 4 ? 0xffffffff : size === 2 ? 0xffff : 0xff,
  ) => {
    const v = a[name];
    if (v === undefined) return;
    checkInteger(`QP attribute ${name}`, v, 0, max);
    const at = F[f].offset;
    if (size === 4) view.setUint32(at, v as number, true);
    else if (size === 2) view.setUint16(at, v as number, true);
    else view.setUint8(at, v as number);
    mask |= bit;
  };
  set("qpState", "qp_state", QpAttrMask.STATE, 4, QpState.ERR);
  set("curQpState", "cur_qp_state", QpAttrMask.CUR_STATE, 4, QpState.ERR);
  set("pathMtu", "path_mtu", QpAttrMask.PATH_MTU, 4, Mtu.MTU_4096);
  set("qkey", "qkey", QpAttrMask.QKEY, 4);
  set("rqPsn", "rq_psn", QpAttrMask.RQ_PSN, 4, 0xffffff);
  set("sqPsn", "sq_psn", QpAttrMask.SQ_PSN, 4, 0xffffff);
  set("destQpNum", "dest_qp_num", QpAttrMask.DEST_QPN, 4, 0xffffff);
  set("accessFlags", "qp_access_flags", QpAttrMask.ACCESS_FLAGS, 4);
  set("pkeyIndex", "pkey_index", QpAttrMask.PKEY_INDEX, 2);
  set("port", "port_num", QpAttrMask.PORT, 1);
  set("maxRdAtomic", "max_rd_atomic", QpAttrMask.MAX_QP_RD_ATOMIC, 1);
  set("maxDestRdAtomic", "max_dest_rd_atomic", QpAttrMask.MAX_DEST_RD_ATOMIC, 1);
  set("minRnrTimer", "min_rnr_timer", QpAttrMask.MIN_RNR_TIMER, 1, 31);
  set("timeout", "timeout", QpAttrMask.TIMEOUT, 1, 31);
  set("retryCnt", "retry_cnt", QpAttrMask.RETRY_CNT, 1, 7);
  set("rnrRetry", "rnr_retry", QpAttrMask.RNR_RETRY, 1, 7);
  if (a.ahAttr) {
    encodeAhAttr(view, F.ah_attr.offset, a.ahAttr);
    mask |= QpAttrMask.AV;
  }
  return mask;
}

/** What `qp.query()` returns: the scalar attributes, the caps, the path and names. */
export interface QpAttrs {
  /** Current state. */
  readonly qpState: QpState;
  /** Its C name. */
  readonly qpStateName: string;
  /** The granted capabilities. */
  readonly cap: {
    readonly maxSendWr: number;
    readonly maxRecvWr: number;
    readonly maxSendSge: number;
    readonly maxRecvSge: number;
    readonly maxInlineData: number;
  };
  /** The primary path's destination GID (when global). */
  readonly dgid: string;
  /** Every other scalar field (`pathMtu`, `qkey`, `rqPsn`, `sqPsn`, `destQpNum`, `timeout`, ...). */
  readonly [field: string]: unknown;
}

/** Reads an `ibv_qp_attr` (after `ibv_query_qp`). */
export function decodeQpAttr(view: DataView): QpAttrs {
  const L = layouts().ibv_qp_attr;
  const o = readScalars(view, L) as Record<string, number>;
  const c = readScalars(view, L, "cap.") as Record<string, number>;
  const F = L.fields;
  return {
    ...o,
    qpState: o.qpState as QpState,
    qpStateName: enumName(QpState, o.qpState, "IBV_QPS_"),
    cap: {
      maxSendWr: c.maxSendWr,
      maxRecvWr: c.maxRecvWr,
      maxSendSge: c.maxSendSge,
      maxRecvSge: c.maxRecvSge,
      maxInlineData: c.maxInlineData,
    },
    dgid: formatGid(
      new Uint8Array(view.buffer, view.byteOffset + F["ah_attr.grh.dgid"].offset, 16),
    ),
  };
}

/**
 * `ibv_modify_qp` of `qp` with `attr`, encoded in `block` (room for an `ibv_qp_attr`); `what`
 * names the QP in the error.
 */
export function modifyQp(qp: NativePointer, block: NativeBlock, attr: QpAttr, what: string): void {
  block.clear();
  const mask = encodeQpAttr(block.view, attr);
  if (mask === 0) throw new InvalidArgumentError("modify: no attribute given");
  const rc = native().ibverbs.ibv_modify_qp(qp, block.ptr, mask);
  if (rc !== 0) throwReturned("ibv_modify_qp", rc, what);
}

/**
 * `ibv_query_qp` of `qp` for the attributes of `mask`, into `block` (an `ibv_qp_attr` followed by
 * an `ibv_qp_init_attr`).
 */
export function queryQp(qp: NativePointer, block: NativeBlock, mask: number): QpAttrs {
  block.clear();
  const at = block.at(layouts().ibv_qp_attr.size);
  const rc = native().ibverbs.ibv_query_qp(qp, block.ptr, mask, at);
  if (rc !== 0) throwReturned("ibv_query_qp", rc);
  return decodeQpAttr(block.view);
}
