/**
 * {@link RdmaConn}: one rsocket-compatible stream connection, used like `Deno.Conn` — `read`,
 * `write`, `readable`/`writable` web streams, `closeWrite`, `close` — and {@link connect}, the
 * active side.
 *
 * How it runs on the event loop: reads and writes first try the engine synchronously (data
 * already received, room in the send ring and credits); only when they must wait do they join
 * the connection's wait list (the library's `WaitList`), and one pump per connection then waits
 * for completions through the poller (default strategy), feeds them to the engine and wakes the
 * waits. The pump stops when nobody waits, so an idle connection costs no CPU and does not keep
 * the process alive. While the pump runs it also watches the connection manager: a DISCONNECTED
 * without rsocket's own DISCONNECT message first means the peer went away, and pending and
 * later operations fail with {@link ConnectionResetError}.
 *
 * @module
 */

import { setImmediate } from "node:timers";
import { NativeResource } from "../ffi/resource.ts";
import {
  ClosedError,
  CmEventError,
  InvalidArgumentError,
  NativeError,
  type RdmaError,
} from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { CmEventType, WcStatus } from "../types/enums.ts";
import { awaitCompletions, type CompletionWaitOptions } from "../poller/completions.ts";
import type { Poller } from "../poller/poller.ts";
import { WaitList, type WaitOptions } from "../poller/wait.ts";
import type { Strategy } from "../poller/completions.ts";
import { CmEventChannel } from "../cm/channel.ts";
import type { CmId } from "../cm/id.ts";
import { numericHost } from "../cm/connect.ts";
import type { SocketAddress } from "../cm/address.ts";
import { RECV_WR_ID, type StreamEngine } from "./engine.ts";
import { ConnectionRefusedError, ConnectionResetError } from "./errors.ts";
import { decodeConnData, encodeConnData, RSOCKET_DEFAULTS } from "./protocol.ts";
import { type StreamSizes, VerbsTransport } from "./transport.ts";

/** The options every stream takes: sizes (rsocket's defaults) and how completions are awaited. */
export interface StreamOptions {
  /** Send ring bytes (default 128 KiB, rsocket's `wmem_default`). */
  sendBufferSize?: number;
  /** Receive ring bytes, even (default 128 KiB, rsocket's `mem_default`). */
  receiveBufferSize?: number;
  /** Send queue depth (default 384; clamped to 16..min(device, 65534)). */
  sendQueueDepth?: number;
  /** Receive queue depth and initial credits (default 384; same clamp). */
  receiveQueueDepth?: number;
  /** Writes up to this many bytes go inline (default 64; the QP may grant more). */
  inlineSize?: number;
  /** How waits for completions are done (default: the poller's default strategy). */
  strategy?: Strategy;
  /** Spin budget of the adaptive strategy in µs (default: learned per CQ). */
  spinMicros?: number;
  /** The poller to wait through (default: the shared one). */
  poller?: Poller;
  /**
   * How long `close()` lets in-flight data and rsocket's DISCONNECT reach the peer, and waits
   * for the connection manager's disconnect, before releasing everything (ms, default 3000).
   */
  lingerMs?: number;
}

/** An address of a stream endpoint, shaped like `Deno.NetAddr`. */
export interface RdmaAddr {
  /** Always `"rdma"`. */
  readonly transport: "rdma";
  /** The numeric IP address. */
  readonly hostname: string;
  /** The port (rdma_cm's TCP port space). */
  readonly port: number;
}

/** Options of {@link RdmaConn.read}, {@link RdmaConn.write} and {@link RdmaConn.closeWrite}. */
export type IoOptions = WaitOptions;

/** Options of {@link connect}. */
export interface ConnectOptions extends StreamOptions, WaitOptions {
  /** Host name or numeric address (names resolve through `rdma_getaddrinfo`). */
  hostname: string;
  /** Port. */
  port: number;
  /** Local address to connect from (default: the one the route picks). */
  source?: string;
}

/** The resolved sizes of `options`, each checked. */
export function streamSizes(o: StreamOptions = {}): StreamSizes {
  const d = RSOCKET_DEFAULTS;
  return {
    sendBufferSize: o.sendBufferSize ?? d.sendBufferSize,
    receiveBufferSize: o.receiveBufferSize ?? d.receiveBufferSize,
    sendQueueDepth: o.sendQueueDepth ?? d.sendQueueDepth,
    receiveQueueDepth: o.receiveQueueDepth ?? d.receiveQueueDepth,
    inlineSize: o.inlineSize ?? d.inlineSize,
  };
}

function toAddr(a: SocketAddress | null): RdmaAddr {
  return { transport: "rdma", hostname: a?.address ?? "", port: a?.port ?? 0 };
}

const construct = Symbol("RdmaConn");

const noop = () => {};
const yieldMacrotask = (): Promise<void> => new Promise((r) => setImmediate(r));

/**
 * How long a connection keeps its connection-manager watch after its last wait (ms): long
 * enough that a ping-pong reuses it, short enough that an idle process exits promptly.
 */
const SESSION_IDLE_MS = 25;

/** How the connection ends its native side: what to close after the CM id. */
export interface ConnOwnership {
  /** The CM event channel to close when the connection is released (active side). */
  readonly channel?: CmEventChannel;
  /** Called once when the connection is released (a listener counts its connections). */
  readonly release?: () => void;
}

interface Session {
  readonly ctrl: AbortController;
  readonly opts: CompletionWaitOptions;
}

/**
 * One stream connection speaking rsocket's protocol. Made by {@link connect} and by
 * `RdmaListener.accept()`.
 *
 * - `read(p)` resolves with the number of bytes copied into `p`, or null at the end of the
 *   stream (the peer's `closeWrite`/shutdown or close, after every byte was read).
 * - `write(p)` resolves with `p.length` once every byte is in the send ring (posted to the
 *   device): it waits while credits, ring space or send WRs are exhausted (backpressure).
 *   Writes are serialized; bytes of two writes never interleave.
 * - `closeWrite()` sends rsocket's SHUTDOWN after the pending writes and resolves when every
 *   send has completed; the peer reads null after the last byte.
 * - `close()` is synchronous and idempotent: pending operations reject with `ClosedError`, and
 *   in the background the connection sends rsocket's DISCONNECT, lets in-flight sends finish,
 *   disconnects and frees everything (bounded by `lingerMs`); `await conn.released` (or
 *   `await using`) waits for that.
 * - Every wait takes `{ signal, timeout }`. When the peer vanishes (its process dies, its device
 *   goes away, a work request fails) operations reject with {@link ConnectionResetError}
 *   (reads return the bytes that had arrived first).
 */
export class RdmaConn extends NativeResource implements AsyncDisposable {
  /** This side's address. */
  readonly localAddr: RdmaAddr;
  /** The peer's address. */
  readonly remoteAddr: RdmaAddr;
  readonly #id: CmId;
  readonly #t: VerbsTransport;
  readonly #e: StreamEngine;
  readonly #own: ConnOwnership;
  readonly #linger: number;
  readonly #waitOpts: { strategy?: Strategy; spinMicros?: number; poller?: Poller };
  readonly #waiters = new WaitList<void>();
  readonly #writeLock = new WaitList<void>();
  #writing = false;
  #pumping = false;
  #session: Session | null = null;
  #idleSince = 0;
  #sessionTimer: ReturnType<typeof setTimeout> | null = null;
  #cmGone = false;
  #reset: RdmaError | null = null;
  #cause: Error | null = null;
  #released: Promise<void> | null = null;
  #readable: ReadableStream<Uint8Array> | null = null;
  #writable: WritableStream<Uint8Array> | null = null;

  readonly #onCmDisconnected = () => {
    this.#cmGone = true;
    this.#session?.ctrl.abort();
    this.#session = null;
  };
  readonly #onCmError = (e: unknown) => {
    if (e instanceof CmEventError) {
      this.#cause = e;
      this.#onCmDisconnected();
    }
  };
  readonly #onWaitEnded = () => {
    if (this.#waiters.size === 0) this.#endSession();
  };
  readonly #checkSession = () => {
    this.#sessionTimer = null;
    if (!this.#session || this.#pumping) return; // a running pump re-arms this when it stops
    const left = this.#idleSince + SESSION_IDLE_MS - performance.now();
    if (left > 0) this.#sessionTimer = setTimeout(this.#checkSession, left);
    else this.#endSession();
  };

  /** Not for direct use: {@link connect} and `RdmaListener.accept()` make connections. */
  constructor(
    id: CmId,
    transport: VerbsTransport,
    own: ConnOwnership,
    options: StreamOptions,
    token: symbol,
  ) {
    if (token !== construct) {
      throw new InvalidArgumentError("RdmaConn is made by connect() or accept()");
    }
    super("RdmaConn", []);
    this.#id = id;
    this.#t = transport;
    this.#e = transport.engine;
    this.#own = own;
    this.#linger = options.lingerMs ?? 3000;
    this.#waitOpts = {
      strategy: options.strategy,
      spinMicros: options.spinMicros,
      poller: options.poller,
    };
    this.localAddr = toAddr(id.localAddress);
    this.remoteAddr = toAddr(id.peerAddress);
    this.#guard(() => this.#e.updateCredits()); // advertise the second half of the ring now
  }

  /** The sizes the connection runs with (after the device's clamps and grants). */
  get info(): {
    sendBufferSize: number;
    receiveBufferSize: number;
    sendQueueDepth: number;
    receiveQueueDepth: number;
    inlineSize: number;
    transport: "ib" | "iwarp";
  } {
    const e = this.#e;
    return {
      sendBufferSize: e.sendBufferSize,
      receiveBufferSize: e.receiveBufferSize,
      sendQueueDepth: e.sendQueueDepth,
      receiveQueueDepth: e.receiveQueueDepth,
      inlineSize: e.inlineSize,
      transport: e.messageSend ? "iwarp" : "ib",
    };
  }

  /** Resolves once the native side is released after {@link RdmaConn.close}. */
  get released(): Promise<void> {
    return this.#released ?? Promise.resolve();
  }

  // ---------------------------------------------------------------- reads

  /**
   * Reads into `p`: resolves with the number of bytes (at least 1), or null at the end of the
   * stream. Waits until data arrives.
   */
  async read(p: Uint8Array, options?: IoOptions): Promise<number | null> {
    this.assertOpen();
    if (p.length === 0) return 0;
    const e = this.#e;
    for (;;) {
      const n = e.read(p, 0, p.length);
      if (n > 0) {
        this.#guard(() => e.updateCredits());
        return n;
      }
      if (n < 0) {
        if (e.failed || this.#reset) throw this.#resetError();
        return null;
      }
      await this.#wait(options);
    }
  }

  // ---------------------------------------------------------------- writes

  /** Writes all of `p`; resolves with `p.length` once every byte is in the send ring. */
  async write(p: Uint8Array, options?: IoOptions): Promise<number> {
    this.assertOpen();
    if (this.#writing) await this.#lock(options);
    this.#writing = true;
    try {
      let off = 0;
      const len = p.length;
      while (off < len) {
        const n = this.#send(p, off, len - off);
        if (n < 0) throw this.#writeError();
        off += n;
        if (off < len) await this.#wait(options);
      }
      return len;
    } finally {
      this.#unlock();
    }
  }

  /**
   * Ends this side's sending (rsocket SHUTDOWN, or DISCONNECT when the peer already ended
   * its side) after the pending writes; resolves when every send has completed. The peer's
   * reads return null after the last byte; this side can still read. Idempotent.
   */
  async closeWrite(options?: IoOptions): Promise<void> {
    this.assertOpen();
    if (this.#writing) await this.#lock(options);
    this.#writing = true;
    try {
      const e = this.#e;
      if (e.writable) {
        const ctrl = e.shutdown("write");
        while (e.connected && !this.#guard(() => e.postControl(ctrl))) await this.#wait(options);
      }
      while (!e.allSendsDone()) await this.#wait(options);
      if (this.#reset) throw this.#reset;
    } finally {
      this.#unlock();
    }
  }

  // ---------------------------------------------------------------- web streams

  /** The receiving side as a byte stream (BYOB reads go straight into the reader's buffer). */
  get readable(): ReadableStream<Uint8Array> {
    return this.#readable ??= new ReadableStream({
      type: "bytes",
      autoAllocateChunkSize: 65536,
      pull: async (c: ReadableByteStreamController) => {
        const req = c.byobRequest!;
        const v = req.view!;
        const n = await this.read(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
        if (n === null) {
          c.close();
          req.respond(0);
        } else req.respond(n);
      },
    });
  }

  /** The sending side as a stream; closing it is {@link RdmaConn.closeWrite}. */
  get writable(): WritableStream<Uint8Array> {
    return this.#writable ??= new WritableStream<Uint8Array>({
      write: async (chunk) => {
        await this.write(chunk);
      },
      close: () => this.closeWrite(),
      abort: () => this.close(),
    });
  }

  // ---------------------------------------------------------------- close

  /** Starts the teardown (see the class); idempotent. */
  override close(): void {
    super.close();
  }

  /** Closes and waits until the native side is released. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
    await this.released;
  }

  /** Rejects pending operations and starts the background teardown (called once by close). */
  protected destroy(): void {
    const err = new ClosedError("RdmaConn");
    this.#waiters.rejectAll(err);
    this.#writeLock.rejectAll(err);
    this.#endSession();
    this.#released = this.#teardown();
  }

  async #teardown(): Promise<void> {
    const deadline = performance.now() + this.#linger;
    const e = this.#e;
    try {
      while (this.#pumping) await yieldMacrotask();
      const cq = this.#t.cq;
      for (let n = cq.poll(); n > 0; n = cq.poll()) this.#process(n);
      // after the connection manager's DISCONNECTED nobody answers: no goodbye to send
      if (e.connected && (this.#cmGone || !this.#id.connected)) e.reset();
      if (e.connected) {
        const ctrl = e.shutdown("both");
        while (e.connected && !this.#guard(() => e.postControl(ctrl))) await this.#step(deadline);
        while (!e.allSendsDone()) await this.#step(deadline);
      }
    } catch {
      // out of time, or the QP failed: disconnect anyway
    }
    try {
      await this.#id.disconnect({ timeout: Math.max(1, deadline - performance.now()) });
    } catch {
      // the id is closed below regardless
    }
    for (
      const f of [() => this.#id.close(), () => this.#t.close(), () => this.#own.channel?.close()]
    ) {
      try {
        f();
      } catch {
        // releasing the rest matters more than one failed destroy
      }
    }
    this.#own.release?.();
  }

  /** One completion wait for the teardown (the pump has stopped). */
  async #step(deadline: number): Promise<void> {
    const left = deadline - performance.now();
    if (left <= 0) throw new ClosedError("RdmaConn (linger time over)");
    const n = await awaitCompletions(this.#t.cq, { ...this.#waitOpts, timeout: left });
    this.#process(n);
  }

  // ---------------------------------------------------------------- internals

  /** Runs a step that may post; a failing post fails the stream (returns false then). */
  #guard(f: () => boolean | void): boolean {
    try {
      return f() !== false;
    } catch (err) {
      this.#failWith(err as Error);
      return false;
    }
  }

  #send(p: Uint8Array, off: number, len: number): number {
    try {
      return this.#e.write(p, off, len);
    } catch (err) {
      this.#failWith(err as Error);
      return -1;
    }
  }

  #failWith(err: Error): void {
    this.#cause ??= err;
    this.#e.reset();
    try {
      this.#t.qp.toError();
    } catch {
      // already in error or gone
    }
    this.#waiters.resolveAll();
  }

  #resetError(): RdmaError {
    if (this.#reset) return this.#reset;
    const e = this.#e;
    const cause = this.#cause ?? (e.errorStatus ? this.#wcError : null);
    const why = this.#cmGone
      ? "the peer disconnected without rsocket's DISCONNECT (it exited or was killed)"
      : e.errorStatus === WcStatus.WR_FLUSH_ERR
      ? "the queue pair was flushed (the peer went away)"
      : e.errorStatus
      ? `a work request failed (status ${e.errorStatus})`
      : "the connection failed";
    this.#reset = new ConnectionResetError(`connection reset: ${why}`, { cause });
    return this.#reset;
  }

  #wcError: Error | null = null;

  #writeError(): RdmaError {
    const e = this.#e;
    if (e.failed || this.#reset) return this.#resetError();
    if (e.disconnected || !e.connected) {
      return new ConnectionResetError("connection reset: the peer closed the connection");
    }
    return new ClosedError("RdmaConn (write side; closeWrite was called)");
  }

  async #lock(options: IoOptions | undefined): Promise<void> {
    while (this.#writing) await this.#writeLock.add(options, undefined, "RdmaConn write");
  }

  #unlock(): void {
    this.#writing = false;
    if (this.#writeLock.size > 0) this.#writeLock.resolveFirst(() => true);
  }

  #wait(options: IoOptions | undefined): Promise<void> {
    const p = this.#waiters.add(options, undefined, "RdmaConn");
    if (options && (options.signal || options.timeout !== undefined)) {
      p.then(noop, this.#onWaitEnded);
    }
    if (!this.#pumping) this.#pump();
    return p;
  }

  /** Stops watching the connection manager (and a pump waiting for completions). */
  #endSession(): void {
    this.#session?.ctrl.abort();
    this.#session = null;
    if (this.#sessionTimer !== null) {
      clearTimeout(this.#sessionTimer);
      this.#sessionTimer = null;
    }
  }

  #newSession(): Session {
    const ctrl = new AbortController();
    if (!this.#cmGone) {
      this.#id.waitDisconnected({ signal: ctrl.signal }).then(
        this.#onCmDisconnected,
        this.#onCmError,
      );
    }
    return { ctrl, opts: { ...this.#waitOpts, signal: ctrl.signal } };
  }

  /**
   * Waits for completions while anyone waits; feeds them to the engine; wakes the waits. The
   * session (the connection manager watch and the wait options) outlives the pump by
   * {@link SESSION_IDLE_MS}, so a ping-pong does not start a new one per message.
   */
  async #pump(): Promise<void> {
    this.#pumping = true;
    try {
      while (!this.closed) {
        if (this.#waiters.size === 0) {
          // the woken operations continue as microtasks: give them a few turns to come back
          for (let i = 0; i < 8 && this.#waiters.size === 0; i++) await Promise.resolve();
          if (this.#waiters.size === 0 || this.closed) break;
        }
        if (this.#cmGone && this.#e.connected) this.#settleDisconnect();
        if (!this.#e.connected) {
          // nothing more will complete for the waits: let them see the final state
          this.#waiters.resolveAll();
          continue;
        }
        const s = this.#session ??= this.#newSession();
        let n: number;
        try {
          n = await awaitCompletions(this.#t.cq, s.opts);
        } catch (err) {
          if (s.ctrl.signal.aborted) continue;
          this.#failWith(err as Error);
          continue;
        }
        this.#process(n);
        this.#waiters.resolveAll();
      }
    } finally {
      this.#pumping = false;
      if (this.closed || !this.#session) this.#endSession();
      else {
        this.#idleSince = performance.now();
        this.#sessionTimer ??= setTimeout(this.#checkSession, SESSION_IDLE_MS);
      }
    }
  }

  /**
   * The connection manager saw DISCONNECTED while the stream is still connected: take what
   * already completed (rsocket's DISCONNECT may be among it), and if the stream is still
   * connected the peer left without it: a reset.
   */
  #settleDisconnect(): void {
    const cq = this.#t.cq;
    for (let n = cq.poll(); n > 0; n = cq.poll()) this.#process(n);
    if (this.#e.connected) {
      this.#e.reset();
      this.#cause ??= new CmEventError(
        "RdmaConn",
        CmEventType.DISCONNECTED,
        "RDMA_CM_EVENT_DISCONNECTED",
        0,
        null,
      );
      try {
        this.#t.qp.toError();
      } catch {
        // already in error
      }
    }
    this.#waiters.resolveAll();
  }

  /** Feeds `n` polled completions to the engine, then re-posts receives and grants credits. */
  #process(n: number): void {
    const cq = this.#t.cq;
    const e = this.#e;
    for (let i = 0; i < n; i++) {
      const wc = cq.completion(i);
      const id = wc.wrIdNumber;
      const st = wc.status;
      if (st !== 0 && this.#wcError === null) this.#wcError = wc.error();
      if (id >= RECV_WR_ID) {
        e.completeRecv(id, st, st === 0 && wc.hasImm, st === 0 ? wc.immData : 0);
      } else e.completeSend(id, st);
    }
    this.#guard(() => {
      e.afterCompletions();
      this.#t.flushReceives();
    });
  }
}

/** Makes a connection object (module-private to the stream layer). */
export function newConn(
  id: CmId,
  transport: VerbsTransport,
  own: ConnOwnership,
  options: StreamOptions,
): RdmaConn {
  return new RdmaConn(id, transport, own, options, construct);
}

/** Maps "nobody accepted" failures of the connection manager to {@link ConnectionRefusedError}. */
export function refusedOr(e: unknown, where: string): unknown {
  if (e instanceof CmEventError) {
    const t = e.event;
    if (t === CmEventType.REJECTED || t === CmEventType.UNREACHABLE) {
      return new ConnectionRefusedError(`connection to ${where} refused (${e.eventName})`, {
        cause: e,
      });
    }
  }
  if (e instanceof NativeError && e.errno === Errno.ECONNREFUSED) {
    return new ConnectionRefusedError(`connection to ${where} refused`, { cause: e });
  }
  return e;
}

/**
 * Connects to an rsocket listener (this library's `listen()`, or a C program using rsockets)
 * and resolves with the connection once it is established.
 */
export async function connect(options: ConnectOptions): Promise<RdmaConn> {
  if (typeof options !== "object" || options === null) {
    throw new InvalidArgumentError("connect options must be an object");
  }
  const { hostname, port, signal, timeout } = options;
  const sizes = streamSizes(options);
  const host = numericHost(hostname, false);
  const wait = { signal, timeout };
  const channel = new CmEventChannel({ poller: options.poller });
  let t: VerbsTransport | undefined;
  let id: CmId | undefined;
  try {
    id = channel.createId("TCP");
    const source = options.source === undefined
      ? undefined
      : { address: numericHost(options.source, true) };
    await id.resolveAddress({ address: host, port }, { ...wait, source });
    await id.resolveRoute(wait);
    t = new VerbsTransport(id, sizes);
    t.engine.postInitialReceives();
    t.flushReceives();
    const ev = await id.connect({
      privateData: encodeConnData(t.engine.localConnData()),
      responderResources: 0,
      initiatorDepth: t.messageSend ? 1 : 0, // iWARP reads during connection setup
      flowControl: true,
      retryCount: 7,
      rnrRetryCount: 7,
    }, wait);
    t.engine.establish(decodeConnData(ev.privateData));
    return newConn(id, t, { channel }, options);
  } catch (e) {
    for (const f of [() => id?.close(), () => t?.close(), () => channel.close()]) {
      try {
        f();
      } catch {
        // the first error is the one to report
      }
    }
    throw refusedOr(e, `${hostname}:${port}`);
  }
}
