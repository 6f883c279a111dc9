/**
 * Creating a QP, encoded once for raw verbs (`ibv_create_qp`) and rdma_cm (`rdma_create_qp`):
 * the checks of the CQs, SRQ and type, the `struct ibv_qp_init_attr` encoding, and the
 * capabilities the provider granted, read back from it.
 *
 * @module
 */

import { layouts } from "../ffi/native.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkResource } from "../ffi/resource.ts";
import { enumName, QpType } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { Layouts } from "../types/layout.ts";
import type { CompletionQueue } from "./cq.ts";
import type { SharedReceiveQueue } from "./srq.ts";
import type { ProtectionDomain } from "./pd.ts";
import { checkInteger, checkObject, describe } from "../types/check.ts";

/** Requested queue capabilities; the provider may grant more. */
export interface QpCap {
  /** Send queue depth (default 16). */
  readonly maxSendWr?: number;
  /** Receive queue depth (default 16; ignored with an SRQ). */
  readonly maxRecvWr?: number;
  /** SGEs per send WR (default 1). */
  readonly maxSendSge?: number;
  /** SGEs per receive WR (default 1). */
  readonly maxRecvSge?: number;
  /** Inline bytes per send WR (default 0). */
  readonly maxInlineData?: number;
}

/** The capabilities the provider granted. */
export interface GrantedCap {
  /** Send queue depth. */
  readonly maxSendWr: number;
  /** Receive queue depth. */
  readonly maxRecvWr: number;
  /** SGEs per send WR. */
  readonly maxSendSge: number;
  /** SGEs per receive WR. */
  readonly maxRecvSge: number;
  /** Inline bytes per send WR. */
  readonly maxInlineData: number;
}

/** The QP types this library creates. */
export type CreatableQpType = typeof QpType.RC | typeof QpType.UC | typeof QpType.UD;

/** How to create a QP. */
export interface QpInit {
  /** `QpType.RC`, `QpType.UC` or `QpType.UD`. */
  readonly type: CreatableQpType;
  /** CQ of send completions. */
  readonly sendCq: CompletionQueue;
  /** CQ of receive completions (default: `sendCq`). */
  readonly recvCq?: CompletionQueue;
  /** A shared receive queue instead of the QP's own. */
  readonly srq?: SharedReceiveQueue;
  /** Requested capabilities. */
  readonly cap?: QpCap;
  /** Every send WR completes signaled. */
  readonly sqSigAll?: boolean;
}

/** A {@link QpInit} after its checks: the objects verified and the receive CQ resolved. */
export interface CheckedQpInit {
  /** The QP type. */
  readonly type: QpType;
  /** The send CQ. */
  readonly sendCq: CompletionQueue;
  /** The receive CQ (the send CQ when none was given). */
  readonly recvCq: CompletionQueue;
  /** The SRQ, or null. */
  readonly srq: SharedReceiveQueue | null;
  /** The requested capabilities with defaults. */
  readonly cap: Required<QpCap>;
  /** Every send WR completes signaled. */
  readonly sqSigAll: boolean;
}

const CAP_MAX = 0x7fffffff;

function capValue(name: string, v: number | undefined, dflt: number): number {
  return v === undefined ? dflt : checkInteger(`cap.${name}`, v, 0, CAP_MAX);
}

/**
 * Checks a QP's creation options before the provider sees them: `types` lists the QP types
 * the caller allows, the CQs must be open CQs of the PD's device, the SRQ an open SRQ of the PD.
 */
export function checkQpInit(
  pd: ProtectionDomain,
  init: QpInit,
  types: readonly QpType[] = [QpType.RC, QpType.UC, QpType.UD],
): CheckedQpInit {
  checkObject("QP init", init);
  if (!types.includes(init.type)) {
    throw new InvalidArgumentError(
      `QP type must be ${types.map((t) => enumName(QpType, t, "IBV_QPT_")).join(", ")}; got ${
        typeof init.type === "number"
          ? enumName(QpType, init.type, "IBV_QPT_")
          : describe(init.type)
      }`,
    );
  }
  const sendCq = checkResource<CompletionQueue>(init.sendCq, "CompletionQueue", "sendCq");
  const recvCq = init.recvCq === undefined
    ? sendCq
    : checkResource<CompletionQueue>(init.recvCq, "CompletionQueue", "recvCq");
  for (const cq of [sendCq, recvCq]) {
    if (cq.context !== pd.context) throw new InvalidArgumentError("the CQ is on another device");
  }
  const srq = init.srq === undefined
    ? null
    : checkResource<SharedReceiveQueue>(init.srq, "SharedReceiveQueue", "srq");
  if (srq && srq.pd !== pd) throw new InvalidArgumentError("the SRQ is in another PD");
  const c = init.cap ?? {};
  checkObject("cap", c);
  return {
    type: init.type,
    sendCq,
    recvCq,
    srq,
    cap: {
      maxSendWr: capValue("maxSendWr", c.maxSendWr, 16),
      maxRecvWr: srq ? 0 : capValue("maxRecvWr", c.maxRecvWr, 16),
      maxSendSge: capValue("maxSendSge", c.maxSendSge, 1),
      maxRecvSge: srq ? 0 : capValue("maxRecvSge", c.maxRecvSge, 1),
      maxInlineData: capValue("maxInlineData", c.maxInlineData, 0),
    },
    sqSigAll: init.sqSigAll === true,
  };
}

/** The fields `struct ibv_qp_init_attr` shares with the start of `struct ibv_qp_init_attr_ex`. */
type InitAttrFields = Layouts["ibv_qp_init_attr"]["fields"];

/**
 * Writes the checked init into an `ibv_qp_init_attr` (or the same leading fields of an
 * `ibv_qp_init_attr_ex`): CQs, SRQ, capabilities, type, `sq_sig_all`. An XRC_SEND QP has no
 * receive side: no receive CQ, no receive capabilities.
 */
export function writeInitAttr(a: NativeBlock, F: InitAttrFields, init: CheckedQpInit): void {
  const v = a.view;
  const recv = (init.type as QpType) !== QpType.XRC_SEND;
  a.setPointer(F.send_cq.offset, init.sendCq.ptr);
  a.setPointer(F.recv_cq.offset, recv ? init.recvCq.ptr : null);
  a.setPointer(F.srq.offset, init.srq?.ptr ?? null);
  v.setUint32(F["cap.max_send_wr"].offset, init.cap.maxSendWr, true);
  v.setUint32(F["cap.max_recv_wr"].offset, recv ? init.cap.maxRecvWr : 0, true);
  v.setUint32(F["cap.max_send_sge"].offset, init.cap.maxSendSge, true);
  v.setUint32(F["cap.max_recv_sge"].offset, recv ? init.cap.maxRecvSge : 0, true);
  v.setUint32(F["cap.max_inline_data"].offset, init.cap.maxInlineData, true);
  v.setUint32(F.qp_type.offset, init.type, true);
  v.setInt32(F.sq_sig_all.offset, init.sqSigAll ? 1 : 0, true);
}

/** The capabilities the provider granted, read back from the init attributes it wrote. */
export function readGrantedCap(v: DataView, F: InitAttrFields): GrantedCap {
  return Object.freeze({
    maxSendWr: v.getUint32(F["cap.max_send_wr"].offset, true),
    maxRecvWr: v.getUint32(F["cap.max_recv_wr"].offset, true),
    maxSendSge: v.getUint32(F["cap.max_send_sge"].offset, true),
    maxRecvSge: v.getUint32(F["cap.max_recv_sge"].offset, true),
    maxInlineData: v.getUint32(F["cap.max_inline_data"].offset, true),
  });
}

/**
 * Encodes `init` as a `struct ibv_qp_init_attr`, runs `create` with it (the provider writes the
 * granted capabilities back into it), and returns what `create` returned with those caps.
 */
export function createWithInitAttr<T>(
  init: CheckedQpInit,
  create: (attr: NativePointer) => T,
): [T, GrantedCap] {
  const A = layouts().ibv_qp_init_attr;
  return NativeBlock.with(A.size, (a) => {
    writeInitAttr(a, A.fields, init);
    const result = create(a.ptr);
    return [result, readGrantedCap(a.view, A.fields)];
  });
}
