/**
 * {@link RdmaConn}: one rsocket-compatible stream connection, used like `Deno.Conn` - `read`,
 * `write`, `readable`/`writable` web streams, `closeWrite`, `close`; made by `connect()`
 * (connect.ts) and by a listener's `accept()`.
 *
 * How it runs on the event loop (the hot path, as rsocket's `rrecv`/`rsend` with `rpoll`):
 *
 * 1. A read or write works on the engine synchronously: data already received, room in the send
 *    ring and credits. If it cannot, it polls the CQ once and feeds the completions to the
 *    engine (receives re-posted, credits granted), and tries again.
 * 2. Still blocked, it spins: polls the CQ for a bounded budget (strategy `"adaptive"`: learnt
 *    from the spins that caught their answer, at most {@link STREAM_SPIN_MAX_MICROS} µs, or
 *    `spinMicros`; `"busy"`: one slice; `"event"`: none). Data or credits that come within it
 *    resolve the operation with no event-loop turn, no timer and no promise besides the one the
 *    operation returns.
 * 3. Only then it waits: it arms the CQ and drains it, and sleeps (holds the poller) when the
 *    drain finds nothing. The poller hands it the CQ's event synchronously: it drains the CQ,
 *    which wakes the waiting operations, and sleeps again only while some still wait; no
 *    coroutine runs in between. An idle connection costs no CPU and does not keep the process
 *    alive. (`"busy"` runs a pump instead, polling in slices between event-loop turns.)
 *
 * The connection manager's end of the connection (DISCONNECTED, DEVICE_REMOVAL) is observed on
 * the CM id without holding anything, and wakes a sleeping connection. A DISCONNECTED without
 * rsocket's own DISCONNECT message first means the peer went away, and pending and later
 * operations fail with {@link ConnectionResetError}.
 *
 * @module
 */

import { now } from "../ffi/clock.ts";
import { NativeResource } from "../ffi/resource.ts";
import { costs, COUNTING } from "../ffi/cost.ts";
import {
  ClosedError,
  CmEventError,
  InvalidArgumentError,
  type RdmaError,
} from "../types/errors.ts";
import { CmEventType } from "../types/enums.ts";
import {
  BUSY_SLICE_MICROS,
  DEFAULT_STRATEGY,
  SPIN_CLOCK_EVERY,
  SpinBudget,
  type Strategy,
} from "../poller/completions.ts";
import { Poller, PollerHold } from "../poller/poller.ts";
import { WaitList, yieldToLoop } from "../poller/wait.ts";
import { type CmId, observeConnectionEnd } from "../cm/id.ts";
import type { CmEvent } from "../cm/event.ts";
import type { CompletionQueue } from "../verbs/cq.ts";
import { describe } from "../types/check.ts";
import type { StreamEngine } from "./_engine.ts";
import { WR_HIGH_ONE_SIDED, WR_HIGH_RECV } from "./_engine-contract.ts";
import { ConnectionResetError, resetError } from "./errors.ts";
import { ResolvedCount } from "./_resolved-count.ts";
import type { VerbsTransport } from "./_transport.ts";
import type { ConnCore } from "./_core.ts";
import { Keepalive } from "./_keepalive.ts";
import { readableOf, writableOf } from "./_web.ts";
import {
  type ConnInfo,
  type IoOptions,
  LINGER_MS_DEFAULT,
  type ReadOptions,
  STREAM_SPIN_MAX_MICROS,
  type StreamOptions,
} from "./options.ts";
import { type RdmaAddr, toAddr } from "../cm/address.ts";
import { type IomapOptions, type IoMapping, IoMaps } from "./iomap.ts";
import {
  type ExposedMemory,
  type ExposeOptions,
  readToken,
  type RemoteBuffer,
  RemoteOps,
} from "./remote.ts";

const construct = Symbol("RdmaConn");
const noop = () => {};

// what a spin or a wait waits for (module constants: the spin's test compares with them)
const READ = 0;
const WRITE = 1;
const CONTROL = 2;
const SENDS_DONE = 3;
type Want = typeof READ | typeof WRITE | typeof CONTROL | typeof SENDS_DONE | (() => boolean);

/**
 * One stream connection speaking rsocket's protocol. Made by {@link connect} and by
 * `RdmaListener.accept()`.
 *
 * - `read(p)` resolves with the number of bytes copied into `p`, or null at the end of the
 *   stream (the peer's `closeWrite`/shutdown or close, after every byte was read); with
 *   `{ min }` it waits until at least `min` bytes are in `p` (fewer only at the end).
 * - `write(p)` resolves with `p.length` once every byte is in the send ring (posted to the
 *   device): it waits while credits, ring space or send WRs are exhausted (backpressure).
 *   Writes are serialized; bytes of two writes never interleave.
 * - `tryRead(p)` / `tryWrite(p)` do what can be done now and never wait (rsocket's
 *   `MSG_DONTWAIT`).
 * - `closeWrite()` sends rsocket's SHUTDOWN after the pending writes and resolves when every
 *   send has completed; the peer reads null after the last byte.
 * - `close()` is synchronous and idempotent: pending operations reject with `ClosedError`, and
 *   in the background the connection sends rsocket's DISCONNECT, lets in-flight sends finish,
 *   disconnects and frees everything (bounded by `lingerMs`); `await conn.released` (or
 *   `await using`) waits for that.
 * - `ref()` / `unref()`: whether pending operations keep the process alive (they do by default).
 * - Every wait takes `{ signal, timeout }`. When the peer vanishes (its process dies, its device
 *   goes away, a work request fails) operations reject with {@link ConnectionResetError}
 *   (reads return the bytes that had arrived first).
 */
export class RdmaConn extends NativeResource implements AsyncDisposable {
  /** This side's address. */
  readonly localAddr: RdmaAddr<"tcp">;
  /** The peer's address. */
  readonly remoteAddr: RdmaAddr<"tcp">;
  readonly #id: CmId;
  readonly #t: VerbsTransport;
  readonly #e: StreamEngine;
  readonly #cq: CompletionQueue;
  /** Called once the native side is released (ends its use of the shared event channel). */
  readonly #release: () => void;
  readonly #linger: number;
  readonly #strategy: Strategy;
  readonly #budget: SpinBudget;
  readonly #slice: number;
  readonly #poller: Poller;
  /** The poller holds of this connection's waits (`ref`/`unref` switch them). */
  readonly #hold: PollerHold;
  /** Operations waiting for the connection's progress (they hold nothing themselves). */
  readonly #waiters = new WaitList<void>();
  /** What the teardown waits for: the CQ's event, the CM's end, or the busy pump's end. */
  readonly #teardownWait: WaitList<void>;
  readonly #writeLock = new WaitList<void>();
  #closing = false;
  #core: ConnCore | null = null;
  #io: IoMaps | null = null;
  #remoteOps: RemoteOps | null = null;
  #oneSided: ((wrId: number, status: number, error: Error | null) => void) | null = null;
  /** Armed and drained empty, the connection holds the poller until its CQ's event. */
  #sleeping = false;
  /** The busy strategy's pump runs. */
  #pumping = false;
  #writing = false;
  #cmGone = false;
  #reset: RdmaError | null = null;
  #cause: Error | null = null;
  #wcError: Error | null = null;
  #released: Promise<void> | null = null;
  /** The promises of reads and writes done without waiting (repeated sizes reuse one). */
  readonly #readDone = new ResolvedCount();
  readonly #writeDone = new ResolvedCount();
  #readable: ReadableStream<Uint8Array<ArrayBuffer>> | null = null;
  #writable: WritableStream<Uint8Array> | null = null;
  readonly #stopObserving: () => void;
  #keepalive: Keepalive | null = null;

  readonly #onCmEnd = (ev: CmEvent) => {
    if (ev.type === CmEventType.DEVICE_REMOVAL) {
      this.#cause ??= new CmEventError("RdmaConn", ev.type, ev.name, ev.status, null);
    }
    this.#cmGone = true;
    this.#teardownWait.resolveAll();
    this.#wake();
  };
  readonly #onWaitEnded = () => {
    if (this.#waiters.size === 0) this.#stopSleeping();
  };
  /** The CQ's event came (the shared channel took and counted it for acking). */
  readonly #onCqEvent = (err: Error | null) => {
    if (err) this.#failWith(err);
    this.#teardownWait.resolveAll();
    this.#wake();
  };

  /** Not for direct use: {@link connect} and `RdmaListener.accept()` make connections. */
  constructor(
    id: CmId,
    transport: VerbsTransport,
    release: () => void,
    options: StreamOptions,
    token: symbol,
  ) {
    if (token !== construct) {
      throw new InvalidArgumentError("RdmaConn is made by connect() or accept()");
    }
    super("RdmaConn", []); // the options were checked by streamSizes before connecting
    const strategy = options.strategy ?? DEFAULT_STRATEGY;
    this.#id = id;
    this.#t = transport;
    this.#e = transport.engine;
    this.#cq = transport.cq;
    this.#release = release;
    this.#linger = options.lingerMs ?? LINGER_MS_DEFAULT;
    this.#strategy = strategy;
    this.#budget = new SpinBudget(options.spinMicros, STREAM_SPIN_MAX_MICROS);
    this.#slice = options.spinMicros ?? BUSY_SLICE_MICROS;
    this.#poller = options.poller ?? Poller.default();
    this.#hold = new PollerHold(this.#poller);
    this.#teardownWait = new WaitList<void>(this.#hold);
    this.localAddr = toAddr(id.localAddress, "tcp");
    this.remoteAddr = toAddr(id.peerAddress, "tcp");
    this.#stopObserving = observeConnectionEnd(id, this.#onCmEnd);
    transport.events.onEvent = this.#onCqEvent;
    this.#updateCredits(); // advertise the second half of the ring now
  }

  /** The sizes the connection runs with (after the device's clamps and grants). */
  get info(): ConnInfo {
    return this.#t.info();
  }

  /** Resolves once the native side is released after {@link RdmaConn.close}. */
  get released(): Promise<void> {
    return this.#released ?? Promise.resolve();
  }

  /** Pending operations keep the process alive (the default). */
  ref(): void {
    this.#hold.keepsAlive = true;
  }

  /**
   * Pending operations no longer keep the process alive: they still complete while it runs for
   * other reasons (like `Deno.Conn.unref`).
   */
  unref(): void {
    this.#hold.keepsAlive = false;
  }

  /** No effect: small writes are sent at once (inline), there is no Nagle delay to turn off. */
  setNoDelay(_noDelay = true): void {}

  /**
   * Turns rsocket's keepalive on or off (`SO_KEEPALIVE`, idle time `TCP_KEEPIDLE`): while on, a
   * period (`idleMs`; 0 or absent keeps the last one, at first {@link KEEPALIVE_DEFAULT_MS},
   * TCP's `tcp_keepalive_time`, as `node:net`'s `initialDelay`) without any send posts a
   * zero-length RDMA WRITE, as rsocket does. A peer that vanished without disconnecting makes it
   * fail after the connection's retries, or after {@link KEEPALIVE_PROBES} periods in which
   * nothing sent completes: pending and later operations then reject with
   * {@link ConnectionResetError}. The timer never keeps the process alive.
   */
  setKeepAlive(keepAlive = true, idleMs = 0): void {
    this.assertOpen();
    if (!(Number.isFinite(idleMs) && idleMs >= 0)) {
      throw new InvalidArgumentError(`idleMs must be a number >= 0, got ${describe(idleMs)}`);
    }
    (this.#keepalive ??= new Keepalive(this.#coreOf())).set(keepAlive, idleMs);
  }

  // ---------------------------------------------------------------- one-sided

  /**
   * rsocket's `riomap`: registers `buffer` (a `Uint8Array`, which must stay alive and in place
   * while mapped; or a size, for zero-filled native memory) so that the peer's `iowrite()`s to
   * `[offset, offset + length)` land in it, and puts it in the peer's iomap table (an entry is
   * sent before any data written after this call). `offset` defaults to 0; -1 uses the
   * buffer's address, as rsocket does. `access: "none"` registers it without a slot (local
   * use only). Throws `NoIomapSlotError` when the peer's table is full (the peer's
   * `iomapSize`), `InvalidArgumentError` for a range overlapping another mapping of this
   * connection, `ClosedError` when closed. The connection unmaps it when it closes.
   */
  iomap(buffer: Uint8Array | number, options?: IomapOptions): IoMapping {
    this.assertOpen();
    return this.#iomaps().map(buffer, options);
  }

  /**
   * rsocket's `riounmap`: deregisters a mapping (the handle `iomap()` returned, or the buffer it
   * was given). A peer of this library also gets its entry cleared (rsocket leaves it), so its
   * later `iowrite()` there fails cleanly instead of with a remote access error.
   * Idempotent for a handle; throws `InvalidArgumentError` for a buffer that is not mapped.
   */
  iounmap(mapping: IoMapping | Uint8Array): void {
    this.assertOpen();
    this.#iomaps().unmap(mapping);
  }

  /**
   * rsocket's `riowrite`: writes `data` to `remoteOffset` of the buffers the peer mapped with
   * its `iomap()`, by RDMA WRITE (no receive, no credit, the peer's CPU is not involved);
   * resolves with `data.length` once every byte is posted (copied into the send ring, as
   * rsocket does) - or, when `data` has at least `IOWRITE_ZERO_COPY_MIN` bytes in memory
   * registered on this connection (a mapping's or an exposure's `buffer`), once the writes
   * completed, sent straight from it in one work request per mapped range (the connection's
   * writes wait only until those are posted). Stream data written after the call arrives after
   * it. Rejects with `UnmappedOffsetError` before sending anything when part of the range is not
   * mapped. Serialized with `write()`.
   */
  iowrite(data: Uint8Array, remoteOffset: number, options?: IoOptions): Promise<number> {
    if (this.closed) return Promise.reject(new ClosedError("RdmaConn"));
    return this.#iomaps().write(data, remoteOffset, options);
  }

  #iomaps(): IoMaps {
    return this.#io ??= new IoMaps(this.#coreOf(), () => this.#remote());
  }

  /**
   * Exposes memory to the peer for one-sided access: `buffer` (a `Uint8Array` that must stay
   * alive and in place until closed) or a size (zero-filled native memory). Returns a handle
   * whose `token` (32 bytes, see `REMOTE_TOKEN_SIZE`) the application sends to the peer however
   * it likes; the peer's `conn.remote(token)` then reads (`read: true`, the default) and/or
   * writes (`write: true`) it. `close()` on the handle revokes it. The connection closes its
   * handles when it closes.
   */
  expose(buffer: Uint8Array | number, options?: ExposeOptions): ExposedMemory {
    this.assertOpen();
    return this.#remote().expose(buffer, options);
  }

  /**
   * The peer's exposed memory named by `token` (from the peer's `expose()`, on this same
   * connection): `read(offset, lengthOrInto)` and `write(offset, data)` by RDMA READ and
   * RDMA WRITE on this connection's QP, resolving once completed. Throws
   * `InvalidTokenError` for a token that is malformed or belongs to another connection.
   */
  remote(token: Uint8Array): RemoteBuffer {
    this.assertOpen();
    return this.#remote().remote(token);
  }

  /**
   * Reads a token (`REMOTE_TOKEN_SIZE` bytes: the peer wrote an `expose()`d handle's `token` on
   * the stream) and returns {@link RdmaConn.remote} of it. Rejects with `InvalidTokenError` when
   * the stream ends first or the bytes are not a token of this connection.
   */
  async readRemote(options?: IoOptions): Promise<RemoteBuffer> {
    return this.remote(await readToken(this, options));
  }

  #remote(): RemoteOps {
    if (this.#remoteOps !== null) return this.#remoteOps;
    this.#remoteOps = new RemoteOps(this.#coreOf());
    this.#oneSided = this.#coreOf().onOneSided;
    return this.#remoteOps;
  }

  #coreOf(): ConnCore {
    if (this.#core !== null) return this.#core;
    // deno-lint-ignore no-this-alias
    const self = this;
    const core: ConnCore = {
      owner: this,
      transport: this.#t,
      engine: this.#e,
      get closing() {
        return self.#closing || self.closed;
      },
      progress: () => this.#progress(),
      guard: (f) => this.#guard(f),
      waitUntil: (ready, options) => this.#waitUntil(ready, options),
      waitWrite: (options) => this.#waitFor(WRITE, options),
      lock: (options) => {
        if (!this.#writing) {
          this.#writing = true;
          return;
        }
        return this.#lock(options).then(() => {
          this.#writing = true;
        });
      },
      unlock: () => this.#unlock(),
      writeError: () => this.#writeError(),
      fail: (err) => this.#failWith(err),
      resetError: () => this.#resetError(),
      onOneSided: null,
    };
    this.#core = core;
    return core;
  }

  /** Spins on the CQ until `ready()` (the strategy's budget), then waits for progress. */
  async #waitUntil(ready: () => boolean, options: IoOptions | undefined): Promise<void> {
    while (!ready()) {
      if (this.closed) throw new ClosedError("RdmaConn");
      if (this.#spin(ready)) return;
      await this.#wait(options);
      this.#budget.waited();
    }
  }

  // ---------------------------------------------------------------- reads

  /**
   * Reads into `p`: resolves with the number of bytes (at least 1, or at least `options.min`
   * but fewer at the end of the stream), or null at the end of the stream. Waits until data
   * arrives.
   */
  read(p: Uint8Array, options?: ReadOptions): Promise<number | null> {
    if (this.closed) return Promise.reject(new ClosedError("RdmaConn"));
    if (!(p instanceof Uint8Array)) {
      return Promise.reject(new InvalidArgumentError("read needs a Uint8Array"));
    }
    const len = p.length;
    let min = 1;
    if (options !== undefined && options !== null && options.min !== undefined) {
      min = options.min;
      if (!Number.isInteger(min) || min < 1 || min > len) {
        return Promise.reject(
          new InvalidArgumentError(`min must be an integer 1..${len}, got ${describe(min)}`),
        );
      }
    }
    if (len === 0) return Promise.resolve(0);
    let n = this.#readNow(p, 0);
    const spun = n === 0;
    if (spun && this.#spin(READ)) n = this.#readNow(p, 0);
    if (n < 0 || n >= min) return this.#readResult(n);
    return this.#readSlow(p, n, min, options, spun);
  }

  /**
   * Reads what has arrived without waiting (rsocket's `MSG_DONTWAIT`): the bytes copied into
   * `p`, 0 when nothing has arrived yet, or null at the end of the stream.
   */
  tryRead(p: Uint8Array): number | null {
    this.assertOpen();
    if (!(p instanceof Uint8Array)) throw new InvalidArgumentError("tryRead needs a Uint8Array");
    if (p.length === 0) return 0;
    const n = this.#readNow(p, 0);
    if (n >= 0) return n;
    if (this.#e.failed || this.#reset) throw this.#resetError();
    return null;
  }

  async #readSlow(
    p: Uint8Array,
    got: number,
    min: number,
    options: ReadOptions | undefined,
    spun: boolean,
  ): Promise<number | null> {
    // check before every wait: the progress that brought the last bytes may also have brought
    // the end of the stream, and no completion would wake a wait for it
    for (let spin = !spun;; spin = true) {
      const n = this.#readNow(p, got);
      if (n > 0) {
        got += n;
        if (got >= min) return got;
      } else if (n < 0) {
        if (got > 0) return got;
        return this.#end();
      } else if (!spin || !this.#spin(READ)) {
        await this.#wait(options);
        this.#budget.waited();
      }
    }
  }

  /** Copies received bytes into `p[off..]`: the count, 0 if none yet, -1 at the end or reset. */
  #readNow(p: Uint8Array, off: number): number {
    const e = this.#e;
    let n = e.read(p, off, p.length - off);
    if (n === 0 && this.#progress() > 0) n = e.read(p, off, p.length - off);
    if (n > 0) this.#updateCredits();
    return n;
  }

  #readResult(n: number): Promise<number | null> {
    if (n > 0) return this.#readDone.of(n);
    try {
      return Promise.resolve(this.#end());
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** The end of the stream: null, or the reset error when it ended by a failure. */
  #end(): null {
    if (this.#e.failed || this.#reset) throw this.#resetError();
    return null;
  }

  // ---------------------------------------------------------------- writes

  /** Writes all of `p`; resolves with `p.length` once every byte is in the send ring. */
  write(p: Uint8Array, options?: IoOptions): Promise<number> {
    if (this.closed) return Promise.reject(new ClosedError("RdmaConn"));
    if (!(p instanceof Uint8Array)) {
      return Promise.reject(new InvalidArgumentError("write needs a Uint8Array"));
    }
    const len = p.length;
    if (this.#writing) return this.#writeSlow(p, 0, options);
    let off = 0;
    for (;;) {
      const n = this.#sendNow(p, off);
      if (n < 0) return Promise.reject(this.#writeError());
      off += n;
      if (off === len) return this.#writeDone.of(len);
      if (!this.#spin(WRITE)) return this.#writeSlow(p, off, options);
    }
  }

  /** Writes what fits now without waiting; returns the bytes taken (0 when nothing fits). */
  tryWrite(p: Uint8Array): number {
    this.assertOpen();
    if (!(p instanceof Uint8Array)) throw new InvalidArgumentError("tryWrite needs a Uint8Array");
    if (this.#writing) return 0; // an earlier write still waits: its bytes go first
    const n = this.#sendNow(p, 0);
    if (n < 0) throw this.#writeError();
    return n;
  }

  async #writeSlow(p: Uint8Array, off: number, options: IoOptions | undefined): Promise<number> {
    if (this.#writing) await this.#lock(options);
    this.#writing = true;
    try {
      const len = p.length;
      while (off < len) {
        const n = this.#sendNow(p, off);
        if (n < 0) throw this.#writeError();
        off += n;
        if (off < len) await this.#waitFor(WRITE, options);
      }
      return len;
    } finally {
      this.#unlock();
    }
  }

  /** Sends what can be sent of `p[off..]` now: the bytes taken, or -1 when it may not send. */
  #sendNow(p: Uint8Array, off: number): number {
    const e = this.#e;
    try {
      let n = e.write(p, off, p.length - off);
      if (n === 0 && this.#progress() > 0) n = e.write(p, off, p.length - off);
      return n;
    } catch (err) {
      this.#failWith(err as Error);
      return -1;
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
        while (e.connected && !this.#guard(() => e.postControl(ctrl))) {
          await this.#waitFor(CONTROL, options);
        }
      }
      while (!e.allSendsDone()) await this.#waitFor(SENDS_DONE, options);
      if (this.#reset) throw this.#reset;
    } finally {
      this.#unlock();
    }
  }

  // ---------------------------------------------------------------- web streams

  /** The receiving side as a byte stream (BYOB reads go straight into the reader's buffer). */
  get readable(): ReadableStream<Uint8Array<ArrayBuffer>> {
    return this.#readable ??= readableOf(this);
  }

  /** The sending side as a stream; closing it is {@link RdmaConn.closeWrite}. */
  get writable(): WritableStream<Uint8Array> {
    return this.#writable ??= writableOf(this);
  }

  // ---------------------------------------------------------------- close

  /** Marks the connection closing before its children (mappings, exposed memory) close. */
  protected override beforeClose(): void {
    this.#closing = true;
  }

  /** Closes and waits until the native side is released. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
    await this.released;
  }

  /** Rejects pending operations and starts the background teardown (called once by close). */
  protected destroy(): void {
    let err: ClosedError | undefined; // made only when an operation is pending
    const closed = () => err ??= new ClosedError("RdmaConn");
    this.#waiters.rejectAll(closed);
    this.#writeLock.rejectAll(closed);
    this.#stopSleeping(); // the busy pump sees the connection closed and stops
    this.#keepalive?.stop();
    this.#released = this.#teardown();
  }

  async #teardown(): Promise<void> {
    const deadline = now() + this.#linger;
    const e = this.#e;
    try {
      while (this.#pumping) await this.#teardownWait.add(); // the pump ends at its next step
      this.#progress();
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
    this.#stopObserving();
    try {
      await this.#id.disconnect({ timeout: Math.max(1, deadline - now()) });
    } catch {
      // the id is closed below regardless
    }
    for (const f of [() => this.#id.close(), () => this.#t.close()]) {
      try {
        f();
      } catch {
        // releasing the rest matters more than one failed destroy
      }
    }
    this.#hold.release();
    this.#release();
  }

  /** One completion wait of the teardown (nothing else waits): arm, drain, wait. */
  async #step(deadline: number): Promise<void> {
    const left = deadline - now();
    if (left <= 0) throw new ClosedError("RdmaConn (linger time over)");
    if (this.#armAndDrain() > 0) return;
    await this.#teardownWait.add({ timeout: left }, undefined, "RdmaConn linger");
    this.#progress();
  }

  // ---------------------------------------------------------------- progress and waiting

  /** Polls the CQ (up to `tries` times while empty), feeds the engine; returns the count. */
  #progress(tries = 1): number {
    let n: number;
    try {
      n = this.#cq.poll(undefined, tries);
    } catch (err) {
      this.#failWith(err as Error);
      return 0;
    }
    if (n > 0) this.#process(n);
    return n;
  }

  /** True when an operation waiting for `want` can go on (or never will be able to). */
  #ready(want: Want): boolean {
    if (typeof want === "function") return want();
    const e = this.#e;
    switch (want) {
      case READ:
        return e.hasData || !e.readable || !e.connected;
      case WRITE:
        return !e.writable || e.canSend();
      case CONTROL:
        return !e.connected || e.controlAvailable();
      default:
        return e.allSendsDone();
    }
  }

  /**
   * Polls the CQ for a bounded budget until `want` can go on (rsocket's `rpoll` idea): the
   * learnt or fixed budget of `"adaptive"`, one slice of `"busy"`, nothing for `"event"`.
   * Returns whether it can; nothing but polls and a clock read every few passes happens meanwhile.
   */
  #spin(want: Want): boolean {
    const s = this.#strategy;
    if (s === "event") return false;
    const learns = s === "adaptive" && !this.#budget.fixed;
    // the clock starts at the read after the first pass: a spin that its first pass satisfies
    // reads no clock
    let start = -1;
    let end = 0;
    // after the first pass, each pass is up to SPIN_CLOCK_EVERY polls (the engine's state moves
    // only with what they return) and one clock read
    for (let tries = 1;; tries = SPIN_CLOCK_EVERY) {
      if (this.#progress(tries) > 0 && this.#ready(want)) {
        if (learns) this.#budget.hit(start < 0 ? 0 : (now() - start) * 1000);
        return true;
      }
      if (start < 0) {
        start = now();
        end = start + (s === "adaptive" ? this.#budget.micros : this.#slice) / 1000;
      } else if (now() >= end) break;
    }
    if (learns) this.#budget.miss(start, (now() - start) * 1000);
    return false;
  }

  /** Spins for `want`, then waits for the connection's progress. */
  async #waitFor(want: Want, options: IoOptions | undefined): Promise<void> {
    if (this.#spin(want)) return;
    await this.#wait(options);
    this.#budget.waited();
  }

  /** Waits until the connection's progress (or its end) wakes the waiting operations. */
  #wait(options: IoOptions | undefined): Promise<void> {
    const p = this.#waiters.add(options, undefined, "RdmaConn");
    if (options && (options.signal || options.timeout !== undefined)) {
      p.then(noop, this.#onWaitEnded);
    }
    if (this.#strategy !== "busy") this.#sleep();
    else if (!this.#pumping) this.#pump();
    return p;
  }

  /** Arms the CQ unless armed, then drains it (arm -> drain -> wait); returns what it polled. */
  #armAndDrain(): number {
    try {
      if (!this.#cq.armed) this.#cq.requestNotify();
    } catch (err) {
      this.#failWith(err as Error);
      return 0;
    }
    return this.#progress();
  }

  /** While operations wait and it is awake: arm and drain the CQ; sleep when it finds nothing. */
  #sleep(): void {
    while (!this.#sleeping && this.#waiters.size > 0 && !this.closed) {
      if (!this.#settled()) return;
      if (this.#armAndDrain() === 0 && this.#waiters.size > 0) {
        this.#sleeping = true;
        this.#hold.ref();
      }
    }
  }

  /** The CQ's event or the CM's end came: drain the CQ, sleep again if operations still wait. */
  #wake(): void {
    if (!this.#stopSleeping() || this.closed) return;
    this.#budget.woke();
    this.#progress();
    this.#sleep();
  }

  /** Ends a sleep (its hold on the poller); returns whether the connection was asleep. */
  #stopSleeping(): boolean {
    const was = this.#sleeping;
    if (was) this.#hold.unref();
    this.#sleeping = false;
    return was;
  }

  /**
   * Settles a connection the CM saw end and lets the waiting operations see it; returns whether
   * their waits go on.
   */
  #settled(): boolean {
    if (this.#cmGone) {
      if (this.#e.connected) this.#settleDisconnect();
      this.#waiters.resolveAll();
    }
    if (this.#e.connected) return true;
    this.#waiters.resolveAll(); // nothing more will complete for them
    return false;
  }

  /** `"busy"`: while operations wait, polls the CQ in slices between event-loop turns. */
  async #pump(): Promise<void> {
    this.#pumping = true;
    try {
      while (this.#waiters.size > 0 && !this.closed && this.#settled()) {
        if (COUNTING) costs.yields++;
        await yieldToLoop();
        const end = now() + this.#slice / 1000;
        let n = this.#progress(SPIN_CLOCK_EVERY);
        while (n === 0 && now() < end) n = this.#progress(SPIN_CLOCK_EVERY);
      }
    } catch (err) {
      this.#failWith(err as Error);
    } finally {
      this.#pumping = false;
      if (this.closed) this.#teardownWait.resolveAll(); // the teardown waits for the pump
    }
  }

  /**
   * The connection manager saw the connection end while the stream is still connected: take
   * what already completed (rsocket's DISCONNECT may be among it), and if the stream is still
   * connected the peer left without it: a reset.
   */
  #settleDisconnect(): void {
    for (let n = this.#progress(); n > 0; n = this.#progress());
    if (this.#e.connected) {
      const type = CmEventType.DISCONNECTED;
      this.#failWith(new CmEventError("RdmaConn", type, "RDMA_CM_EVENT_DISCONNECTED", 0, null));
    }
  }

  /** Feeds `n` polled completions to the engine, then re-posts receives and grants credits. */
  #process(n: number): void {
    const cq = this.#cq;
    const e = this.#e;
    for (let i = 0; i < n; i++) {
      const wc = cq.completion(i);
      // the wr_id as its halves: tags in the high one, small integers both (no boxed number)
      const high = wc.wrIdHigh;
      const low = wc.wrIdLow;
      const st = wc.status;
      if (st !== 0 && this.#wcError === null) this.#wcError = wc.error();
      if (high >= WR_HIGH_RECV) {
        if (high >= WR_HIGH_ONE_SIDED) this.#oneSided!(low, st, st === 0 ? null : wc.error());
        else e.completeRecv(low, st, st === 0 && wc.hasImm, st === 0 ? wc.immData : 0);
      } else e.completeSend(high, low, st);
    }
    try {
      e.afterCompletions();
    } catch (err) {
      this.#failWith(err as Error);
    }
    // whoever polled, the waiting operations check again (a spinning write may take the data a
    // waiting read needs)
    if (this.#waiters.size > 0) this.#waiters.resolveAll();
  }

  // ---------------------------------------------------------------- failures

  /** Grants the peer the credits freed by reads (posts; a failing post fails the stream). */
  #updateCredits(): void {
    // not through #guard: a closure per read is an allocation on the hot path
    try {
      this.#e.updateCredits();
    } catch (err) {
      this.#failWith(err as Error);
    }
  }

  /** Runs a step that may post; a failing post fails the stream (returns false then). */
  #guard(f: () => boolean | void): boolean {
    try {
      return f() !== false;
    } catch (err) {
      this.#failWith(err as Error);
      return false;
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
    if (this.#cause instanceof ConnectionResetError) return this.#reset = this.#cause;
    const e = this.#e;
    const cause = this.#cause ?? (e.errorStatus ? this.#wcError : null);
    this.#reset = resetError(this.#cmGone, e.errorStatus, cause);
    return this.#reset;
  }

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
}

/**
 * Makes a connection object (module-private to the stream layer); `release` is called once when
 * its CM id is closed (it ends the connection's use of the event channel it shares).
 */
export function newConn(
  id: CmId,
  transport: VerbsTransport,
  release: () => void,
  options: StreamOptions,
): RdmaConn {
  return new RdmaConn(id, transport, release, options, construct);
}
