/**
 * QPs on CM ids: `rdma_create_qp(id, pd, init_attr)` with this library's PD and CQs (never
 * librdmacm's hidden ones), wrapped as a verbs {@link QueuePair} so posting, polling and the
 * poller work exactly as on any other QP. The QP is destroyed with `rdma_destroy_qp` before its
 * id. The checks and the `ibv_qp_init_attr` encoding are the verbs layer's own.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import { layouts } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { InvalidArgumentError, UnsupportedError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { QpType } from "../types/enums.ts";
import { checkCall, strerror } from "../ffi/errors.ts";
import { checkResource } from "../ffi/resource.ts";
import { adoptQp, type QueuePair } from "../verbs/qp.ts";
import { checkQpInit, createWithInitAttr, type QpInit } from "../verbs/qp-init.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { CmIdBase, CmQpInit } from "./id-base.ts";

/**
 * Creates the QP of `id` with `rdma_create_qp` (module-private: `id.createQp()`). The id must
 * have its address resolved (or be an incoming request); `pd` and the CQs must come from
 * `id.context`. An RC QP is left in INIT, a UD QP is moved to RTS by librdmacm.
 */
export function createCmQp(id: CmIdBase, pd: ProtectionDomain, init: CmQpInit): QueuePair {
  checkResource<ProtectionDomain>(pd, "ProtectionDomain", "pd");
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
  if (typeof init !== "object" || init === null) {
    throw new InvalidArgumentError("QP init must be an object");
  }
  const full: QpInit = { ...init, type: init.type ?? (id.isUd ? QpType.UD : QpType.RC) };
  const type = full.type;
  const c = checkQpInit(pd, full, id.isUd ? [QpType.UD] : [QpType.RC, QpType.UC]);
  if (type === QpType.UD && id.transport === "iwarp") {
    throw new UnsupportedError(
      "rdma_create_qp",
      Errno.EOPNOTSUPP,
      strerror(Errno.EOPNOTSUPP),
      "iWARP has no UD (datagram) QPs",
    );
  }
  const [, cap] = createWithInitAttr(c, (attr) => {
    checkCall("rdma_create_qp", n.rdmacm.rdma_create_qp(id.ptr, pd.ptr, attr));
  });
  const idPtr = id.ptr;
  const qpPtr = n.readPointer(idPtr, layouts().rdma_cm_id.fields.qp.offset) as NativePointer;
  let destroyed = false;
  const destroy = () => {
    if (destroyed) return;
    destroyed = true;
    native().rdmacm.rdma_destroy_qp(idPtr);
  };
  try {
    return adoptQp(pd, c, { ptr: qpPtr, cap, destroy });
  } catch (e) {
    destroy();
    throw e;
  }
}
