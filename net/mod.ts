/**
 * RDMA stream connections shaped like `node:net`: {@link createServer}, {@link connect} /
 * {@link createConnection}, and a {@link Socket} that is a `node:stream` `Duplex` with the usual
 * events and backpressure. Code written for `node:net` sockets - `node:http`'s own server and
 * client among it - runs over RDMA in Deno and in Bun; the peer can be a C program using
 * rsockets.
 *
 * ```ts
 * import * as net from "jsr:@rdma/verbs/net";
 * import http from "node:http";
 *
 * // node:http's server, fed RDMA connections
 * const httpServer = http.createServer((req, res) => res.end(`hello ${req.url}\n`));
 * net.serveHttp(httpServer).listen(8080, "10.0.2.15");
 *
 * // node:http's client over one RDMA connection per request
 * http.get({ path: "/x", createConnection: () => net.connect(8080, "10.0.2.15") }, (res) => {
 *   res.on("data", (chunk) => console.log(String(chunk)));
 * });
 * ```
 *
 * See `net/README.md` for what is supported, what is not, and why.
 *
 * @module
 */

export {
  type AddressInfo,
  connect,
  createConnection,
  type NetConnectOptions,
  Socket,
  type SocketOptions,
  type SocketReadyState,
} from "./socket.ts";
export {
  createServer,
  type DropInfo,
  type ListenOptions,
  Server,
  type ServerOptions,
} from "./server.ts";
export { type ConnectionSink, serveHttp } from "./http.ts";
export { type CodedError, NetArgumentError } from "./errors.ts";
// the types the layer's API names, and the errors its sockets report
export type { IoOptions, RdmaAddr, RdmaConn, StreamOptions } from "../stream/mod.ts";
export { ConnectionRefusedError, ConnectionResetError } from "../stream/mod.ts";
export { AbortedError, ClosedError, InvalidArgumentError, RdmaError } from "../types/errors.ts";
