/**
 * @rdma/verbs — RDMA (libibverbs and librdmacm) for Deno and Bun.
 *
 * ```ts
 * import { listDevices } from "jsr:@rdma/verbs";
 * for (const d of listDevices()) console.log(d.name, d.guid);
 * ```
 *
 * @module
 */

export { type DeviceInfo, listDevices } from "./verbs/devices.ts";
export { configureNative, type LibraryPaths, native } from "./ffi/native.ts";
export type { FnPointerPath, Native, PreparedCall } from "./types/native.ts";
export type { CType, FunctionSpec, NativePointer, Pointer } from "./types/ctypes.ts";
export {
  AbortedError,
  ClosedError,
  InvalidArgumentError,
  LibraryNotFoundError,
  NativeError,
  NoDeviceError,
  RdmaError,
  UnsupportedError,
} from "./types/errors.ts";
export { Errno, errnoName } from "./types/errno.ts";
export {
  asyncEvents,
  type AsyncEventSource,
  awaitCompletions,
  cancelCompletionWaits,
  CompletionPump,
  type CompletionRecord,
  completions,
  type CompletionSource,
  type CompletionView,
  type CompletionWaitOptions,
  DEFAULT_SPIN_MICROS,
  DEFAULT_STRATEGY,
  type EventChannel,
  eventStream,
  type EventStreamOptions,
  FdWatch,
  type HoldCounter,
  nextEvent,
  Poller,
  type PollerOptions,
  type PumpOptions,
  type Strategy,
  unwatchChannel,
  type WaitOptions,
  workCompletionError,
  WorkRequestTracker,
} from "./poller/mod.ts";
export * from "./types/enums.ts";
export {
  type AddressFamily,
  type AddressInput,
  AF_IB,
  AF_INET,
  AF_INET6,
  decodeSockaddr,
  encodeSockaddr,
  formatIPv6,
  parseIPv4,
  parseIPv6,
  type SocketAddress,
} from "./cm/address.ts";
export { type AddrInfo, type AddrInfoHints, getAddrInfo } from "./cm/addrinfo.ts";
export { EventChannel as CmEventChannel } from "./cm/channel.ts";
export {
  checkPrivateData,
  type ConnParam,
  type PrivateDataContext,
  privateDataLimit,
  type PrivateDataOp,
} from "./cm/conn_param.ts";
export {
  connect,
  type Connection,
  type ConnectOptions as CmConnectOptions,
  listen,
  Listener,
  type ListenOptions,
} from "./cm/connect.ts";
export {
  type AhAttrData,
  type CmEvent,
  cmEventName,
  type ConnEventParam,
  type UdEventParam,
} from "./cm/event.ts";
export { CmId, type CmWaitOptions } from "./cm/id.ts";
export { CmEventError } from "./types/errors.ts";
export {
  AddressHandle,
  type AhAttr,
  type AsyncEvent,
  CompletionChannel,
  CompletionQueue,
  type CompletionTarget,
  type ConnectOptions,
  Context,
  type CqInit,
  type DeviceAttr,
  type DeviceAttrEx,
  formatGid,
  type GidEntry,
  type GidLike,
  type GlobalRoute,
  type GrantedCap,
  InvalidWorkRequestError,
  MemoryRegion,
  MemoryWindow,
  openDevice,
  parseGid,
  type PortAttr,
  PostError,
  PreparedRecv,
  PreparedSend,
  ProtectionDomain,
  type QpAttr,
  type QpAttrs,
  type QpCap,
  type QpInit,
  QpStateError,
  QueuePair,
  type RecvWr,
  type RegisterOptions,
  type Remote,
  type RemoteAddress,
  type RemoteEndpoint,
  type SendWr,
  type Sge,
  SharedReceiveQueue,
  type SrqAttr,
  type SrqInit,
  WorkCompletion,
  type WorkCompletionData,
} from "./verbs/mod.ts";
export { WorkCompletionError } from "./types/errors.ts";
export { type CmQpInit, createCmQp } from "./cm/qp.ts";
export { toAhAttr, type UdDestination, udDestination } from "./cm/ud.ts";
