/**
 * The rdma_cm event channel: a non-blocking fd that signals readability, from which events are
 * read, copied out and acked at once, and routed to the {@link CmId} they concern.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { DevicePermissionError, InvalidArgumentError, NoDeviceError } from "../types/errors.ts";
import { Errno, errnoName } from "../types/errno.ts";
import { CmEventType, PortSpace } from "../types/enums.ts";
import { nativeError, throwErrno } from "../ffi/errors.ts";
import { setNonBlocking } from "../ffi/fd.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { CONSTRUCT, isInstance, NativeResource } from "../ffi/resource.ts";
import type { HoldCounter } from "../poller/wait.ts";
import { closeWatchesOf, type FdWatch, Poller, PollerHold } from "../poller/poller.ts";
import { type CmEvent, decodeEvent } from "./event.ts";
import { CmId, deliverEvent } from "./id.ts";
import { forgetIds, idAt, registerId } from "./_ids.ts";
import { describe } from "../types/check.ts";

/** Options of a {@link CmEventChannel}. */
export interface CmEventChannelOptions {
  /** The poller awaited operations wait through (default: the shared `Poller.default()`). */
  poller?: Poller;
}

/**
 * An rdma_cm event channel (`rdma_create_event_channel`). Its fd is `O_NONBLOCK`;
 * {@link CmEventChannel.getEvent} returns null when nothing is pending. The promise-shaped
 * operations of {@link CmId} read the channel through the poller; a program that reads events
 * itself with `getEvent()` must not also await those operations on the same channel.
 *
 * Closing the channel closes every id on it first (connections, then listeners); every event
 * has already been acked.
 */
export class CmEventChannel extends NativeResource implements HoldCounter {
  /** The `struct rdma_event_channel *`. */
  readonly ptr: NativePointer;
  /** The channel's file descriptor (non-blocking). */
  readonly fd: number;
  readonly #out: NativeBlock;
  #watch: FdWatch | null = null;
  #hold: PollerHold | null = null;
  #alive = true;
  readonly #poller: Poller | undefined;

  /**
   * Creates an event channel; throws NoDeviceError when the machine has no RDMA. Awaited
   * operations wait on `options.poller` (default: the shared `Poller.default()`).
   */
  constructor(options: CmEventChannelOptions = {}) {
    if (options.poller !== undefined && !(options.poller instanceof Poller)) {
      throw new InvalidArgumentError("poller must be a Poller");
    }
    const n = native();
    n.setErrno(0);
    const p = n.rdmacm.rdma_create_event_channel();
    if (p === null) {
      const errno = n.errno();
      if (errno === Errno.ENODEV || errno === Errno.ENOSYS || errno === Errno.ENOENT) {
        throw new NoDeviceError(`rdma_create_event_channel failed with ${errnoName(errno)}`);
      }
      if (errno === Errno.EACCES || errno === Errno.EPERM) {
        throw new DevicePermissionError("rdma_create_event_channel", "/dev/infiniband/rdma_cm");
      }
      throw nativeError("rdma_create_event_channel", errno);
    }
    const L = layouts().rdma_event_channel;
    const fd = new DataView(n.arrayBuffer(p, L.size)).getInt32(L.fields.fd.offset, true);
    try {
      setNonBlocking(fd, "rdma_cm event channel");
    } catch (e) {
      n.rdmacm.rdma_destroy_event_channel(p);
      throw e;
    }
    super("CmEventChannel", []);
    this.ptr = p;
    this.fd = fd;
    this.#poller = options.poller;
    this.#out = new NativeBlock(8, 8);
  }

  /** The open ids on this channel. */
  get ids(): CmId[] {
    return this.dependents().filter((d): d is CmId => isInstance<CmId>(d, "CmId"));
  }

  /**
   * Creates a CM id on this channel (`rdma_create_id`) in a port space: `"TCP"` (RC, the
   * default), `"UDP"` (UD), `"IB"` (RC or UD over native IB addressing) or `"IPOIB"`.
   */
  createId(portSpace: keyof typeof PortSpace | PortSpace = "TCP"): CmId {
    this.assertOpen();
    const ps = typeof portSpace === "number" ? portSpace : PortSpace[portSpace];
    if (!Object.values(PortSpace).includes(ps as PortSpace)) {
      throw new InvalidArgumentError(`createId: unknown port space ${describe(portSpace)}`);
    }
    const n = native();
    if (n.rdmacm.rdma_create_id(this.ptr, this.#out.ptr, null, ps) !== 0) {
      const errno = n.errno();
      if (errno === Errno.ENODEV) throw new NoDeviceError("rdma_create_id failed with ENODEV");
      throw nativeError("rdma_create_id", errno);
    }
    return this.#adopt(this.#out.pointerAt(0)!);
  }

  /** Wraps an id this channel created or received and routes its events to it. */
  #adopt(p: NativePointer): CmId {
    return registerId(this, p, new CmId(this, p, CONSTRUCT));
  }

  /**
   * Reads one event without blocking (`rdma_get_cm_event`), copies it out and acks it at once;
   * null when none is pending. On CONNECT_REQUEST the event's `id` is a new {@link CmId} for the
   * incoming connection. The event is not delivered to waiting operations; use
   * {@link CmEventChannel.dispatch} for that.
   */
  getEvent(): CmEvent | null {
    this.assertOpen();
    const n = native();
    if (n.rdmacm.rdma_get_cm_event(this.ptr, this.#out.ptr) !== 0) {
      const errno = n.errno();
      if (errno === Errno.EAGAIN || errno === Errno.EINTR) return null;
      throwErrno("rdma_get_cm_event");
    }
    const ev = this.#out.pointerAt(0)!;
    let raw;
    try {
      raw = decodeEvent(ev);
    } finally {
      n.rdmacm.rdma_ack_cm_event(ev);
    }
    const listenId = raw.listenPtr === null ? null : idAt(this, raw.listenPtr) ?? null;
    // a new id: an incoming connection request (or an id created behind our back)
    const id = idAt(this, raw.idPtr) ?? this.#adopt(raw.idPtr);
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
   * Reads every pending event and delivers each to its id: it settles the operation that waits
   * for it or is queued on the id (connection requests on the listener). Returns the number of
   * events read.
   */
  dispatch(): number {
    let count = 0;
    while (!this.closed) {
      const ev = this.getEvent();
      if (!ev) break;
      count++;
      const target = ev.type === CmEventType.CONNECT_REQUEST && ev.listenId ? ev.listenId : ev.id;
      deliverEvent(target, ev);
    }
    return count;
  }

  /** Keeps the channel's fd watched by the poller (an operation waits for an event). */
  ref(): void {
    if (this.closed) return;
    if (!this.#watch || this.#watch.closed) {
      const poller = this.#poller ?? Poller.default();
      this.#watch = poller.registerOwned(this, this.fd, () => this.dispatch());
      if (this.#hold?.poller !== poller) {
        this.#hold?.release();
        this.#hold = new PollerHold(poller);
        this.#hold.keepsAlive = this.#alive;
      }
    }
    this.#hold!.ref();
  }

  /** Ends one {@link CmEventChannel.ref}. */
  unref(): void {
    this.#hold?.unref();
  }

  /**
   * Whether operations waiting on this channel keep the process alive (default true). When
   * false they still complete while the process runs for other reasons (weak poller holds).
   */
  get keepsProcessAlive(): boolean {
    return this.#alive;
  }

  set keepsProcessAlive(on: boolean) {
    this.#alive = on;
    if (this.#hold) this.#hold.keepsAlive = on;
  }

  /**
   * Closing closes every id on the channel - connections and pending requests first, listeners
   * after them (each disconnects, destroys its QP, then the id) - then destroys the channel.
   */
  protected override beforeClose(): void {
    let first: unknown = null;
    for (const id of this.ids) {
      if (id.listening) continue;
      try {
        id.close();
      } catch (e) {
        first ??= e;
      }
    }
    if (first !== null) throw first;
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    this.#hold?.release();
    this.#hold = null;
    closeWatchesOf(this);
    this.#watch = null;
    forgetIds(this);
    native().rdmacm.rdma_destroy_event_channel(this.ptr);
    this.#out.free();
  }
}
