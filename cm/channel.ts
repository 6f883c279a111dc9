/**
 * The rdma_cm event channel: a non-blocking fd that signals readability, from
 * which events are read, copied out and acked at once, and routed to the
 * {@link CmId} they concern.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { layoutFor } from "../types/layout.ts";
import { ClosedError, InvalidArgumentError, NoDeviceError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { CmEventType, PortSpace } from "../types/enums.ts";
import { nativeError, throwErrno } from "../ffi/errors.ts";
import { setNonBlocking } from "../ffi/fd.ts";
import { type CmEvent, decodeEvent } from "./event.ts";
import { CmId } from "./id.ts";
import { type FdWatch, Poller } from "../poller/poller.ts";

const leaks = new FinalizationRegistry<string>((what) => {
  console.warn(`@rdma/verbs: an ${what} was garbage-collected without close(); it leaks`);
});

/**
 * An rdma_cm event channel (`rdma_create_event_channel`). Its fd is
 * `O_NONBLOCK`; {@link EventChannel.getEvent} returns null when nothing is
 * pending. The promise-shaped operations of {@link CmId} read the channel
 * through the poller; a program that reads events itself with `getEvent()`
 * must not also await those operations on the same channel.
 *
 * Closing the channel closes every id on it first (connections, then
 * listeners); every event has already been acked.
 */
export class EventChannel implements Disposable {
  /** The `struct rdma_event_channel *`. */
  readonly ptr: NativePointer;
  /** The channel's file descriptor (non-blocking). */
  readonly fd: number;
  #closed = false;
  #closing = false;
  readonly #ids = new Map<bigint, CmId>();
  readonly #evPtr: NativePointer;
  #waiters = 0;
  #watch: FdWatch | null = null;
  readonly #poller: Poller | undefined;

  /**
   * Creates an event channel; throws {@link NoDeviceError} when the machine has
   * no RDMA. Awaited operations wait on `options.poller` (default: the shared
   * {@link Poller.default}).
   */
  constructor(options: { poller?: Poller } = {}) {
    this.#poller = options.poller;
    const n = native();
    n.setErrno(0);
    const p = n.rdmacm.rdma_create_event_channel();
    if (p === null) {
      const errno = n.errno();
      if (errno === Errno.ENODEV || errno === Errno.ENOSYS || errno === Errno.ENOENT) {
        throw new NoDeviceError(`rdma_create_event_channel failed with errno ${errno}`);
      }
      throw nativeError("rdma_create_event_channel", errno);
    }
    this.ptr = p;
    const L = layoutFor(n.arch);
    this.fd = new DataView(n.arrayBuffer(p, L.rdma_event_channel.size)).getInt32(
      L.rdma_event_channel.fields.fd.offset,
      true,
    );
    try {
      setNonBlocking(this.fd, "rdma_cm event channel");
    } catch (e) {
      n.rdmacm.rdma_destroy_event_channel(p);
      throw e;
    }
    this.#evPtr = n.alloc(8, 8);
    leaks.register(this, "EventChannel", this);
  }

  /** True once closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** The ids on this channel. */
  get ids(): CmId[] {
    return [...this.#ids.values()];
  }

  /** Throws {@link ClosedError} when closed. */
  assertOpen(): void {
    if (this.#closed) throw new ClosedError("EventChannel");
  }

  /**
   * Creates a CM id on this channel (`rdma_create_id`) in a port space:
   * `"TCP"` (RC, the default), `"UDP"` (UD), `"IB"` (RC or UD over native IB
   * addressing) or `"IPOIB"`.
   */
  createId(portSpace: keyof typeof PortSpace | number = "TCP"): CmId {
    this.assertOpen();
    const ps = typeof portSpace === "number" ? portSpace : PortSpace[portSpace];
    if (!Object.values(PortSpace).includes(ps as PortSpace)) {
      throw new InvalidArgumentError(`createId: unknown port space ${portSpace}`);
    }
    const n = native();
    const out = n.alloc(8, 8);
    try {
      if (n.rdmacm.rdma_create_id(this.ptr, out, null, ps) !== 0) {
        const errno = n.errno();
        if (errno === Errno.ENODEV) throw new NoDeviceError("rdma_create_id failed with ENODEV");
        throw nativeError("rdma_create_id", errno);
      }
      return this.#adopt(n.readPointer(out, 0) as NativePointer);
    } finally {
      n.free(out);
    }
  }

  #adopt(p: NativePointer): CmId {
    const id = new CmId(this, p);
    this.#ids.set(native().address(p), id);
    return id;
  }

  /** @internal Forgets an id that was destroyed. */
  _forget(id: CmId): void {
    this.#ids.delete(native().address(id.ptr));
  }

  /**
   * Reads one event without blocking (`rdma_get_cm_event`), copies it out and
   * acks it at once; null when none is pending. On CONNECT_REQUEST the event's
   * `id` is a new {@link CmId} for the incoming connection. The event is not
   * delivered to waiting operations; use {@link EventChannel.dispatch} for that.
   */
  getEvent(): CmEvent | null {
    this.assertOpen();
    const n = native();
    if (n.rdmacm.rdma_get_cm_event(this.ptr, this.#evPtr) !== 0) {
      const errno = n.errno();
      if (errno === Errno.EAGAIN || errno === Errno.EINTR) return null;
      throwErrno("rdma_get_cm_event");
    }
    const ev = n.readPointer(this.#evPtr, 0) as NativePointer;
    let raw;
    try {
      raw = decodeEvent(ev);
    } finally {
      n.rdmacm.rdma_ack_cm_event(ev);
    }
    const listenId = raw.listenPtr === null
      ? null
      : this.#ids.get(n.address(raw.listenPtr)) ?? null;
    let id = this.#ids.get(n.address(raw.idPtr));
    if (!id) {
      // a new id: an incoming connection request (or an id created behind our back)
      id = this.#adopt(raw.idPtr);
      if (raw.type === CmEventType.CONNECT_REQUEST && listenId) id._setListener(listenId);
    }
    return {
      type: raw.type,
      name: raw.name,
      status: raw.status,
      id,
      listenId,
      privateData: raw.privateData,
      conn: raw.conn,
      ud: raw.ud,
    };
  }

  /**
   * Reads every pending event and delivers each to its id: it settles the
   * operation that waits for it or is queued on the id (connection requests on
   * the listener). Returns the number of events read.
   */
  dispatch(): number {
    let count = 0;
    while (!this.#closed) {
      const ev = this.getEvent();
      if (!ev) break;
      count++;
      const target = ev.type === CmEventType.CONNECT_REQUEST && ev.listenId ? ev.listenId : ev.id;
      target._deliver(ev);
    }
    return count;
  }

  /** @internal An operation starts waiting for an event: watch the fd. */
  _hold(): void {
    if (this.#closed) return;
    if (!this.#watch || this.#watch.closed) {
      const poller = this.#poller ?? Poller.default();
      // This channel owns the fd, so another watch of the same number is stale: its fd was
      // closed without being unwatched and the number was reused for this channel.
      poller.watchOf(this.fd)?.close();
      this.#watch = poller.register(this.fd, () => this.dispatch());
    }
    this.#waiters++;
    this.#watch.ref();
  }

  /** @internal A wait ended. */
  _release(): void {
    if (this.#waiters === 0) return;
    this.#waiters--;
    this.#watch?.unref();
  }

  /**
   * Closes every id on the channel (each disconnects, destroys its QP, then the
   * id), then destroys the channel. Idempotent.
   */
  close(): void {
    // re-entered when an id that owns the channel closes during this loop
    if (this.#closed || this.#closing) return;
    this.#closing = true;
    const ids = [...this.#ids.values()];
    // connections and pending requests first, listeners after them
    for (const id of ids) if (!id.listening) id.close();
    for (const id of ids) id.close();
    this.#closed = true;
    this.#waiters = 0;
    this.#watch?.close();
    this.#watch = null;
    leaks.unregister(this);
    const n = native();
    n.rdmacm.rdma_destroy_event_channel(this.ptr);
    n.free(this.#evPtr);
  }

  /** Alias of {@link EventChannel.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}
