/**
 * The safe libibverbs object layer: devices, contexts, PDs, MRs, MWs, CQs,
 * completion channels, QPs, SRQs, AHs, work requests and async events.
 *
 * @module
 */

export { Context, openDevice } from "./context.ts";
export type { DeviceAttr, DeviceAttrEx, GidEntry, PortAttr } from "./device-attr.ts";
export { ProtectionDomain } from "./pd.ts";
export { checkAccess, MemoryRegion, type RegisterOptions, type RemoteAddress } from "./mr.ts";
export { MemoryWindow } from "./mw.ts";
export { CompletionQueue, type CompletionTarget, type CqInit } from "./cq.ts";
export { CompletionChannel } from "./channel.ts";
export { WorkCompletion, type WorkCompletionData } from "./wc.ts";
export {
  type ConnectOptions,
  type GrantedCap,
  type QpCap,
  type QpInit,
  QueuePair,
  type RemoteEndpoint,
} from "./qp.ts";
export type { QpAttr, QpAttrs } from "./qp-attr.ts";
export { SharedReceiveQueue, type SrqAttr, type SrqInit } from "./srq.ts";
export { AddressHandle, type AhAttr, type GlobalRoute } from "./ah.ts";
export type { RecvWr, Remote, SendWr, Sge } from "./wr.ts";
export { PreparedRecv, PreparedSend } from "./prepared.ts";
export { InvalidWorkRequestError, PostError, QpStateError } from "./post-errors.ts";
export type { AsyncEvent } from "./async-event.ts";
export { formatGid, type GidLike, parseGid } from "./gid.ts";
export { Resource } from "./resource.ts";
