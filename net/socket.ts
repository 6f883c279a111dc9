/**
 * {@link Socket}: an RDMA stream connection as a `node:net`-shaped `Duplex`, and
 * {@link connect}/{@link createConnection}, the client side.
 *
 * One read loop per socket reads the connection into a reused buffer and pushes a copy of what
 * arrived; it stops when `push()` says the readable side is full (a paused socket, or a consumer
 * slower than the peer) and starts again on the stream's next `_read()`, so an unread socket
 * holds at most `readableHighWaterMark` plus one read, and the peer's writes wait for credits.
 * Writes go to `RdmaConn.write`, which resolves once the bytes are in the send ring: until then
 * the `Duplex` buffers, `write()` returns false past `writableHighWaterMark`, and `drain` follows.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import process from "node:process";
import { Duplex } from "node:stream";
import { clearTimeout, setTimeout } from "node:timers";
import { connect as streamConnect, type RdmaConn, type StreamOptions } from "../stream/mod.ts";
import { AbortedError } from "../types/errors.ts";
import {
  checkHost,
  checkPort,
  closedError,
  type CodedError,
  NetArgumentError,
  withCode,
} from "./errors.ts";

/** Bytes one read takes from the connection (rsocket's largest message is 64 KiB). */
const READ_CHUNK = 65536;

/** An address as `address()` reports it, shaped like `node:net`'s `AddressInfo`. */
export interface AddressInfo {
  /** The numeric address. */
  address: string;
  /** `"IPv4"` or `"IPv6"`. */
  family: string;
  /** The port. */
  port: number;
}

/** The keys of the stream layer's options that sockets and servers pass through. */
export const STREAM_OPTION_KEYS = [
  "sendBufferSize",
  "receiveBufferSize",
  "sendQueueDepth",
  "receiveQueueDepth",
  "inlineSize",
  "strategy",
  "spinMicros",
  "poller",
  "lingerMs",
] as const satisfies readonly (keyof StreamOptions)[];

/** The stream options among `o`. */
export function pickStreamOptions(o: StreamOptions): StreamOptions {
  const out: Record<string, unknown> = {};
  for (const k of STREAM_OPTION_KEYS) if (o[k] !== undefined) out[k] = o[k];
  return out as StreamOptions;
}

/** Options of `new Socket()`. */
export interface SocketOptions {
  /**
   * An established connection to wrap (from `stream`'s `connect()` or `RdmaListener.accept()`);
   * without it the socket is unconnected until {@link Socket.connect}.
   */
  conn?: RdmaConn;
  /** Keep the writable side open after the peer ended its side (default false: end it too). */
  allowHalfOpen?: boolean;
  /** Both high-water marks (bytes). */
  highWaterMark?: number;
  /** The readable side's high-water mark (bytes; the runtime's default otherwise). */
  readableHighWaterMark?: number;
  /** The writable side's high-water mark (bytes; the runtime's default otherwise). */
  writableHighWaterMark?: number;
  /** Destroys the socket (with an `AbortedError`, code `ABORT_ERR`) when aborted. */
  signal?: AbortSignal;
}

/** Options of {@link connect} and {@link Socket.connect}: `node:net`'s, plus the stream layer's. */
export interface NetConnectOptions extends StreamOptions {
  /** The port (a number or a string of digits). */
  port: number | string;
  /** Host name or numeric address (default `"localhost"`, as `node:net`). */
  host?: string;
  /** Local address to connect from (the stream layer's `source`). */
  localAddress?: string;
  /** Accepted for compatibility: the address family follows from `host`. */
  family?: number;
  /** Idle timeout in ms: `socket.setTimeout(timeout)` before connecting (a `timeout` event). */
  timeout?: number;
  /** Gives up connecting after this many ms (`ETIMEDOUT`); default: rdma_cm's own limits. */
  connectTimeout?: number;
  /** `socket.setNoDelay(noDelay)` (writes are never delayed anyway). */
  noDelay?: boolean;
  /** `socket.setKeepAlive(true, keepAliveInitialDelay)` once connected. */
  keepAlive?: boolean;
  /** The keepalive idle time in ms. */
  keepAliveInitialDelay?: number;
  /** Destroys the socket (`ABORT_ERR`) when aborted, connecting or not. */
  signal?: AbortSignal;
  /** See {@link SocketOptions.allowHalfOpen}. */
  allowHalfOpen?: boolean;
  /** See {@link SocketOptions.highWaterMark}. */
  highWaterMark?: number;
  /** See {@link SocketOptions.readableHighWaterMark}. */
  readableHighWaterMark?: number;
  /** See {@link SocketOptions.writableHighWaterMark}. */
  writableHighWaterMark?: number;
}

/** `socket.readyState`, as `node:net`. */
export type SocketReadyState = "opening" | "open" | "readOnly" | "writeOnly" | "closed";

/** What the layer calls on a connection when the connection offers it. */
interface ConnExtras {
  ref?(): void;
  unref?(): void;
  setKeepAlive?(enable: boolean, initialDelayMs?: number): void;
}

const noop = () => {};

function familyOf(address: string): string {
  return address.includes(":") ? "IPv6" : "IPv4";
}

/** Options of the connect half of `connect()`'s arguments, normalized like `node:net`. */
export function normalizeConnectArgs(
  args: unknown[],
): { options: NetConnectOptions; cb?: () => void } {
  let cb: (() => void) | undefined;
  if (typeof args[args.length - 1] === "function") cb = args.pop() as () => void;
  const [a, b] = args;
  if (a !== null && typeof a === "object") return { options: a as NetConnectOptions, cb };
  if (typeof a === "number" || typeof a === "string") {
    if (typeof a === "string" && !/^\s*\d+\s*$/.test(a)) {
      throw new NetArgumentError(
        "ERR_INVALID_ARG_VALUE",
        `connecting to a path (${
          JSON.stringify(a)
        }) is not supported: RDMA streams have ports only`,
      );
    }
    const options: NetConnectOptions = { port: a };
    if (b !== undefined && b !== null) options.host = b as string;
    return { options, cb };
  }
  throw new NetArgumentError(
    "ERR_MISSING_ARGS",
    "connect needs a port, or options with a port",
  );
}

/**
 * An RDMA stream connection as a `node:stream` `Duplex` shaped like `node:net`'s `Socket`:
 * events `connect`, `ready`, `data`, `end`, `close` (with `hadError`), `error`, `drain`,
 * `timeout`; `write()`/`end()`/`destroy()`, `setTimeout`, `setNoDelay`, `setKeepAlive`,
 * `ref`/`unref`, `address()`, `remoteAddress`/`remotePort`/`remoteFamily`,
 * `localAddress`/`localPort`, `bytesRead`/`bytesWritten`, `readyState`, `pending`,
 * `connecting`. Made by {@link connect}, by a {@link Server} for each incoming connection, or
 * with `new Socket({ conn })` around an `RdmaConn`. Destroying it closes the connection
 * (`RdmaConn.close()`: rsocket's DISCONNECT, then the release in the background).
 */
export class Socket extends Duplex {
  #conn: RdmaConn | null = null;
  #ready: Promise<RdmaConn> | null = null;
  #connecting = false;
  #connectAbort: AbortController | null = null;
  #reading = false;
  #pulled = false;
  #readBuf: Uint8Array | null = null;
  #bytesRead = 0;
  #bytesWritten = 0;
  #timeoutMs = 0;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #lastActive = 0;
  #keepAlive: { enable: boolean; delay: number } | null = null;
  #noDelay = true;
  #refed = true;
  #signal: AbortSignal | null = null;
  #onAbort: (() => void) | null = null;

  /** Creates a socket: connected around `options.conn`, else unconnected until `connect()`. */
  constructor(options: SocketOptions = {}) {
    if (options === null || typeof options !== "object") {
      throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "Socket options must be an object");
    }
    super({
      allowHalfOpen: options.allowHalfOpen ?? false,
      emitClose: false, // `close` carries hadError, as node:net's
      decodeStrings: true,
      ...(options.highWaterMark !== undefined ? { highWaterMark: options.highWaterMark } : {}),
      ...(options.readableHighWaterMark !== undefined
        ? { readableHighWaterMark: options.readableHighWaterMark }
        : {}),
      ...(options.writableHighWaterMark !== undefined
        ? { writableHighWaterMark: options.writableHighWaterMark }
        : {}),
    });
    if (options.signal !== undefined) this.#watchSignal(options.signal);
    if (options.conn !== undefined) {
      const conn = options.conn;
      if (conn === null || typeof conn !== "object" || typeof conn.read !== "function") {
        throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "options.conn must be an RdmaConn");
      }
      this.#attach(conn);
    }
  }

  // ------------------------------------------------------------------ state

  /** The wrapped connection once connected (null before, and the same after close). */
  get conn(): RdmaConn | null {
    return this.#conn;
  }

  /** True while `connect()` is in progress. */
  get connecting(): boolean {
    return this.#connecting;
  }

  /** True until the socket is connected (and while connecting). */
  get pending(): boolean {
    return this.#conn === null || this.#connecting;
  }

  /** `"opening"` while connecting, then `"open"`, `"readOnly"`, `"writeOnly"`, `"closed"`. */
  get readyState(): SocketReadyState {
    if (this.#connecting) return "opening";
    if (this.readable && this.writable) return "open";
    if (this.readable) return "readOnly";
    if (this.writable) return "writeOnly";
    return "closed";
  }

  /** Bytes received (delivered to the readable side). */
  get bytesRead(): number {
    return this.#bytesRead;
  }

  /** Bytes sent (every byte of completed writes is in the connection's send ring). */
  get bytesWritten(): number {
    return this.#bytesWritten;
  }

  /** The idle timeout set with {@link Socket.setTimeout} (ms; 0: none). */
  get timeout(): number {
    return this.#timeoutMs;
  }

  /** The peer's numeric address (undefined until connected). */
  get remoteAddress(): string | undefined {
    return this.#conn?.remoteAddr.hostname;
  }

  /** The peer's port (undefined until connected). */
  get remotePort(): number | undefined {
    return this.#conn?.remoteAddr.port;
  }

  /** `"IPv4"` or `"IPv6"` (undefined until connected). */
  get remoteFamily(): string | undefined {
    const a = this.#conn?.remoteAddr.hostname;
    return a === undefined ? undefined : familyOf(a);
  }

  /** This side's numeric address (undefined until connected). */
  get localAddress(): string | undefined {
    return this.#conn?.localAddr.hostname;
  }

  /** This side's port (undefined until connected). */
  get localPort(): number | undefined {
    return this.#conn?.localAddr.port;
  }

  /** `"IPv4"` or `"IPv6"` (undefined until connected). */
  get localFamily(): string | undefined {
    const a = this.#conn?.localAddr.hostname;
    return a === undefined ? undefined : familyOf(a);
  }

  /** This side's address, `{ address, family, port }` (`{}` until connected, as `node:net`). */
  address(): AddressInfo | Record<string, never> {
    const a = this.#conn?.localAddr;
    return a ? { address: a.hostname, family: familyOf(a.hostname), port: a.port } : {};
  }

  // ------------------------------------------------------------------ options

  /**
   * Emits `timeout` once the socket has been idle (nothing read or written) for `ms`; 0 turns it
   * off. Like `node:net`, the socket is not closed: a `timeout` listener decides. The timer never
   * keeps the process alive. `cb` is added as a one-time `timeout` listener.
   */
  setTimeout(ms: number, cb?: () => void): this {
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
      throw new NetArgumentError(
        "ERR_OUT_OF_RANGE",
        `the timeout must be a finite number >= 0 (ms), got ${String(ms)}`,
      );
    }
    if (cb !== undefined && typeof cb !== "function") {
      throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "the timeout callback must be a function");
    }
    this.#timeoutMs = ms;
    this.#clearTimer();
    if (cb) {
      if (ms === 0) this.removeListener("timeout", cb);
      else this.once("timeout", cb);
    }
    if (ms > 0 && !this.destroyed) {
      this.#lastActive = performance.now();
      this.#armTimer(ms);
    }
    return this;
  }

  /**
   * Accepted for compatibility; returns the socket. RDMA streams never delay a write to batch
   * it (there is no Nagle algorithm to turn off): a write is posted as soon as the send ring
   * and the peer's credits allow.
   */
  setNoDelay(noDelay = true): this {
    this.#noDelay = noDelay !== false;
    return this;
  }

  /**
   * Turns keepalive on or off (`initialDelay`: the idle time before the first probe, ms). It is
   * applied through the connection's `setKeepAlive` when the connection has one, now or once
   * connected; on a connection without it this only records the setting.
   */
  setKeepAlive(enable = false, initialDelay = 0): this {
    if (typeof initialDelay !== "number" || !(initialDelay >= 0)) initialDelay = 0;
    this.#keepAlive = { enable: !!enable, delay: initialDelay };
    if (this.#conn) this.#applyKeepAlive(this.#conn);
    return this;
  }

  /** The keepalive setting last asked for (`null`: never set). */
  get keepAlive(): { enable: boolean; initialDelay: number } | null {
    const k = this.#keepAlive;
    return k ? { enable: k.enable, initialDelay: k.delay } : null;
  }

  /** Whether `setNoDelay` was last asked for true (the default). */
  get noDelay(): boolean {
    return this.#noDelay;
  }

  /**
   * Lets the socket keep the process alive again after {@link Socket.unref} (the connection's
   * `ref`, when it has one).
   */
  ref(): this {
    this.#refed = true;
    (this.#conn as ConnExtras | null)?.ref?.();
    return this;
  }

  /**
   * Lets the process exit while this socket is open and idle: calls the connection's `unref`
   * when it has one (a pending read then no longer keeps the event loop alive).
   */
  unref(): this {
    this.#refed = false;
    (this.#conn as ConnExtras | null)?.unref?.();
    return this;
  }

  // ------------------------------------------------------------------ connect

  /**
   * Connects an unconnected socket: `connect(port[, host][, cb])` or `connect(options[, cb])`.
   * Emits `connect` and `ready` when established; a failure destroys the socket with the
   * error (`ECONNREFUSED`, `ETIMEDOUT`, ...). `cb` is a one-time `connect` listener.
   */
  connect(options: NetConnectOptions, cb?: () => void): this;
  /** See the overload above. */
  connect(port: number | string, host?: string, cb?: () => void): this;
  /** See the overload above. */
  connect(port: number | string, cb?: () => void): this;
  connect(...args: unknown[]): this {
    const { options, cb } = normalizeConnectArgs(args);
    if (this.#connecting) {
      throw new NetArgumentError("ERR_SOCKET_CONNECTING", "the socket is already connecting");
    }
    if (this.#conn || this.destroyed) {
      throw new NetArgumentError(
        "ERR_SOCKET_CONNECTING",
        this.destroyed
          ? "a destroyed socket cannot connect again: make a new one"
          : "the socket is already connected",
      );
    }
    const port = checkPort(options.port, "options.port");
    const host = checkHost(options.host ?? "localhost", "options.host");
    if (options.localAddress !== undefined) checkHost(options.localAddress, "options.localAddress");
    const connectTimeout = options.connectTimeout;
    if (
      connectTimeout !== undefined &&
      !(typeof connectTimeout === "number" && connectTimeout >= 0 &&
        Number.isFinite(connectTimeout))
    ) {
      throw new NetArgumentError(
        "ERR_OUT_OF_RANGE",
        `options.connectTimeout must be a finite number >= 0, got ${String(connectTimeout)}`,
      );
    }
    if (options.timeout !== undefined) this.setTimeout(options.timeout);
    if (options.noDelay !== undefined) this.setNoDelay(options.noDelay);
    if (options.keepAlive) this.setKeepAlive(true, options.keepAliveInitialDelay ?? 0);
    if (options.signal !== undefined) this.#watchSignal(options.signal);
    if (cb) this.once("connect", cb);
    if (this.destroyed) return this; // the signal had already fired

    this.#connecting = true;
    const abort = this.#connectAbort = new AbortController();
    const where = { address: host, port, timedOut: false };
    const ready = streamConnect({
      ...pickStreamOptions(options),
      hostname: host,
      port,
      source: options.localAddress,
      signal: abort.signal,
      timeout: connectTimeout,
    }).then(
      (conn) => {
        this.#connecting = false;
        this.#connectAbort = null;
        if (this.destroyed) {
          conn.close();
          throw closedError("Socket", "ERR_SOCKET_CLOSED");
        }
        this.#attach(conn);
        try {
          this.emit("connect");
          this.emit("ready");
        } catch (e) {
          // a listener's exception is the program's, uncaught as in node:net
          process.nextTick(() => {
            throw e;
          });
        }
        return conn;
      },
      (e: unknown) => {
        this.#connecting = false;
        this.#connectAbort = null;
        if (!this.destroyed) {
          where.timedOut = e instanceof AbortedError && !abort.signal.aborted;
          this.destroy(withCode(e, where));
        }
        throw e;
      },
    );
    ready.catch(noop); // failures reach the user as the socket's `error`
    this.#ready = ready;
    return this;
  }

  // ------------------------------------------------------------------ Duplex

  /** @internal Starts (or keeps) the read loop. */
  override _read(): void {
    if (this.#reading) {
      this.#pulled = true;
      return;
    }
    const conn = this.#conn;
    if (conn) this.#readLoop(conn);
    else if (this.#ready) this.#ready.then(() => this._read(), noop);
  }

  async #readLoop(conn: RdmaConn): Promise<void> {
    this.#reading = true;
    const buf = this.#readBuf ??= new Uint8Array(READ_CHUNK);
    try {
      for (;;) {
        let n: number | null;
        try {
          n = await conn.read(buf);
        } catch (e) {
          if (!this.destroyed) this.destroy(withCode(e));
          return;
        }
        if (this.destroyed) return;
        if (n === null) {
          this.push(null);
          return;
        }
        this.#bytesRead += n;
        this.#touch();
        // a full readable side stops the loop, unless push() itself asked for more (a consumer
        // reading synchronously in its `data` handler calls _read while the loop still runs).
        // An exception thrown by a `data` listener is not the connection's: it escapes, uncaught,
        // as it would from a node:net socket
        this.#pulled = false;
        if (!this.push(Buffer.from(buf.subarray(0, n))) && !this.#pulled) return;
      }
    } finally {
      this.#reading = false;
    }
  }

  /** @internal One write: resolves once the bytes are in the send ring. */
  override _write(
    chunk: Buffer,
    _encoding: BufferEncoding,
    cb: (error?: Error | null) => void,
  ): void {
    this.#send(chunk).then(() => cb(), (e) => cb(this.destroyed ? null : withCode(e)));
  }

  /** @internal Buffered writes (corked, or queued behind a pending one) go as one write. */
  override _writev(
    chunks: { chunk: Buffer; encoding: BufferEncoding }[],
    cb: (error?: Error | null) => void,
  ): void {
    const data = chunks.length === 1 ? chunks[0].chunk : Buffer.concat(chunks.map((c) => c.chunk));
    this.#send(data).then(() => cb(), (e) => cb(this.destroyed ? null : withCode(e)));
  }

  async #send(data: Uint8Array): Promise<void> {
    const conn = this.#conn ?? await this.#whenConnected();
    await conn.write(data);
    this.#bytesWritten += data.length;
    this.#touch();
  }

  #whenConnected(): Promise<RdmaConn> {
    if (this.#ready && this.#connecting) return this.#ready;
    return Promise.reject(closedError("Socket (not connected)", "ERR_SOCKET_CLOSED"));
  }

  /** @internal `end()`: rsocket's SHUTDOWN once every write is in the ring. */
  override _final(cb: (error?: Error | null) => void): void {
    (async () => {
      const conn = this.#conn ?? await this.#whenConnected();
      await conn.closeWrite();
    })().then(() => cb(), (e) => cb(this.destroyed ? null : withCode(e)));
  }

  /** @internal Closes the connection (idempotent through the stream's own close). */
  override _destroy(err: Error | null, cb: (error?: Error | null) => void): void {
    this.#clearTimer();
    this.#connectAbort?.abort();
    this.#connectAbort = null;
    if (this.#signal && this.#onAbort) this.#signal.removeEventListener("abort", this.#onAbort);
    this.#onAbort = null;
    try {
      this.#conn?.close();
    } catch {
      // closing is best effort; the error that destroyed the socket is the one to report
    }
    cb(err);
    process.nextTick(() => this.emit("close", err != null));
  }

  /** Ends the writable side, then destroys the socket once everything was written. */
  destroySoon(): void {
    if (this.writable) this.end();
    if (this.writableFinished) this.destroy();
    else this.once("finish", () => this.destroy());
  }

  /**
   * Closes the connection at once, like {@link Socket.destroy}. `node:net` sends a TCP RST here;
   * rsocket has no reset, so the peer sees rsocket's DISCONNECT (an orderly end of stream).
   */
  resetAndDestroy(): this {
    return this.destroy();
  }

  // ------------------------------------------------------------------ internals

  #attach(conn: RdmaConn): void {
    this.#conn = conn;
    if (this.#keepAlive) this.#applyKeepAlive(conn);
    if (!this.#refed) (conn as ConnExtras).unref?.();
    this.#lastActive = performance.now();
  }

  #applyKeepAlive(conn: RdmaConn): void {
    const k = this.#keepAlive!;
    (conn as ConnExtras).setKeepAlive?.(k.enable, k.delay);
  }

  #watchSignal(signal: AbortSignal): void {
    if (!(signal instanceof AbortSignal)) {
      throw new NetArgumentError("ERR_INVALID_ARG_TYPE", "options.signal must be an AbortSignal");
    }
    const abort = () => {
      const e = new AbortedError("the socket was aborted by its signal", {
        cause: signal.reason,
      }) as CodedError;
      e.code = "ABORT_ERR";
      this.destroy(e);
    };
    if (signal.aborted) {
      abort();
      return;
    }
    if (this.#signal && this.#onAbort) this.#signal.removeEventListener("abort", this.#onAbort);
    this.#signal = signal;
    this.#onAbort = abort;
    signal.addEventListener("abort", abort, { once: true });
  }

  #armTimer(ms: number): void {
    const t = setTimeout(this.#onTimer, ms);
    t.unref?.();
    this.#timer = t;
  }

  readonly #onTimer = (): void => {
    this.#timer = null;
    const ms = this.#timeoutMs;
    if (ms <= 0 || this.destroyed) return;
    const idle = performance.now() - this.#lastActive;
    if (idle + 1 < ms) {
      this.#armTimer(ms - idle);
      return;
    }
    this.emit("timeout"); // once per idle period: the next read or write arms it again
  };

  /**
   * Records activity; arms the idle timer again after it fired. Without an idle timeout it reads
   * no clock (`setTimeout()` starts the idle period itself).
   */
  #touch(): void {
    if (this.#timeoutMs <= 0) return;
    this.#lastActive = performance.now();
    if (this.#timer === null && !this.destroyed) this.#armTimer(this.#timeoutMs);
  }

  #clearTimer(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
  }
}

/**
 * Connects to `host:port` over RDMA and returns the {@link Socket} at once (it emits `connect`
 * when established, or `error` then `close`): `connect(port[, host][, cb])` or
 * `connect(options[, cb])`, as `node:net`'s `connect`. The peer is an rsocket-compatible
 * listener: a {@link Server}, the stream layer's `listen()`, or a C program using rsockets.
 */
export function connect(options: NetConnectOptions, cb?: () => void): Socket;
/** See the overload above. */
export function connect(port: number | string, host?: string, cb?: () => void): Socket;
/** See the overload above. */
export function connect(port: number | string, cb?: () => void): Socket;
export function connect(...args: unknown[]): Socket {
  const { options, cb } = normalizeConnectArgs(args);
  const socket = new Socket({
    allowHalfOpen: options.allowHalfOpen,
    highWaterMark: options.highWaterMark,
    readableHighWaterMark: options.readableHighWaterMark,
    writableHighWaterMark: options.writableHighWaterMark,
  });
  return socket.connect(options, cb);
}

/** The same as {@link connect} (`node:net` has both names). */
export const createConnection: typeof connect = connect;
