/**
 * `struct rdma_cm_id`: one connection manager endpoint — a listener, a
 * connection (RC) or a datagram endpoint (UD) — with promise-shaped operations
 * whose results arrive as events on its {@link EventChannel}.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { layoutFor } from "../types/layout.ts";
import {
  AbortedError,
  ClosedError,
  CmEventError,
  InvalidArgumentError,
  type RdmaError,
  UnsupportedError,
} from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { CmEventType, OptionId, OptionLevel, PortSpace, QpState } from "../types/enums.ts";
import { nativeError, strerror } from "../ffi/errors.ts";
import type { Context } from "../verbs/context.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { QueuePair } from "../verbs/qp.ts";
import { cmContext } from "./context.ts";
import { type CmQpInit, createCmQp } from "./qp.ts";
import {
  type AddressInput,
  AF_IB,
  decodeSockaddr,
  encodeSockaddr,
  type SocketAddress,
} from "./address.ts";
import type { EventChannel } from "./channel.ts";
import {
  checkPrivateData,
  type ConnParam,
  encodeConnParam,
  type PrivateDataContext,
} from "./conn_param.ts";
import type { CmEvent } from "./event.ts";
import { toNative } from "./memory.ts";

/** Options of every operation that waits for an event. */
export interface CmWaitOptions {
  /** Rejects the wait with {@link AbortedError} when aborted (the C operation is not undone). */
  signal?: AbortSignal;
  /** Rejects the wait with {@link AbortedError} after this many milliseconds. */
  timeout?: number;
}

/** The events that fail the operation waiting on the id. */
const FAILURES: ReadonlySet<number> = new Set([
  CmEventType.ADDR_ERROR,
  CmEventType.ROUTE_ERROR,
  CmEventType.CONNECT_ERROR,
  CmEventType.UNREACHABLE,
  CmEventType.REJECTED,
  CmEventType.DEVICE_REMOVAL,
  CmEventType.MULTICAST_ERROR,
]);

interface Waiter {
  op: string;
  types: readonly number[];
  resolve(ev: CmEvent): void;
  reject(e: Error): void;
}

/** The most queued events an id keeps for later waits; older ones are dropped. */
const QUEUE_MAX = 256;

/**
 * One rdma_cm id. Create it with {@link EventChannel.createId} (or the
 * `listen`/`connect` helpers); incoming connections arrive as ids from
 * {@link CmId.getRequest}.
 *
 * Teardown is ordered for the caller: {@link CmId.close} disconnects a
 * connected id, destroys its QP, then the id; {@link CmId.disconnect} also
 * waits until the peer has seen the disconnect.
 */
export class CmId implements Disposable, AsyncDisposable {
  /** The `struct rdma_cm_id *`. */
  readonly ptr: NativePointer;
  /** The event channel the id reports on. */
  readonly channel: EventChannel;
  /** The port space (`PortSpace.TCP`, `UDP`, `IB`, `IPOIB`). */
  readonly portSpace: number;
  /** On an incoming connection: the event of its CONNECT_REQUEST (peer private data, parameters). */
  request: CmEvent | null = null;
  #closed = false;
  #listening = false;
  #connected = false;
  #disconnectSeen = false;
  #disconnectSent = false;
  #removed = false;
  #listener: CmId | null = null;
  #ownsChannel = false;
  #qp: QueuePair | null = null;
  readonly #bytes: Uint8Array;
  readonly #view: DataView;
  readonly #queue: CmEvent[] = [];
  readonly #waiters: Waiter[] = [];
  readonly #requests: CmId[] = [];
  readonly #disconnectWaiters: Waiter[] = [];

  /** @internal Wraps an id the channel created or received; use {@link EventChannel.createId}. */
  constructor(channel: EventChannel, ptr: NativePointer) {
    const n = native();
    const L = layoutFor(n.arch).rdma_cm_id;
    this.channel = channel;
    this.ptr = ptr;
    const buf = n.arrayBuffer(ptr, L.size);
    this.#bytes = new Uint8Array(buf);
    this.#view = new DataView(buf);
    this.portSpace = this.#view.getUint32(L.fields.ps.offset, true);
  }

  /** @internal Marks an id from a CONNECT_REQUEST as pending on `listener`. */
  _setListener(listener: CmId): void {
    this.#listener = listener;
  }

  /** @internal The id closes its channel when it closes (the helpers create one per id). */
  _ownChannel(): void {
    this.#ownsChannel = true;
  }

  /** True once closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** True after {@link CmId.listen}. */
  get listening(): boolean {
    return this.#listening;
  }

  /** True between ESTABLISHED and DISCONNECTED. */
  get connected(): boolean {
    return this.#connected;
  }

  /** True for the UD port spaces (UDP, IPoIB). */
  get isUd(): boolean {
    return this.portSpace === PortSpace.UDP || this.portSpace === PortSpace.IPOIB;
  }

  /** Throws {@link ClosedError} when the id or its channel is closed. */
  assertOpen(): void {
    if (this.#closed || this.channel.closed) throw new ClosedError("CmId");
  }

  #fields() {
    return layoutFor(native().arch).rdma_cm_id.fields;
  }

  /** The `struct ibv_context *` the id is bound to (NULL before bind/resolve). */
  get verbsPtr(): NativePointer | null {
    this.assertOpen();
    return native().readPointer(this.ptr, this.#fields().verbs.offset);
  }

  /** The `struct ibv_qp *` created on the id, or NULL. */
  get qpPtr(): NativePointer | null {
    this.assertOpen();
    return native().readPointer(this.ptr, this.#fields().qp.offset);
  }

  /** The RDMA port number the id is bound to (0 before bind/resolve). */
  get portNum(): number {
    this.assertOpen();
    return this.#view.getUint8(this.#fields().port_num.offset);
  }

  /** The QP created on the id with {@link CmId.createQp}, or null. */
  get qp(): QueuePair | null {
    return this.#qp;
  }

  /** @internal Attaches the QP that must be destroyed before the id. */
  _attachQp(qp: QueuePair | null): void {
    this.#qp = qp;
  }

  /**
   * The verbs {@link Context} of the device the id is bound to (librdmacm's
   * own context): allocate the PD, CQs and MRs of the id's QP from it.
   * Throws before the address is resolved or bound.
   */
  get context(): Context {
    const verbs = this.verbsPtr;
    if (verbs === null) {
      throw new InvalidArgumentError("the id is not bound to a device yet (resolve or bind first)");
    }
    return cmContext(verbs);
  }

  /**
   * Creates the id's QP (`rdma_create_qp`) with this library's PD and CQs and
   * returns it as a verbs {@link QueuePair}; see {@link createCmQp}. Post
   * receives before connect/accept.
   */
  createQp(pd: ProtectionDomain, init: CmQpInit): QueuePair {
    return createCmQp(this, pd, init);
  }

  /**
   * On iWARP the kernel moves the QP through RTR/RTS during the MPA exchange and to
   * ERROR on disconnect, without libibverbs seeing it: `qp->state`, which the
   * verbs layer checks before posting, stays at INIT (and siw's query reports
   * RESET). The connection manager records the state the connection reached.
   * On IB/RoCE librdmacm moves the QP itself and the cached state is right.
   */
  #recordIwarpQpState(state: number): void {
    const qp = this.#qp;
    if (this.#closed || !qp || qp.closed || this.transport !== "iwarp") return;
    qp.recordState(state as QpState);
  }

  #checkUdSupported(op: string): void {
    if ((this.isUd) && this.transport === "iwarp") {
      throw new UnsupportedError(
        op,
        Errno.EOPNOTSUPP,
        strerror(Errno.EOPNOTSUPP),
        "iWARP has no UD (datagram) service",
      );
    }
  }

  /** The local address (`route.addr.src_addr`), or null before bind/resolve. */
  get localAddress(): SocketAddress | null {
    this.assertOpen();
    return decodeSockaddr(this.#bytes, this.#fields()["route.addr.src_storage"].offset);
  }

  /** The peer address (`route.addr.dst_addr`), or null when not resolved/connected. */
  get peerAddress(): SocketAddress | null {
    this.assertOpen();
    return decodeSockaddr(this.#bytes, this.#fields()["route.addr.dst_storage"].offset);
  }

  /** The local port (`rdma_get_src_port`, host order). */
  get localPort(): number {
    this.assertOpen();
    return ntohs(native().rdmacm.rdma_get_src_port(this.ptr));
  }

  /** The peer port (`rdma_get_dst_port`, host order). */
  get peerPort(): number {
    this.assertOpen();
    return ntohs(native().rdmacm.rdma_get_dst_port(this.ptr));
  }

  /** The transport of the device the id is bound to: `"ib"` (IB, RoCE), `"iwarp"`, or null before binding. */
  get transport(): "ib" | "iwarp" | null {
    const verbs = this.verbsPtr;
    if (verbs === null) return null;
    const n = native();
    const L = layoutFor(n.arch);
    const dev = n.readPointer(verbs, L.ibv_context.fields.device.offset);
    if (dev === null) return null;
    const off = L.ibv_device.fields.transport_type.offset;
    const t = new DataView(n.arrayBuffer(dev, off + 4)).getInt32(off, true);
    return t === 1 ? "iwarp" : "ib";
  }

  /** What decides this id's private-data limits. */
  privateDataContext(): PrivateDataContext {
    const fam = this.#view.getUint16(this.#fields()["route.addr.src_addr.sa_family"].offset, true);
    return { transport: this.transport ?? "ib", ud: this.isUd, afIb: fam === AF_IB };
  }

  #check(op: string, rc: number, context?: string): void {
    if (rc !== 0) throw nativeError(op, native().errno() || Math.abs(rc), context);
  }

  /** Binds the id to a local address and port (`rdma_bind_addr`); port 0 picks one. */
  bind(address: AddressInput): void {
    this.assertOpen();
    const sa = toNative(encodeSockaddr(address), 128);
    try {
      this.#check(
        "rdma_bind_addr",
        native().rdmacm.rdma_bind_addr(this.ptr, sa),
        `${address.address}:${address.port ?? 0}`,
      );
    } finally {
      native().free(sa);
    }
  }

  /**
   * Resolves a destination address to an RDMA address (`rdma_resolve_addr`),
   * binding the id to a device; resolves on ADDR_RESOLVED, rejects with
   * {@link CmEventError} on ADDR_ERROR. `timeoutMs` is the kernel's limit
   * (default 2000); `options.timeout`/`signal` bound the wait itself.
   */
  resolveAddress(
    destination: AddressInput,
    options: CmWaitOptions & { source?: AddressInput; timeoutMs?: number } = {},
  ): Promise<CmEvent> {
    return this.#start("resolveAddress", [CmEventType.ADDR_RESOLVED], options, () => {
      const timeoutMs = kernelTimeout(options.timeoutMs);
      const dst = toNative(encodeSockaddr(destination), 128);
      const src = options.source ? toNative(encodeSockaddr(options.source), 128) : null;
      try {
        this.#check(
          "rdma_resolve_addr",
          native().rdmacm.rdma_resolve_addr(this.ptr, src, dst, timeoutMs),
          `${destination.address}:${destination.port ?? 0}`,
        );
      } finally {
        native().free(dst);
        native().free(src);
      }
    });
  }

  /** Resolves the route to the resolved address (`rdma_resolve_route`); resolves on ROUTE_RESOLVED. */
  resolveRoute(options: CmWaitOptions & { timeoutMs?: number } = {}): Promise<CmEvent> {
    return this.#start("resolveRoute", [CmEventType.ROUTE_RESOLVED], options, () => {
      const timeoutMs = kernelTimeout(options.timeoutMs);
      this.#check("rdma_resolve_route", native().rdmacm.rdma_resolve_route(this.ptr, timeoutMs));
    });
  }

  /** Starts listening (`rdma_listen`) for connection requests; `backlog` 0 means the default. */
  listen(backlog = 0): void {
    this.assertOpen();
    if (!Number.isInteger(backlog) || backlog < 0) {
      throw new InvalidArgumentError(`listen: backlog must be an integer >= 0, got ${backlog}`);
    }
    this.#check("rdma_listen", native().rdmacm.rdma_listen(this.ptr, backlog));
    this.#listening = true;
  }

  /**
   * Waits for the next incoming connection request on a listening id and
   * returns the new id (its `request` holds the peer's private data and
   * parameters). Accept it with {@link CmId.accept} or refuse it with
   * {@link CmId.reject}.
   */
  getRequest(options: CmWaitOptions = {}): Promise<CmId> {
    if (!this.#listening) {
      return Promise.reject(new InvalidArgumentError("getRequest: the id is not listening"));
    }
    const next = this.#requests.shift();
    if (next) return Promise.resolve(next);
    return this.#start("getRequest", [CmEventType.CONNECT_REQUEST], options, () => {}).then(
      (ev) => {
        const i = this.#requests.indexOf(ev.id);
        if (i >= 0) this.#requests.splice(i, 1);
        return ev.id;
      },
    );
  }

  /** Connection requests as they arrive (ends when the id is closed). */
  async *[Symbol.asyncIterator](): AsyncGenerator<CmId, void, undefined> {
    while (!this.#closed) {
      try {
        yield await this.getRequest();
      } catch (e) {
        if (e instanceof ClosedError) return;
        throw e;
      }
    }
  }

  /**
   * Connects (`rdma_connect`) after the route is resolved and, for RC, the QP
   * is created. Resolves on ESTABLISHED with the event (the peer's private data
   * and, for UD, the remote QPN, Q_Key and AH attributes); rejects with
   * {@link CmEventError} on REJECTED (with the peer's reject data),
   * UNREACHABLE or CONNECT_ERROR. Private data over the limit of the id's
   * transport is refused before the call.
   */
  connect(param: ConnParam = {}, options: CmWaitOptions = {}): Promise<CmEvent> {
    return this.#start("connect", [CmEventType.ESTABLISHED], options, () => {
      this.#checkUdSupported("rdma_connect");
      const cp = encodeConnParam("connect", param, this.privateDataContext());
      try {
        this.#check("rdma_connect", native().rdmacm.rdma_connect(this.ptr, cp.ptr));
      } finally {
        cp.free();
      }
    }).then((ev) => {
      if (!this.isUd) this.#connected = true;
      this.#recordIwarpQpState(QpState.RTS);
      return ev;
    });
  }

  /**
   * Accepts an incoming connection request (`rdma_accept`). For RC resolves on
   * ESTABLISHED; for UD (SIDR) at once. Post receives before accepting.
   */
  accept(param: ConnParam = {}, options: CmWaitOptions = {}): Promise<CmEvent | null> {
    if (this.isUd) {
      try {
        this.#accept(param);
      } catch (e) {
        return Promise.reject(e);
      }
      return Promise.resolve(null);
    }
    return this.#start("accept", [CmEventType.ESTABLISHED], options, () => this.#accept(param))
      .then((ev) => {
        this.#connected = true;
        this.#recordIwarpQpState(QpState.RTS);
        return ev;
      });
  }

  #accept(param: ConnParam): void {
    this.assertOpen();
    this.#checkUdSupported("rdma_accept");
    const cp = encodeConnParam("accept", param, this.privateDataContext());
    try {
      this.#check("rdma_accept", native().rdmacm.rdma_accept(this.ptr, cp.ptr));
      this.#listener = null;
    } finally {
      cp.free();
    }
  }

  /**
   * Refuses an incoming connection request (`rdma_reject`) with optional
   * private data (limit checked before the call), then closes this id.
   */
  reject(privateData?: Uint8Array): void {
    this.assertOpen();
    checkPrivateData("reject", privateData, this.privateDataContext());
    const n = native();
    const pd = privateData && privateData.length > 0 ? toNative(privateData) : null;
    try {
      this.#check("rdma_reject", n.rdmacm.rdma_reject(this.ptr, pd, pd ? privateData!.length : 0));
    } finally {
      n.free(pd);
    }
    this.#listener = null;
    this.close();
  }

  /** Completes a connection on the active side when the QP is not created through the CM (`rdma_establish`). */
  establish(): void {
    this.assertOpen();
    const f = native().rdmacm.rdma_establish;
    if (!f) throw new InvalidArgumentError("rdma_establish is not available in this librdmacm");
    this.#check("rdma_establish", f(this.ptr));
  }

  /** Tells the CM about a QP async event (`rdma_notify`), e.g. `EventType.COMM_EST`. */
  notify(event: number): void {
    this.assertOpen();
    this.#check("rdma_notify", native().rdmacm.rdma_notify(this.ptr, event));
  }

  /** Sets the type of service (`RDMA_OPTION_ID_TOS`, 0..255) for later connections. */
  setTos(tos: number): void {
    this.#setOption(OptionId.TOS, tos, 1, "TOS");
  }

  /** Allows binding to a port in use (`RDMA_OPTION_ID_REUSEADDR`). */
  setReuseAddress(on: boolean): void {
    this.#setOption(OptionId.REUSEADDR, on ? 1 : 0, 4, "REUSEADDR");
  }

  /** Restricts an IPv6 listener to IPv6 (`RDMA_OPTION_ID_AFONLY`). */
  setAfOnly(on: boolean): void {
    this.#setOption(OptionId.AFONLY, on ? 1 : 0, 4, "AFONLY");
  }

  /** Sets the QP's local ACK timeout exponent (`RDMA_OPTION_ID_ACK_TIMEOUT`, 0..31). */
  setAckTimeout(exponent: number): void {
    if (!Number.isInteger(exponent) || exponent < 0 || exponent > 31) {
      throw new InvalidArgumentError(`ACK timeout exponent must be 0..31, got ${exponent}`);
    }
    this.#setOption(OptionId.ACK_TIMEOUT, exponent, 1, "ACK_TIMEOUT");
  }

  #setOption(name: number, value: number, size: 1 | 4, what: string): void {
    this.assertOpen();
    if (!Number.isInteger(value) || value < 0 || value > (size === 1 ? 255 : 0x7fffffff)) {
      throw new InvalidArgumentError(`${what}: invalid value ${value}`);
    }
    const n = native();
    const p = n.alloc(8, 8);
    try {
      const v = new DataView(n.arrayBuffer(p, 8));
      if (size === 1) v.setUint8(0, value);
      else v.setInt32(0, value, true);
      this.#check(
        "rdma_set_option",
        n.rdmacm.rdma_set_option(this.ptr, OptionLevel.ID, name, p, size),
        what,
      );
    } finally {
      n.free(p);
    }
  }

  /**
   * Joins a multicast group (`rdma_join_multicast`) on a UD id whose address is
   * bound or resolved; resolves on MULTICAST_JOIN with the group's UD
   * parameters (QPN 0xffffff, Q_Key, AH attributes).
   */
  joinMulticast(group: AddressInput, options: CmWaitOptions = {}): Promise<CmEvent> {
    return this.#start("joinMulticast", [CmEventType.MULTICAST_JOIN], options, () => {
      if (this.transport === "iwarp") {
        throw new UnsupportedError(
          "rdma_join_multicast",
          Errno.EOPNOTSUPP,
          strerror(Errno.EOPNOTSUPP),
          "iWARP has no multicast",
        );
      }
      const sa = toNative(encodeSockaddr(group), 128);
      try {
        this.#check(
          "rdma_join_multicast",
          native().rdmacm.rdma_join_multicast(this.ptr, sa, null),
          group.address,
        );
      } finally {
        native().free(sa);
      }
    });
  }

  /** Leaves a multicast group (`rdma_leave_multicast`). */
  leaveMulticast(group: AddressInput): void {
    this.assertOpen();
    const sa = toNative(encodeSockaddr(group), 128);
    try {
      this.#check(
        "rdma_leave_multicast",
        native().rdmacm.rdma_leave_multicast(this.ptr, sa),
        group.address,
      );
    } finally {
      native().free(sa);
    }
  }

  /** Resolves when the connection has been disconnected (by either side); at once if it was. */
  waitDisconnected(options: CmWaitOptions = {}): Promise<void> {
    if (this.#disconnectSeen) return Promise.resolve();
    if (this.#closed) return Promise.reject(new ClosedError("CmId"));
    return this.#wait(
      "waitDisconnected",
      [CmEventType.DISCONNECTED],
      options,
      this.#disconnectWaiters,
    )
      .then(() => {});
  }

  /**
   * Disconnects (`rdma_disconnect`), waits until DISCONNECTED is seen (the
   * peer answered or the CM timed out; bounded by `options.timeout`, default
   * 10 s), then closes the id (QP first). Idempotent; a closed id resolves.
   */
  async disconnect(options: CmWaitOptions = {}): Promise<void> {
    if (this.#closed) return;
    const wasConnected = this.#connected || this.#disconnectSeen;
    this.#sendDisconnect();
    if (wasConnected && !this.#disconnectSeen) {
      try {
        await this.waitDisconnected({ timeout: 10_000, ...options });
      } catch (e) {
        if (!(e instanceof AbortedError) && !(e instanceof ClosedError)) throw e;
      }
    }
    this.close();
  }

  #sendDisconnect(): void {
    if (this.#disconnectSent || this.#closed) return;
    this.#disconnectSent = true;
    if (!this.#connected && !this.#disconnectSeen) return;
    // errors here (e.g. EINVAL after the peer's DREQ already moved the id) are not actionable
    native().rdmacm.rdma_disconnect(this.ptr);
  }

  /**
   * Tears the id down in order: disconnects if connected (without waiting),
   * destroys its QP, rejects waiting operations with {@link ClosedError},
   * closes pending requests of a listener, then destroys the id. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    if (this.#connected && !this.#disconnectSeen) this.#sendDisconnect();
    let qpError: unknown;
    try {
      this.#qp?.close();
    } catch (e) {
      qpError = e;
    }
    this.#qp = null;
    for (const r of this.#requests.splice(0)) r.#refuse();
    this.#closed = true;
    this.#connected = false;
    const err = new ClosedError("CmId");
    for (const w of [...this.#waiters, ...this.#disconnectWaiters]) w.reject(err);
    this.channel._forget(this);
    const n = native();
    const rc = n.rdmacm.rdma_destroy_id(this.ptr);
    const errno = rc !== 0 ? n.errno() : 0;
    if (this.#ownsChannel) this.channel.close();
    if (rc !== 0) throw nativeError("rdma_destroy_id", errno);
    if (qpError) throw qpError;
  }

  /** A request nobody accepted: reject it without private data (the id closes). */
  #refuse(): void {
    if (this.#closed) return;
    native().rdmacm.rdma_reject(this.ptr, null, 0);
    this.close();
  }

  /** Alias of {@link CmId.close}. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** Alias of {@link CmId.disconnect}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.disconnect();
  }

  /** @internal Delivers an event read from the channel. */
  _deliver(ev: CmEvent): void {
    if (this.#closed) return;
    switch (ev.type) {
      case CmEventType.CONNECT_REQUEST:
        ev.id.request = ev;
        this.#requests.push(ev.id);
        break;
      case CmEventType.ESTABLISHED:
        if (!this.isUd) this.#connected = true;
        break;
      case CmEventType.DISCONNECTED:
        this.#disconnectSeen = true;
        this.#connected = false;
        this.#recordIwarpQpState(QpState.ERR);
        for (const w of this.#disconnectWaiters.slice()) w.resolve(ev);
        break;
      case CmEventType.DEVICE_REMOVAL: {
        // every wait on the id fails: the device is gone (close the id next)
        this.#removed = true;
        this.#connected = false;
        for (const w of [...this.#waiters, ...this.#disconnectWaiters]) {
          w.reject(new CmEventError(w.op, ev.type, ev.name, ev.status, ev.privateData));
        }
        return;
      }
    }
    const i = this.#waiters.findIndex((w) => w.types.includes(ev.type));
    if (i >= 0) return this.#waiters[i].resolve(ev);
    if ((FAILURES.has(ev.type) || ev.type === CmEventType.DISCONNECTED) && this.#waiters.length) {
      const w = this.#waiters[0];
      return w.reject(new CmEventError(w.op, ev.type, ev.name, ev.status, ev.privateData));
    }
    if (ev.type === CmEventType.DISCONNECTED || ev.type === CmEventType.CONNECT_REQUEST) return;
    this.#queue.push(ev);
    if (this.#queue.length > QUEUE_MAX) this.#queue.shift();
  }

  /** Starts an operation (synchronously) and waits for one of `types`. */
  #start(
    op: string,
    types: readonly number[],
    options: CmWaitOptions,
    call: () => void,
  ): Promise<CmEvent> {
    try {
      this.assertOpen();
      if (this.#removed) throw new ClosedError("CmId (its device was removed)");
      checkWaitOptions(options);
      call();
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#wait(op, types, options, this.#waiters);
  }

  #wait(
    op: string,
    types: readonly number[],
    options: CmWaitOptions,
    list: Waiter[],
  ): Promise<CmEvent> {
    // an event that arrived before anyone waited for it
    const qi = this.#queue.findIndex((e) => types.includes(e.type) || FAILURES.has(e.type));
    if (qi >= 0 && list === this.#waiters) {
      const [ev] = this.#queue.splice(qi, 1);
      return types.includes(ev.type)
        ? Promise.resolve(ev)
        : Promise.reject(new CmEventError(op, ev.type, ev.name, ev.status, ev.privateData));
    }
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(abortError(op, signal));
    const channel = this.channel;
    return new Promise<CmEvent>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      let onAbort: (() => void) | undefined;
      const finish = () => {
        const i = list.indexOf(w);
        if (i < 0) return false;
        list.splice(i, 1);
        if (timer !== undefined) clearTimeout(timer);
        if (onAbort) signal!.removeEventListener("abort", onAbort);
        channel._release();
        return true;
      };
      const w: Waiter = {
        op,
        types,
        resolve(ev) {
          if (finish()) resolve(ev);
        },
        reject(e) {
          if (finish()) reject(e);
        },
      };
      if (signal) {
        onAbort = () => w.reject(abortError(op, signal));
        signal.addEventListener("abort", onAbort, { once: true });
      }
      if (options.timeout !== undefined) {
        timer = setTimeout(
          () => w.reject(new AbortedError(`${op}: no event within ${options.timeout} ms`)),
          options.timeout,
        );
      }
      list.push(w);
      channel._hold();
    });
  }
}

function abortError(op: string, signal: AbortSignal): RdmaError {
  const r = signal.reason;
  if (r instanceof AbortedError) return r;
  return new AbortedError(`${op} aborted${r instanceof Error ? `: ${r.message}` : ""}`, {
    cause: r,
  });
}

function checkWaitOptions(o: CmWaitOptions): void {
  if (o.timeout !== undefined && !(Number.isFinite(o.timeout) && o.timeout >= 0)) {
    throw new InvalidArgumentError(`timeout must be a number >= 0 (ms), got ${o.timeout}`);
  }
}

function kernelTimeout(ms: number | undefined): number {
  if (ms === undefined) return 2000;
  if (!Number.isInteger(ms) || ms <= 0 || ms > 0x7fffffff) {
    throw new InvalidArgumentError(`timeoutMs must be a positive integer, got ${ms}`);
  }
  return ms;
}

function ntohs(v: number): number {
  return ((v & 0xff) << 8) | ((v >> 8) & 0xff);
}
