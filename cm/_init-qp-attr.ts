/**
 * `rdma_init_qp_attr`: the QP attributes the connection manager computed for the next state of a
 * connection (INIT, RTR or RTS), returned as the verbs layer's typed {@link QpAttr}. A QP created
 * with plain verbs (`pd.createQp()` on `id.context`, not on the id) follows a CM connection with
 * `qp.modify(id.initQpAttr(state))`, as librdmacm does for the QP of an id.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { checkCall } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { QpAttrMask, QpState } from "../types/enums.ts";
import { checkInteger } from "../types/check.ts";
import { decodeAhAttr } from "../verbs/ah.ts";
import type { QpAttr } from "../verbs/qp-attr.ts";
import type { CmIdBase } from "./id-base.ts";

/** A scalar `ibv_qp_attr` field: its mask bit, its name in {@link QpAttr}, its C name. */
const SCALARS: readonly (readonly [number, keyof QpAttr, string])[] = [
  [QpAttrMask.STATE, "qpState", "qp_state"],
  [QpAttrMask.CUR_STATE, "curQpState", "cur_qp_state"],
  [QpAttrMask.ACCESS_FLAGS, "accessFlags", "qp_access_flags"],
  [QpAttrMask.PKEY_INDEX, "pkeyIndex", "pkey_index"],
  [QpAttrMask.PORT, "port", "port_num"],
  [QpAttrMask.QKEY, "qkey", "qkey"],
  [QpAttrMask.PATH_MTU, "pathMtu", "path_mtu"],
  [QpAttrMask.TIMEOUT, "timeout", "timeout"],
  [QpAttrMask.RETRY_CNT, "retryCnt", "retry_cnt"],
  [QpAttrMask.RNR_RETRY, "rnrRetry", "rnr_retry"],
  [QpAttrMask.RQ_PSN, "rqPsn", "rq_psn"],
  [QpAttrMask.MAX_QP_RD_ATOMIC, "maxRdAtomic", "max_rd_atomic"],
  [QpAttrMask.MIN_RNR_TIMER, "minRnrTimer", "min_rnr_timer"],
  [QpAttrMask.SQ_PSN, "sqPsn", "sq_psn"],
  [QpAttrMask.MAX_DEST_RD_ATOMIC, "maxDestRdAtomic", "max_dest_rd_atomic"],
  [QpAttrMask.DEST_QPN, "destQpNum", "dest_qp_num"],
];

/**
 * Asks the connection manager for the attributes of `state` (`rdma_init_qp_attr`) and returns
 * the fields its mask names. Attributes `QpAttr` has no field for (an alternate path and its
 * migration state, which only IB fabrics with APM report) are left out.
 */
export function initQpAttr(id: CmIdBase, state: QpState): QpAttr {
  id.assertOpen();
  checkInteger("initQpAttr: state", state, QpState.RESET, QpState.ERR);
  const L = layouts().ibv_qp_attr;
  const F: Readonly<Record<string, { offset: number; size: number }>> = L.fields;
  const maskAt = Math.ceil(L.size / 8) * 8;
  return NativeBlock.with(maskAt + 8, (b) => {
    const v = b.view;
    v.setUint32(F.qp_state.offset, state, true);
    checkCall(
      "rdma_init_qp_attr",
      native().rdmacm.rdma_init_qp_attr(id.ptr, b.ptr, b.at(maskAt)),
      `state ${state}`,
    );
    const mask = v.getUint32(maskAt, true);
    const out: Record<string, unknown> = {};
    for (const [bit, name, field] of SCALARS) {
      if (!(mask & bit)) continue;
      const { offset, size } = F[field];
      out[name] = size === 1
        ? v.getUint8(offset)
        : size === 2
        ? v.getUint16(offset, true)
        : v.getUint32(offset, true);
    }
    if (mask & QpAttrMask.AV) out.ahAttr = decodeAhAttr(v, F.ah_attr.offset);
    return out as QpAttr;
  });
}
