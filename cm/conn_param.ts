/**
 * `struct rdma_conn_param` and private data: the options of connect and accept,
 * checked before any call (ranges, and the private-data limit of the operation
 * on the id's transport) and encoded into native memory.
 *
 * @module
 */

import { layouts } from "../ffi/native.ts";
import { NativeBlock } from "../ffi/memory.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { PrivateDataLimits } from "../types/enums.ts";
import { asBytes, type Bytes } from "../types/bytes.ts";
import { checkInteger } from "../types/check.ts";

/** Options of `connect` and `accept` (`struct rdma_conn_param`). */
export interface ConnParam {
  /** Private data sent to the peer (see {@link privateDataLimit} for the limits). */
  privateData?: Bytes;
  /** Incoming RDMA reads/atomics this side accepts at once (0..255; 255 = device max). Default 1. */
  responderResources?: number;
  /** Outgoing RDMA reads/atomics this side issues at once (0..255; 255 = device max). Default 1. */
  initiatorDepth?: number;
  /** Whether hardware flow control is available (ignored by most transports). */
  flowControl?: boolean;
  /** Transport retries on timeout, 0..7 (connect only). Default 7. */
  retryCount?: number;
  /** Retries after receiver-not-ready, 0..7 (7 = forever). Default 7. */
  rnrRetryCount?: number;
  /** Whether the QP uses a shared receive queue (only when the id has no QP). */
  srq?: boolean;
  /** The QP number (only when the id has no QP created through the CM). */
  qpNum?: number;
}

/** The operations with a private-data limit. */
export type PrivateDataOp = "connect" | "accept" | "reject";

/** What decides the limit: the transport, whether the id is UD, whether it uses AF_IB addresses. */
export interface PrivateDataContext {
  /** `"ib"` for InfiniBand and RoCE (IB CM), `"iwarp"` for iWARP (MPA). */
  transport: "ib" | "iwarp";
  /** True for ids in the UDP and IPoIB port spaces (SIDR). */
  ud: boolean;
  /** True for ids bound to native IB addresses (no rdma_cm header). */
  afIb: boolean;
}

/** The most private data `op` may carry on an id described by `ctx` (bytes). */
export function privateDataLimit(op: PrivateDataOp, ctx: PrivateDataContext): number {
  if (ctx.transport === "iwarp") {
    return PrivateDataLimits.iwarp[op];
  }
  const ib = PrivateDataLimits.ib;
  if (ctx.ud) {
    if (op === "connect") return ctx.afIb ? ib.udConnectAfIb : ib.udConnect;
    return op === "accept" ? ib.udAccept : ib.udReject;
  }
  if (op === "connect") return ctx.afIb ? ib.connectAfIb : ib.connect;
  return op === "accept" ? ib.accept : ib.reject;
}

/** Throws {@link InvalidArgumentError} when `data` is longer than `op` allows on this id. */
export function checkPrivateData(
  op: PrivateDataOp,
  privateData: Bytes | undefined | null,
  ctx: PrivateDataContext,
): void {
  if (privateData === undefined || privateData === null) return;
  const data = asBytes(privateData, `${op}: privateData`);
  const limit = privateDataLimit(op, ctx);
  if (data.length > limit) {
    const where = ctx.transport === "iwarp"
      ? "iWARP (MPA)"
      : `${ctx.ud ? "UD (SIDR)" : "RC"} over the IB CM${ctx.afIb ? " (AF_IB)" : ""}`;
    throw new InvalidArgumentError(
      `${op}: private data is ${data.length} bytes; the limit for ${op} on ${where} is ${limit}`,
    );
  }
}

function u(name: string, v: number | undefined, max: number, dflt: number): number {
  return v === undefined ? dflt : checkInteger(name, v, 0, max);
}

/** A validated, encoded `rdma_conn_param` in native memory; `free()` releases it. */
export interface NativeConnParam {
  /** The `struct rdma_conn_param *`. */
  readonly ptr: NativePointer;
  /** Frees the struct and its private data copy. */
  free(): void;
}

/**
 * Validates `param` for `op` on an id described by `ctx` and encodes it. Throws
 * {@link InvalidArgumentError} before anything reaches librdmacm.
 */
export function encodeConnParam(
  op: "connect" | "accept",
  param: ConnParam,
  ctx: PrivateDataContext,
): NativeConnParam {
  if (typeof param !== "object" || param === null) {
    throw new InvalidArgumentError(`${op}: the connection parameters must be an object`);
  }
  checkPrivateData(op, param.privateData, ctx);
  const privateData = param.privateData ? asBytes(param.privateData, "privateData") : undefined;
  const responder = u("responderResources", param.responderResources, 255, 1);
  const initiator = u("initiatorDepth", param.initiatorDepth, 255, 1);
  const retry = u("retryCount", param.retryCount, 7, 7);
  const rnr = u("rnrRetryCount", param.rnrRetryCount, 7, 7);
  const qpNum = u("qpNum", param.qpNum, 0xffffff, 0);
  const C = layouts().rdma_conn_param;
  const pd = privateData && privateData.length > 0 ? privateData : null;
  const block = new NativeBlock(C.size, 8);
  const data = pd ? NativeBlock.from(pd) : null;
  const v = block.view;
  const f = C.fields;
  block.setPointer(f.private_data.offset, data?.ptr ?? null);
  v.setUint8(f.private_data_len.offset, pd ? pd.length : 0);
  v.setUint8(f.responder_resources.offset, responder);
  v.setUint8(f.initiator_depth.offset, initiator);
  v.setUint8(f.flow_control.offset, param.flowControl ? 1 : 0);
  v.setUint8(f.retry_count.offset, retry);
  v.setUint8(f.rnr_retry_count.offset, rnr);
  v.setUint8(f.srq.offset, param.srq ? 1 : 0);
  v.setUint32(f.qp_num.offset, qpNum, true);
  return {
    ptr: block.ptr,
    free() {
      block.free();
      data?.free();
    },
  };
}
