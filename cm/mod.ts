/**
 * The safe layer over librdmacm: event channels, CM ids, address and route resolution,
 * listen/connect/accept/reject/disconnect, UD and multicast. Every operation that completes with
 * an event returns a promise; the channel's non-blocking fd is watched by the poller, and each
 * event is copied out and acked at once. See `cm/README.md` for the flows and teardown rules.
 *
 * @module
 */

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
} from "./address.ts";
export { type AddrInfo, type AddrInfoHints, getAddrInfo } from "./addrinfo.ts";
export { CmEventChannel, type CmEventChannelOptions } from "./channel.ts";
export {
  checkPrivateData,
  type ConnParam,
  type PrivateDataContext,
  privateDataLimit,
  type PrivateDataOp,
} from "./conn_param.ts";
export {
  cmConnect,
  type CmConnection,
  type CmConnectOptions,
  cmListen,
  CmListener,
  type CmListenOptions,
} from "./connect.ts";
export { type CmEvent, cmEventName, type ConnEventParam, type UdEventParam } from "./event.ts";
export { CmId } from "./id.ts";
export {
  CmIdBase,
  type CmQpInit,
  type DisconnectOptions,
  type JoinMulticastOptions,
  type ResolveOptions,
} from "./id-base.ts";
export { createEndpoint, type EndpointOptions, type EndpointQpInit } from "./endpoint.ts";
export type { MsgBuffer, MsgOptions } from "./id-verbs.ts";
export type { PathInput, PathRecord } from "./path.ts";
export { udDestination } from "./ud.ts";
