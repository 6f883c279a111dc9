/**
 * `struct ibv_qp_attr` as a typed object: the attribute mask is derived from the
 * fields given.
 *
 * @module
 */

import { layouts } from "../ffi/native.ts";
import { enumName, QpAttrMask, QpState } from "../types/enums.ts";
import { type AhAttr, encodeAhAttr } from "./ah.ts";
import { formatGid } from "./gid.ts";
import { readScalars } from "./structs.ts";

/** QP attributes to modify; each field given sets its bit of the attribute mask. */
export interface QpAttr {
  /** Next state (`QpState`). */
  readonly qpState?: number;
  /** Assumed current state. */
  readonly curQpState?: number;
  /** `Mtu` of the path. */
  readonly pathMtu?: number;
  /** Q_Key (UD). */
  readonly qkey?: number;
  /** Receive PSN. */
  readonly rqPsn?: number;
  /** Send PSN. */
  readonly sqPsn?: number;
  /** Remote QP number. */
  readonly destQpNum?: number;
  /** Remote access allowed on this QP (`AccessFlags`). */
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
  let mask = 0;
  const u32 = (v: number | undefined, f: string, bit: number) => {
    if (v === undefined) return;
    view.setUint32(F[f].offset, v >>> 0, true);
    mask |= bit;
  };
  const u8 = (v: number | undefined, f: string, bit: number) => {
    if (v === undefined) return;
    view.setUint8(F[f].offset, v);
    mask |= bit;
  };
  u32(a.qpState, "qp_state", QpAttrMask.STATE);
  u32(a.curQpState, "cur_qp_state", QpAttrMask.CUR_STATE);
  u32(a.pathMtu, "path_mtu", QpAttrMask.PATH_MTU);
  u32(a.qkey, "qkey", QpAttrMask.QKEY);
  u32(a.rqPsn, "rq_psn", QpAttrMask.RQ_PSN);
  u32(a.sqPsn, "sq_psn", QpAttrMask.SQ_PSN);
  u32(a.destQpNum, "dest_qp_num", QpAttrMask.DEST_QPN);
  u32(a.accessFlags, "qp_access_flags", QpAttrMask.ACCESS_FLAGS);
  if (a.pkeyIndex !== undefined) {
    view.setUint16(F.pkey_index.offset, a.pkeyIndex, true);
    mask |= QpAttrMask.PKEY_INDEX;
  }
  u8(a.port, "port_num", QpAttrMask.PORT);
  u8(a.maxRdAtomic, "max_rd_atomic", QpAttrMask.MAX_QP_RD_ATOMIC);
  u8(a.maxDestRdAtomic, "max_dest_rd_atomic", QpAttrMask.MAX_DEST_RD_ATOMIC);
  u8(a.minRnrTimer, "min_rnr_timer", QpAttrMask.MIN_RNR_TIMER);
  u8(a.timeout, "timeout", QpAttrMask.TIMEOUT);
  u8(a.retryCnt, "retry_cnt", QpAttrMask.RETRY_CNT);
  u8(a.rnrRetry, "rnr_retry", QpAttrMask.RNR_RETRY);
  if (a.ahAttr) {
    encodeAhAttr(view, F.ah_attr.offset, a.ahAttr);
    mask |= QpAttrMask.AV;
  }
  return mask;
}

/** What `qp.query()` returns: the scalar attributes, the caps, the path and names. */
export interface QpAttrs {
  /** Current state. */
  readonly qpState: number;
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
    qpState: o.qpState,
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
