/**
 * QPs on CM ids: `rdma_create_qp(id, pd, init_attr)` with this library's PD and
 * CQs (never librdmacm's hidden ones), wrapped as a verbs {@link QueuePair} so
 * posting, polling and the poller work exactly as on any other QP. The QP is
 * destroyed with `rdma_destroy_qp` before its id.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { layoutFor } from "../types/layout.ts";
import { InvalidArgumentError, UnsupportedError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { enumName, QpType } from "../types/enums.ts";
import { nativeError, strerror } from "../ffi/errors.ts";
import { type QpInit, QueuePair } from "../verbs/qp.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { CmId } from "./id.ts";

/** How to create a QP on a CM id: the verbs {@link QpInit}; the type defaults from the port space. */
export type CmQpInit = Omit<QpInit, "type"> & { readonly type?: number };

/**
 * Creates the QP of `id` with `rdma_create_qp`. The id must have its address
 * resolved (or be an incoming request); `pd` and the CQs must come from
 * `id.context`. An RC QP is left in INIT (post receives now; connect/accept
 * moves it to RTS), a UD QP is moved to RTS by librdmacm.
 */
export function createCmQp(id: CmId, pd: ProtectionDomain, init: CmQpInit): QueuePair {
  id.assertOpen();
  pd.assertOpen();
  if (id.qp && !id.qp.closed) throw new InvalidArgumentError("the CM id already has a QP");
  const verbs = id.verbsPtr;
  if (verbs === null) {
    throw new InvalidArgumentError(
      "createQp: the id is not bound to a device yet (resolve the address first)",
    );
  }
  const n = native();
  if (n.address(pd.context.ptr) !== n.address(verbs)) {
    throw new InvalidArgumentError(
      "createQp: the PD must be allocated on the id's device context (id.context.allocPd())",
    );
  }
  const type = init.type ?? (id.isUd ? QpType.UD : QpType.RC);
  if (id.isUd ? type !== QpType.UD : type !== QpType.RC && type !== QpType.UC) {
    throw new InvalidArgumentError(
      `createQp: ${enumName(QpType, type, "IBV_QPT_")} does not fit the id's port space`,
    );
  }
  if (type === QpType.UD && id.transport === "iwarp") {
    throw new UnsupportedError(
      "rdma_create_qp",
      Errno.EOPNOTSUPP,
      strerror(Errno.EOPNOTSUPP),
      "iWARP has no UD (datagram) QPs",
    );
  }
  const recvCq = init.recvCq ?? init.sendCq;
  for (const cq of [init.sendCq, recvCq]) {
    cq.assertOpen();
    if (cq.context !== pd.context) {
      throw new InvalidArgumentError("createQp: the CQs must come from the id's device context");
    }
  }
  const L = layoutFor(n.arch);
  const A = L.ibv_qp_init_attr;
  const F = A.fields;
  const attr = n.alloc(A.size, 8);
  try {
    const v = new DataView(n.arrayBuffer(attr, A.size));
    n.writePointer(attr, F.send_cq.offset, init.sendCq.ptr);
    n.writePointer(attr, F.recv_cq.offset, recvCq.ptr);
    n.writePointer(attr, F.srq.offset, init.srq?.ptr ?? null);
    const c = init.cap ?? {};
    v.setUint32(F["cap.max_send_wr"].offset, c.maxSendWr ?? 16, true);
    v.setUint32(F["cap.max_recv_wr"].offset, init.srq ? 0 : c.maxRecvWr ?? 16, true);
    v.setUint32(F["cap.max_send_sge"].offset, c.maxSendSge ?? 1, true);
    v.setUint32(F["cap.max_recv_sge"].offset, init.srq ? 0 : c.maxRecvSge ?? 1, true);
    v.setUint32(F["cap.max_inline_data"].offset, c.maxInlineData ?? 0, true);
    v.setUint32(F.qp_type.offset, type, true);
    v.setInt32(F.sq_sig_all.offset, init.sqSigAll ? 1 : 0, true);
    if (n.rdmacm.rdma_create_qp(id.ptr, pd.ptr, attr) !== 0) {
      throw nativeError("rdma_create_qp", n.errno());
    }
    const g = (
      f: "max_send_wr" | "max_recv_wr" | "max_send_sge" | "max_recv_sge" | "max_inline_data",
    ) => v.getUint32(F[`cap.${f}`].offset, true);
    const caps = {
      maxSendWr: g("max_send_wr"),
      maxRecvWr: g("max_recv_wr"),
      maxSendSge: g("max_send_sge"),
      maxRecvSge: g("max_recv_sge"),
      maxInlineData: g("max_inline_data"),
    };
    const qpPtr = id.qpPtr as NativePointer;
    const idPtr = id.ptr;
    let destroyed = false;
    let qp: QueuePair;
    try {
      qp = QueuePair.adopt(
        pd,
        qpPtr,
        { sendCq: init.sendCq, recvCq, srq: init.srq, type, caps },
        () => {
          if (destroyed) return;
          destroyed = true;
          native().rdmacm.rdma_destroy_qp(idPtr);
        },
      );
    } catch (e) {
      n.rdmacm.rdma_destroy_qp(idPtr);
      throw e;
    }
    id._attachQp(qp);
    return qp;
  } finally {
    n.free(attr);
  }
}
