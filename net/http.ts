/**
 * {@link serveHttp}: hands the connections of a {@link Server} to an HTTP server of the runtime's
 * `node:http` (or anything that takes sockets through a `connection` event).
 *
 * @module
 */

import { NetArgumentError } from "./errors.ts";
import { createServer, type Server } from "./server.ts";
import type { Socket } from "./socket.ts";

/** What {@link serveHttp} needs of an HTTP server: `node:http`'s `Server` has it. */
export interface ConnectionSink {
  /** Called with `"connection"` and each accepted socket. */
  emit(event: "connection", socket: Socket): unknown;
  /** Whether the server counts as listening. */
  readonly listening?: boolean;
}

/**
 * Feeds every connection of `server` (a new {@link Server} by default) to `httpServer` the way
 * `node:http` expects foreign sockets: `httpServer.emit("connection", socket)`. Returns
 * `server`; call its `listen()`.
 *
 * It also lets `httpServer.listening` follow `server.listening` when the HTTP server itself
 * never listened: Deno's `node:http` closes a kept-alive connection after each response when
 * its server is not listening (Node and Bun keep it open), so without this every request would
 * need a new RDMA connection in Deno.
 */
export function serveHttp(httpServer: ConnectionSink, server: Server = createServer()): Server {
  if (httpServer === null || typeof httpServer?.emit !== "function") {
    throw new NetArgumentError(
      "ERR_INVALID_ARG_TYPE",
      'serveHttp needs a server with emit("connection", socket), e.g. node:http\'s createServer()',
    );
  }
  server.on("connection", (socket: Socket) => httpServer.emit("connection", socket));
  if (!httpServer.listening) {
    Object.defineProperty(httpServer, "listening", {
      configurable: true,
      enumerable: false,
      get: () => server.listening,
    });
  }
  return server;
}
