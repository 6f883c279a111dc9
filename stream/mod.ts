/**
 * Socket-shaped RDMA connections that speak rsocket's wire protocol, so they talk to C programs
 * using rsockets (`rstream`, `riostream`, `rcopy`, any socket program under
 * `LD_PRELOAD=librspreload.so`) as well as to each other.
 *
 * ```ts
 * import { connect, listen } from "jsr:@rdma/verbs";
 *
 * const listener = listen({ hostname: "10.0.2.15", port: 7471 });
 * (async () => {
 *   for await (const conn of listener) {
 *     const buf = new Uint8Array(65536);
 *     for (let n; (n = await conn.read(buf)) !== null;) await conn.write(buf.subarray(0, n));
 *     conn.close();
 *   }
 * })();
 *
 * const conn = await connect({ hostname: "10.0.2.15", port: 7471 });
 * await conn.write(new TextEncoder().encode("hello"));
 * ```
 *
 * See `stream/README.md` for the protocol, the defaults and what is not implemented.
 *
 * @module
 */

export { RdmaConn } from "./conn.ts";
export { connect } from "./connect.ts";
export {
  type ConnectOptions,
  type ConnInfo,
  IOMAP_SIZE_DEFAULT,
  type IoOptions,
  KEEPALIVE_DEFAULT_MS,
  KEEPALIVE_PROBES,
  READ_DEPTH_DEFAULT,
  type ReadOptions,
  REMOTE_QUEUE_DEPTH_DEFAULT,
  STREAM_SPIN_MAX_MICROS,
  type StreamOptions,
} from "./options.ts";
export { listen, type ListenOptions, RdmaListener } from "./listener.ts";
export { type IomapOptions, IoMapping } from "./iomap.ts";
export {
  ExposedMemory,
  type ExposeOptions,
  RemoteBuffer,
  STAGING_SLOT_SIZE,
  STAGING_SLOTS,
} from "./remote.ts";
export {
  ConnectionRefusedError,
  ConnectionResetError,
  InvalidTokenError,
  NoIomapSlotError,
  ProtocolError,
  RemoteAccessError,
  RevokedError,
  UnmappedOffsetError,
} from "./errors.ts";
export { iomapEntries, RSOCKET_DEFAULTS } from "./protocol.ts";
export type { RdmaAddr } from "../cm/address.ts";
