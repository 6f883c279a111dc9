/**
 * {@link Server} and {@link createServer}: the passive side of the `node:net` layer, an
 * `EventEmitter` over the stream layer's `listen()` that emits each accepted connection as a
 * {@link Socket}.
 *
 * @module
 */

import { EventEmitter } from "node:events";
import process from "node:process";
import { setTimeout } from "node:timers";
import { listen, type RdmaConn, type RdmaListener, type StreamOptions } from "../stream/mod.ts";
import { ConnectionRefusedError, ConnectionResetError } from "../stream/mod.ts";
import { AbortedError, CmEventError } from "../types/errors.ts";
import { checkHost, checkPort, closedError, NetArgumentError, withCode } from "./errors.ts";
import { type AddressInfo, pickStreamOptions, Socket } from "./socket.ts";

/** Options of {@link createServer}: `node:net`'s, plus the stream layer's (for every connection). */
export interface ServerOptions extends StreamOptions {
  /** Keep a socket's writable side open after its peer ended (default false). */
  allowHalfOpen?: boolean;
  /** Accepted sockets start paused: nothing is read until `socket.resume()` (default false). */
  pauseOnConnect?: boolean;
  /** `socket.setNoDelay(noDelay)` on every accepted socket (writes are never delayed anyway). */
  noDelay?: boolean;
  /** `socket.setKeepAlive(true, keepAliveInitialDelay)` on every accepted socket. */
  keepAlive?: boolean;
  /** The keepalive idle time in ms. */
  keepAliveInitialDelay?: number;
  /** High-water mark of every accepted socket (both sides, bytes). */
  highWaterMark?: number;
}

/** Options of {@link Server.listen} in its object form. */
export interface ListenOptions {
  /** The port (0 or absent: the kernel picks one; see `address()`). */
  port?: number | string;
  /** The local address or name (default `"0.0.0.0"`: every IPv4 address). */
  host?: string;
  /** Connection requests the kernel queues (default: its own). */
  backlog?: number;
  /** Closes the server when aborted. */
  signal?: AbortSignal;
  /** Accepted for compatibility (rdma_cm ids are not shared between processes). */
  exclusive?: boolean;
  /** Accepted for compatibility. */
  ipv6Only?: boolean;
}

/** What `drop` reports about a connection refused because of `maxConnections`. */
export interface DropInfo {
  /** This side's address. */
  localAddress: string;
  /** This side's port. */
  localPort: number;
  /** `"IPv4"` or `"IPv6"`. */
  localFamily: string;
  /** The peer's address. */
  remoteAddress: string;
  /** The peer's port. */
  remotePort: number;
  /** `"IPv4"` or `"IPv6"`. */
  remoteFamily: string;
}

const family = (a: string) => (a.includes(":") ? "IPv6" : "IPv4");

/** Failures of one incoming connection (its client gave up or went away), not of the listener. */
function perConnection(e: unknown): boolean {
  return e instanceof CmEventError || e instanceof ConnectionResetError ||
    e instanceof ConnectionRefusedError || e instanceof AbortedError;
}

/**
 * An RDMA stream server shaped like `node:net`'s `Server`: `listen()`, the events `listening`,
 * `connection` (a {@link Socket}), `close` (once stopped and every connection has closed),
 * `error`, `drop`; `address()`, `close([cb])`, `getConnections(cb)`, `maxConnections`,
 * `ref()`/`unref()`. Its peers are the layer's {@link connect}, the stream layer's `connect()`,
 * and C programs using rsockets (any socket program under `LD_PRELOAD=librspreload.so`).
 */
export class Server extends EventEmitter {
  /** Incoming connections past this many open ones are closed at once (`drop` is emitted). */
  maxConnections: number | undefined = undefined;
  readonly #options: ServerOptions;
  #listener: RdmaListener | null = null;
  readonly #sockets = new Set<Socket>();
  #closed = true;
  #closeScheduled = false;
  #refed = true;

  /** Creates a server; `connectionListener` is added as a `connection` listener. */
  constructor(options?: ServerOptions, connectionListener?: (socket: Socket) => void);
  /** See the overload above. */
  constructor(connectionListener?: (socket: Socket) => void);
  constructor(
    a?: ServerOptions | ((socket: Socket) => void),
    b?: (socket: Socket) => void,
  ) {
    super();
    let options: ServerOptions = {};
    let listener = b;
    if (typeof a === "function") listener = a;
    else if (a !== undefined && a !== null) {
      if (typeof a !== "object") {
        throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "server options must be an object");
      }
      options = a;
    }
    if (listener !== undefined) {
      if (typeof listener !== "function") {
        throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "connectionListener must be a function");
      }
      this.on("connection", listener);
    }
    this.#options = options;
  }

  /** True while the server accepts connections. */
  get listening(): boolean {
    return this.#listener !== null;
  }

  /**
   * Starts listening: `listen(port[, host][, backlog][, cb])`, `listen(options[, cb])` or
   * `listen([cb])` (a port the kernel picks, every IPv4 address). `listening` is emitted on the
   * next tick; a failure to bind (`EADDRINUSE`, no RDMA device on that address, ...) is emitted
   * as `error`. `cb` is a one-time `listening` listener.
   */
  listen(port?: number | string, host?: string, backlog?: number, cb?: () => void): this;
  /** See the overload above. */
  listen(port: number | string, host: string, cb?: () => void): this;
  /** See the overload above. */
  listen(port: number | string, backlog: number, cb?: () => void): this;
  /** See the overload above. */
  listen(port: number | string, cb?: () => void): this;
  /** See the overload above. */
  listen(options: ListenOptions, cb?: () => void): this;
  /** See the overload above. */
  listen(cb?: () => void): this;
  listen(...args: unknown[]): this {
    let cb: (() => void) | undefined;
    if (typeof args[args.length - 1] === "function") cb = args.pop() as () => void;
    let o: ListenOptions;
    const [a, ...rest] = args;
    if (a !== null && typeof a === "object") {
      o = a as ListenOptions;
      for (const k of ["path", "fd", "handle"]) {
        if ((o as Record<string, unknown>)[k] !== undefined) {
          throw new NetArgumentError(
            "ERR_INVALID_ARG_VALUE",
            `listen({ ${k} }) is not supported: RDMA streams listen on an address and port`,
          );
        }
      }
    } else {
      if (typeof a === "string" && !/^\s*\d+\s*$/.test(a)) {
        throw new NetArgumentError(
          "ERR_INVALID_ARG_VALUE",
          `listening on a path (${
            JSON.stringify(a)
          }) is not supported: RDMA streams have ports only`,
        );
      }
      o = { port: a as number | string | undefined };
      for (const r of rest) {
        if (typeof r === "string") o.host = r;
        else if (typeof r === "number") o.backlog = r;
        else if (r !== undefined && r !== null) {
          throw new NetArgumentError(
            "ERR_INVALID_ARG_TYPE",
            "listen(port, host, backlog, cb): host must be a string and backlog a number",
          );
        }
      }
    }
    const port = o.port === undefined || o.port === null ? 0 : checkPort(o.port, "options.port");
    const host = checkHost(o.host ?? "0.0.0.0", "options.host");
    const backlog = o.backlog ?? 0;
    if (!Number.isInteger(backlog) || backlog < 0) {
      throw new NetArgumentError(
        "ERR_OUT_OF_RANGE",
        `backlog must be an integer >= 0, got ${String(backlog)}`,
      );
    }
    if (this.#listener) {
      throw new NetArgumentError("ERR_SERVER_ALREADY_LISTEN", "the server is already listening");
    }
    if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) {
      throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "options.signal must be an AbortSignal");
    }
    if (o.signal?.aborted) return this;
    if (cb) this.once("listening", cb);
    let l: RdmaListener;
    try {
      l = listen({ ...pickStreamOptions(this.#options), hostname: host, port, backlog });
    } catch (e) {
      process.nextTick(() => this.emit("error", withCode(e)));
      return this;
    }
    this.#listener = l;
    this.#closed = false;
    if (!this.#refed) (l as { unref?: () => void }).unref?.();
    o.signal?.addEventListener("abort", () => this.close(), { once: true });
    process.nextTick(() => {
      if (this.#listener === l) this.emit("listening");
    });
    this.#acceptLoop(l);
    return this;
  }

  async #acceptLoop(l: RdmaListener): Promise<void> {
    while (!l.closed) {
      let conn: RdmaConn;
      try {
        conn = await l.accept();
      } catch (e) {
        if (l.closed) return;
        if (perConnection(e)) continue; // that client gave up or went away
        this.emit("error", withCode(e));
        // a failure of the listener itself: do not spin on it
        await new Promise((r) => setTimeout(r, 100).unref?.());
        continue;
      }
      if (this.#listener !== l) {
        conn.close();
        return;
      }
      this.#onConnection(conn);
    }
  }

  #onConnection(conn: RdmaConn): void {
    const max = this.maxConnections;
    if (max !== undefined && max !== null && this.#sockets.size >= max) {
      const info: DropInfo = {
        localAddress: conn.localAddr.hostname,
        localPort: conn.localAddr.port,
        localFamily: family(conn.localAddr.hostname),
        remoteAddress: conn.remoteAddr.hostname,
        remotePort: conn.remoteAddr.port,
        remoteFamily: family(conn.remoteAddr.hostname),
      };
      conn.close();
      this.emit("drop", info);
      return;
    }
    const o = this.#options;
    const socket = new Socket({
      conn,
      allowHalfOpen: o.allowHalfOpen,
      highWaterMark: o.highWaterMark,
    });
    if (o.noDelay !== undefined) socket.setNoDelay(o.noDelay);
    if (o.keepAlive) socket.setKeepAlive(true, o.keepAliveInitialDelay ?? 0);
    if (o.pauseOnConnect) socket.pause();
    this.#sockets.add(socket);
    socket.once("close", () => {
      this.#sockets.delete(socket);
      this.#emitCloseIfDrained();
    });
    try {
      this.emit("connection", socket);
    } catch (e) {
      // a listener's exception is the program's, uncaught as in node:net; accepting goes on
      process.nextTick(() => {
        throw e;
      });
    }
  }

  /** The bound address, `{ address, family, port }`, or null when not listening. */
  address(): AddressInfo | null {
    const a = this.#listener?.addr;
    return a ? { address: a.hostname, family: family(a.hostname), port: a.port } : null;
  }

  /**
   * Stops accepting connections (requests nobody took are refused); the connections already
   * accepted stay open. `close` is emitted once they have all closed; `cb` is a one-time
   * `close` listener, called with an `ERR_SERVER_NOT_RUNNING` error when the server was not
   * listening. Idempotent.
   */
  close(cb?: (err?: Error) => void): this {
    if (cb !== undefined) {
      if (typeof cb !== "function") {
        throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "the close callback must be a function");
      }
      if (this.#listener) this.once("close", () => cb());
      else {
        this.once("close", () => cb(closedError("Server (not running)", "ERR_SERVER_NOT_RUNNING")));
      }
    }
    const l = this.#listener;
    this.#listener = null;
    this.#closed = true;
    try {
      l?.close();
    } catch (e) {
      process.nextTick(() => this.emit("error", withCode(e)));
    }
    this.#emitCloseIfDrained();
    return this;
  }

  #emitCloseIfDrained(): void {
    if (!this.#closed || this.#sockets.size > 0 || this.#closeScheduled) return;
    this.#closeScheduled = true;
    process.nextTick(() => {
      this.#closeScheduled = false;
      this.emit("close");
    });
  }

  /** Calls `cb(null, count)` with the number of open connections. */
  getConnections(cb: (err: Error | null, count: number) => void): this {
    const n = this.#sockets.size;
    process.nextTick(() => cb(null, n));
    return this;
  }

  /** Lets the listener keep the process alive again (the listener's `ref`, when it has one). */
  ref(): this {
    this.#refed = true;
    (this.#listener as { ref?: () => void } | null)?.ref?.();
    return this;
  }

  /**
   * Lets the process exit while the server waits for connections: calls the listener's `unref`
   * when it has one.
   */
  unref(): this {
    this.#refed = false;
    (this.#listener as { unref?: () => void } | null)?.unref?.();
    return this;
  }

  /** Closes the server and waits for its `close` (every connection closed). */
  [Symbol.asyncDispose](): Promise<void> {
    return new Promise((resolve) => {
      this.once("close", () => resolve());
      this.close();
    });
  }
}

/**
 * Creates a {@link Server}: `createServer([options][, connectionListener])`, as `node:net`.
 * Call `listen()` on it.
 */
export function createServer(
  options?: ServerOptions,
  connectionListener?: (socket: Socket) => void,
): Server;
/** See the overload above. */
export function createServer(connectionListener?: (socket: Socket) => void): Server;
export function createServer(
  a?: ServerOptions | ((socket: Socket) => void),
  b?: (socket: Socket) => void,
): Server {
  return typeof a === "function" ? new Server(a) : new Server(a, b);
}
