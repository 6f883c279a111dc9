/**
 * The safe libibverbs object layer: devices, contexts, PDs, MRs, MWs, CQs,
 * completion channels, QPs, SRQs, AHs, work requests and async events.
 *
 * Decisions a user should know:
 * - Objects are owned by what they depend on: a context owns PDs, CQs and channels; a PD
 *   owns MRs, MWs, QPs, SRQs and AHs; a QP is also closed before its CQs and SRQ, a CQ
 *   before its channel. `close()` closes dependents first (newest first), is idempotent,
 *   and `using` works. Any use of a closed object throws `ClosedError`.
 * - Memory registration grants `LOCAL_WRITE` only unless more is asked for.
 * - A send WR without `flags` is `SIGNALED`; without `opcode` it is a SEND. A zero-length
 *   message has no SGE (`sg: []`); a 0-byte SGE is rejected. `imm` is given in host order.
 * - Work requests have one shape per opcode (`SendWr` is their union); 64-bit values
 *   (`wrId`, addresses, atomic operands) are a bigint or a non-negative safe-integer number.
 * - `postSend`/`postRecv` check every WR first. When WR `i` is invalid, WRs `0..i-1` are
 *   posted (as `ibv_post_send` does up to `bad_wr`) and `InvalidWorkRequestError` reports
 *   `index` i; a provider failure raises `PostError` with the index of `bad_wr`.
 * - Sending on a QP in RESET, INIT or RTR raises `QpStateError` (receives: RESET only).
 * - `cq.poll()` fills a native WC array; `cq.completion(i)` is one reusable cursor.
 *   Prepared WRs (`qp.prepareSend`) and `poll` allocate nothing on the JS heap.
 * - An inline send can carry plain bytes (`inline: Uint8Array`, no MR): copied into the WR
 *   when posted, checked against the QP's granted `maxInlineData`.
 * - `pd.createQpEx` makes a QP that also posts through the `ibv_wr_*` API (`postSendEx`,
 *   `prepareSendEx`, or call by call in a `startBatch()` batch); `context.createCqEx` a CQ
 *   reporting the fields of its `wcFlags`. Both are their classic class too. What the soft
 *   providers lack (timestamps, XRC, rereg, dma-buf, ODP, null MRs) raises UnsupportedError with
 *   the provider's errno; see the feature table in `verbs/README.md`.
 * - Completion-channel and async-event fds are non-blocking: `getEvent()` and
 *   `getAsyncEvent()` return null when nothing is pending. CQ events are acked in
 *   batches and always before the CQ is destroyed; async events are acked on read.
 *
 * @example
 * ```ts
 * import { openDevice, QpType } from "jsr:@rdma/verbs";
 * using ctx = openDevice();
 * const pd = ctx.allocPd();
 * const cq = ctx.createCq({ cqe: 64 });
 * const qp = pd.createQp({ type: QpType.RC, sendCq: cq, cap: { maxInlineData: 64 } });
 * console.log(qp.qpNum, qp.cap.maxInlineData);
 * ```
 *
 * @module
 */

export { Context, type ContextOp, type ExtendedOp, openDevice } from "./context.ts";
export type {
  CqModerationCaps,
  DeviceAttr,
  DeviceAttrEx,
  DeviceCaps,
  OdpCaps,
  OdpPerTransportCaps,
  PacketPacingCaps,
  PciAtomicCaps,
  RssCaps,
  SupportedQpts,
  TmCaps,
  TsoCaps,
} from "./device-attr.ts";
export type { GidEntry, PortAttr } from "./port-attr.ts";
export { type DeviceInfo, listDevices } from "./devices.ts";
export { ProtectionDomain } from "./pd.ts";
export {
  checkAccess,
  type DmabufRange,
  MemoryRegion,
  type RegisterOptions,
  type RemoteAddress,
  type ReregOptions,
} from "./mr.ts";
export { MemoryWindow, type MwBindOptions } from "./mw.ts";
export { CompletionQueue, type CqInit, MAX_POLL_TRIES, TRACKED_WR_ID_BASE } from "./cq.ts";
export { CompletionQueueEx, type CqExInit, WC_STANDARD_FLAGS } from "./cq-ex.ts";
export { CompletionChannel } from "./channel.ts";
export { WorkCompletion, type WorkCompletionData } from "./wc.ts";
export { QueuePair } from "./qp.ts";
export type { QpTransitionOptions, RemoteEndpoint } from "./qp-transition.ts";
export type { CreatableQpType, GrantedCap, QpCap, QpInit } from "./qp-init.ts";
export type { QpAttr, QpAttrs } from "./qp-attr.ts";
export {
  type ExQpType,
  type QpExInit,
  QueuePairEx,
  type SendWrEx,
  type XrcTarget,
} from "./qp-ex.ts";
export { SendBatch } from "./send-batch.ts";
export { PreparedSendEx } from "./prepared-ex.ts";
export { SharedReceiveQueue, type SrqAttr, type SrqInit } from "./srq.ts";
export { type XrcdInit, XrcDomain, XrcRecvQp, XrcSrq, type XrcSrqInit } from "./xrc.ts";
export { AddressHandle, type AhAttr, type AhAttrData, type GlobalRoute } from "./ah.ts";
export {
  type AtomicCmpSwpWr,
  type AtomicFetchAddWr,
  type BindMwWr,
  type InlineData,
  type LocalInvWr,
  type MwBind,
  OPCODE_RULES,
  type OpcodeRule,
  type RdmaReadWr,
  type RdmaWriteWithImmWr,
  type RdmaWriteWr,
  type RecvWr,
  type Remote,
  type SendOpWr,
  type SendWithImmWr,
  type SendWithInvWr,
  type SendWr,
  type SendWrBase,
  type Sge,
  type U64,
  type UdDestination,
} from "./wr.ts";
export { PreparedList, PreparedRecv, PreparedSend } from "./prepared.ts";
export { InvalidWorkRequestError, PostError, QpStateError } from "./post-errors.ts";
export type { AsyncEvent } from "./async-event.ts";
export { formatGid, type GidLike, parseGid } from "./gid.ts";
export { NativeResource } from "../ffi/resource.ts";
