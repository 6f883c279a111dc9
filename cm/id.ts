/**
 * `struct rdma_cm_id`: one connection manager endpoint - a listener, a connection (RC) or a
 * datagram endpoint (UD) - with promise-shaped operations whose results arrive as events on its
 * {@link CmEventChannel}. This file holds the id's state and its connection operations; what
 * does not depend on the state (addresses, options, the rdma_verbs.h helpers) is the base class
 * in `id-base.ts`, the waits and queued events are `_id-events.ts`.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { AbortedError, ClosedError, InvalidArgumentError } from "../types/errors.ts";
import { CmEventType, QpState } from "../types/enums.ts";
import { checkCall, nativeError } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkConstruct, checkResource, CONSTRUCT, type NativeResource } from "../ffi/resource.ts";
import { checkWaitOptions, type WaitOptions } from "../poller/wait.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import { qpByNumber, type QueuePair, recordQpState } from "../verbs/qp.ts";
import { createCmQp } from "./_qp.ts";
import { type AddressInput, encodeSockaddr, SOCKADDR_STORAGE_SIZE } from "./address.ts";
import type { CmEventChannel } from "./channel.ts";
import { forgetId, registerId } from "./_ids.ts";
import { checkPrivateData, type ConnParam, encodeConnParam } from "./conn_param.ts";
import type { CmEvent } from "./event.ts";
import {
  CmIdBase,
  type CmQpInit,
  type DisconnectOptions,
  type JoinMulticastOptions,
  type ResolveOptions,
} from "./id-base.ts";
import { releaseRemovedDevices } from "./_context.ts";
import { failure, IdEvents } from "./_id-events.ts";
import { joinMulticast, unsupportedOn } from "./_id-options.ts";
import { type PathInput, setIbPath } from "./path.ts";
import { asBytes, type Bytes } from "../types/bytes.ts";
import { checkInteger, describe } from "../types/check.ts";

/** Channels the cm helpers made for an id: each closes when the last id on it closes. */
const ownedByIds = new WeakSet<CmEventChannel>();

/**
 * What the channel and the cm helpers reach inside an id (module-private; the functions below
 * document each): the class's static block fills it with functions that read private fields.
 */
let internals: {
  deliver(id: CmId, ev: CmEvent): void;
  setRequestHook(id: CmId, hook: (request: CmId) => CmId): void;
  ownAfter(id: CmId, resource: NativeResource | null, pd?: ProtectionDomain): void;
  events(id: CmId): IdEvents<CmId>;
};

/**
 * One rdma_cm id. Create it with {@link CmEventChannel.createId} (or the `listen`/`connect`
 * helpers); incoming connections arrive as ids from {@link CmId.getRequest}.
 *
 * Teardown is ordered for the caller: {@link CmId.close} disconnects a connected id, destroys
 * its QP, then the id; {@link CmId.disconnect} also waits until the peer has seen the disconnect.
 */
export class CmId extends CmIdBase implements AsyncDisposable {
  /** On an incoming connection: the event of its CONNECT_REQUEST (peer private data, parameters). */
  request: CmEvent | null = null;
  #listening = false;
  #connected = false;
  #disconnectSeen = false;
  #disconnectSent = false;
  #removed = false;
  #moved = false;
  #qp: QueuePair | null = null;
  /** The number of a plain verbs QP connected through this id (`qpNum` of connect/accept). */
  #plainQpNum: number | null = null;
  #pd: ProtectionDomain | null = null;
  /** Objects made for the id (by `createEndpoint`) that close after it, newest first. */
  #owned: NativeResource[] = [];
  #onRequest: ((request: CmId) => CmId) | null = null;
  readonly #events: IdEvents<CmId>;

  /** Not for direct use: ids come from {@link CmEventChannel.createId} and connection requests. */
  constructor(channel: CmEventChannel, ptr: NativePointer, token: symbol) {
    checkConstruct(token, "CM ids are made by CmEventChannel.createId()");
    super(channel, ptr);
    this.#events = new IdEvents(channel);
  }

  static {
    internals = {
      deliver: (id, ev) => id.#deliver(ev),
      setRequestHook: (id, hook) => {
        id.#onRequest = hook;
      },
      ownAfter: (id, resource, pd) => {
        if (resource) id.#owned.push(resource);
        if (pd) id.#pd = pd;
      },
      events: (id) => id.#events,
    };
  }

  /** True after {@link CmId.listen}. */
  get listening(): boolean {
    return this.#listening;
  }

  /** True between ESTABLISHED and DISCONNECTED. */
  get connected(): boolean {
    return this.#connected;
  }

  /** The QP created on the id with {@link CmId.createQp}, or null. */
  get qp(): QueuePair | null {
    return this.#qp && !this.#qp.closed ? this.#qp : null;
  }

  /**
   * The id's PD (`id->pd`): the PD of its QP, or the one `createEndpoint` made or was given;
   * null before. The `rdma_reg_*` helpers register memory in it.
   */
  get pd(): ProtectionDomain | null {
    return this.#pd && !this.#pd.closed ? this.#pd : null;
  }

  /**
   * Creates the id's QP (`rdma_create_qp`) with this library's PD and CQs (from `id.context`)
   * and returns it as a verbs {@link QueuePair}; it closes before the id. An RC QP is left in
   * INIT: post receives now, before connect/accept.
   */
  createQp(pd: ProtectionDomain, init: CmQpInit): QueuePair {
    this.assertOpen();
    if (this.qp) throw new InvalidArgumentError("the CM id already has a QP");
    const qp = createCmQp(this, pd, init);
    this.#qp = qp;
    this.#pd = pd;
    return qp;
  }

  /**
   * On iWARP the kernel moves the QP through RTR/RTS during the MPA exchange and to ERROR on
   * disconnect, without libibverbs seeing it; the connection manager records the state the
   * connection reached. On IB/RoCE librdmacm moves the QP itself and the cached state is right.
   */
  #recordIwarpQpState(state: QpState): void {
    if (this.closed || this.transport !== "iwarp") return;
    const qp = this.qp ??
      (this.#plainQpNum === null ? null : qpByNumber(this.context, this.#plainQpNum));
    if (qp) recordQpState(qp, state);
  }

  /** Binds the id to a local address and port (`rdma_bind_addr`); port 0 picks one. */
  bind(address: AddressInput): void {
    this.assertOpen();
    const sa = NativeBlock.from(encodeSockaddr(address), SOCKADDR_STORAGE_SIZE);
    try {
      checkCall(
        "rdma_bind_addr",
        native().rdmacm.rdma_bind_addr(this.ptr, sa.ptr),
        `${address.address}:${address.port ?? 0}`,
      );
    } finally {
      sa.free();
    }
  }

  /**
   * Resolves a destination address to an RDMA address (`rdma_resolve_addr`), binding the id to
   * a device; resolves on ADDR_RESOLVED, rejects with CmEventError on ADDR_ERROR. `timeoutMs`
   * is the kernel's limit (default 2000); `timeout`/`signal` bound the wait itself.
   */
  resolveAddress(
    destination: AddressInput,
    options: ResolveOptions & { source?: AddressInput } = {},
  ): Promise<CmEvent> {
    options ??= {}; // null is "no options" everywhere
    return this.#start("resolveAddress", [CmEventType.ADDR_RESOLVED], options, () => {
      const timeoutMs = kernelTimeout(options.timeoutMs);
      const dst = NativeBlock.from(encodeSockaddr(destination), SOCKADDR_STORAGE_SIZE);
      const src = options.source
        ? NativeBlock.from(encodeSockaddr(options.source), SOCKADDR_STORAGE_SIZE)
        : null;
      try {
        checkCall(
          "rdma_resolve_addr",
          native().rdmacm.rdma_resolve_addr(this.ptr, src?.ptr ?? null, dst.ptr, timeoutMs),
          `${destination.address}:${destination.port ?? 0}`,
        );
      } finally {
        dst.free();
        src?.free();
      }
    });
  }

  /**
   * Resolves the route to the resolved address (`rdma_resolve_route`); resolves on
   * ROUTE_RESOLVED. Refused with InvalidArgumentError before the address is resolved.
   */
  resolveRoute(options: ResolveOptions = {}): Promise<CmEvent> {
    options ??= {};
    return this.#start("resolveRoute", [CmEventType.ROUTE_RESOLVED], options, () => {
      const timeoutMs = kernelTimeout(options.timeoutMs);
      this.requireDevice("resolveRoute", "await resolveAddress first");
      checkCall("rdma_resolve_route", native().rdmacm.rdma_resolve_route(this.ptr, timeoutMs));
    });
  }

  /** Starts listening (`rdma_listen`) for connection requests; `backlog` 0 means the default. */
  listen(backlog = 0): void {
    this.assertOpen();
    checkInteger("listen: backlog", backlog, 0, 0x7fffffff);
    checkCall("rdma_listen", native().rdmacm.rdma_listen(this.ptr, backlog));
    this.#listening = true;
  }

  /**
   * Waits for the next incoming connection request on a listening id and returns the new id
   * (its `request` holds the peer's private data and parameters). Accept it with
   * {@link CmId.accept} or refuse it with {@link CmId.reject}.
   */
  getRequest(options: WaitOptions = {}): Promise<CmId> {
    if (!this.#listening) {
      return Promise.reject(new InvalidArgumentError("getRequest: the id is not listening"));
    }
    const next = this.#events.requests.shift();
    if (next) {
      try {
        return Promise.resolve(this.#onRequest ? this.#onRequest(next) : next);
      } catch (e) {
        return Promise.reject(e);
      }
    }
    return this.#start("getRequest", [CmEventType.CONNECT_REQUEST], options, () => {}).then(
      (ev) => {
        const requests = this.#events.requests;
        const i = requests.indexOf(ev.id);
        if (i >= 0) requests.splice(i, 1);
        return this.#onRequest ? this.#onRequest(ev.id) : ev.id;
      },
    );
  }

  /** Connection requests as they arrive (ends when the id is closed). */
  async *[Symbol.asyncIterator](): AsyncGenerator<CmId, void, undefined> {
    while (!this.closed) {
      try {
        yield await this.getRequest();
      } catch (e) {
        if (e instanceof ClosedError) return;
        throw e;
      }
    }
  }

  /**
   * Connects (`rdma_connect`) after the route is resolved and, for RC, the QP is created.
   * Resolves on ESTABLISHED with the event (the peer's private data and, for UD, the remote QPN,
   * Q_Key and AH attributes); rejects with CmEventError on REJECTED (with the peer's reject
   * data), UNREACHABLE or CONNECT_ERROR. Private data over the limit of the id's transport is
   * refused before the call.
   */
  connect(param: ConnParam = {}, options: WaitOptions = {}): Promise<CmEvent> {
    // without a QP on the id (a QP of plain verbs, `qpNum` in param), IB/RoCE answer with
    // CONNECT_RESPONSE: move the QP with initQpAttr(RTR, RTS), then establish()
    const types = this.isUd || this.qp
      ? [CmEventType.ESTABLISHED]
      : [CmEventType.ESTABLISHED, CmEventType.CONNECT_RESPONSE];
    return this.#start("connect", types, options, () => {
      this.requireDevice("connect", "resolve the address and route first");
      this.checkUdSupported("rdma_connect");
      const cp = encodeConnParam("connect", param, this.privateDataContext());
      if (!this.qp && param.qpNum !== undefined) this.#plainQpNum = param.qpNum;
      try {
        checkCall("rdma_connect", native().rdmacm.rdma_connect(this.ptr, cp.ptr));
      } finally {
        cp.free();
      }
    }).then((ev) => {
      if (ev.type === CmEventType.CONNECT_RESPONSE) return ev;
      if (!this.isUd) this.#connected = true;
      this.#recordIwarpQpState(QpState.RTS);
      return ev;
    });
  }

  /**
   * Accepts an incoming connection request (`rdma_accept`). For RC resolves on ESTABLISHED;
   * for UD (SIDR) at once with null. Post receives before accepting.
   */
  accept(param: ConnParam = {}, options: WaitOptions = {}): Promise<CmEvent | null> {
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
    this.requireDevice("accept", "accept an id from getRequest()");
    this.checkUdSupported("rdma_accept");
    const cp = encodeConnParam("accept", param, this.privateDataContext());
    if (!this.qp && param.qpNum !== undefined) this.#plainQpNum = param.qpNum;
    try {
      checkCall("rdma_accept", native().rdmacm.rdma_accept(this.ptr, cp.ptr));
    } finally {
      cp.free();
    }
  }

  /**
   * Refuses an incoming connection request (`rdma_reject`) with optional private data (limit
   * checked before the call), then closes this id.
   */
  reject(privateData?: Bytes): void {
    this.assertOpen();
    checkPrivateData("reject", privateData, this.privateDataContext());
    const bytes = privateData ? asBytes(privateData, "privateData") : undefined;
    const pd = bytes && bytes.length > 0 ? NativeBlock.from(bytes) : null;
    try {
      checkCall(
        "rdma_reject",
        native().rdmacm.rdma_reject(this.ptr, pd?.ptr ?? null, pd ? bytes!.length : 0),
      );
    } finally {
      pd?.free();
    }
    this.close();
  }

  /**
   * Completes a connection on the active side when the QP is not the id's (`rdma_establish`):
   * after {@link CmId.connect} resolved with CONNECT_RESPONSE and the QP was moved to RTS with
   * {@link CmId.initQpAttr}, this sends the RTU; the id is connected from then on.
   */
  establish(): void {
    this.assertOpen();
    const f = native().rdmacm.rdma_establish;
    if (!f) throw unsupportedOn(this, "rdma_establish", "this librdmacm has no rdma_establish");
    checkCall("rdma_establish", f(this.ptr));
    this.#connected = true;
  }

  /**
   * Sets the route of an id whose address is resolved from IB path records (the
   * `RDMA_OPTION_IB_PATH` option) instead of resolving it; resolves on ROUTE_RESOLVED. On RoCE
   * a record from another id's `routePaths` to the same peer works. iWARP has no path records:
   * `UnsupportedError` naming the device.
   */
  setIbPath(paths: readonly PathInput[], options: WaitOptions = {}): Promise<CmEvent> {
    return this.#start("setIbPath", [CmEventType.ROUTE_RESOLVED], options, () => {
      this.requireDevice("setIbPath", "await resolveAddress first");
      if (this.transport === "iwarp") {
        throw unsupportedOn(this, "rdma_set_option(RDMA_OPTION_IB_PATH)", "iWARP has no IB paths");
      }
      setIbPath(this, paths);
    });
  }

  /**
   * Moves the id to another event channel (`rdma_migrate_id`): its events, those not read yet
   * included, arrive on `channel` from now on. Returns the id on its new channel - a new
   * {@link CmId} object for the same `rdma_cm_id`, with its QP, state, queued events and
   * requests - and closes this object without destroying anything. Refused while an operation
   * waits on the id.
   */
  migrate(channel: CmEventChannel): CmId {
    this.assertOpen();
    checkResource<CmEventChannel>(channel, "CmEventChannel", "channel");
    if (channel === this.channel) return this;
    if (this.#events.waiting > 0) {
      throw new InvalidArgumentError(
        "migrate: an operation waits on the id (migrate before or after it)",
      );
    }
    checkCall("rdma_migrate_id", native().rdmacm.rdma_migrate_id(this.ptr, channel.ptr));
    const to = registerId(channel, this.ptr, new CmId(channel, this.ptr, CONSTRUCT));
    to.#listening = this.#listening;
    to.#connected = this.#connected;
    to.#disconnectSeen = this.#disconnectSeen;
    to.#disconnectSent = this.#disconnectSent;
    to.#removed = this.#removed;
    to.#qp = this.#qp;
    to.#pd = this.#pd;
    to.#owned = this.#owned.splice(0);
    to.#onRequest = this.#onRequest;
    to.request = this.request;
    this.#events.moveTo(to.#events);
    this.#moved = true;
    this.#qp = null;
    this.close();
    return to;
  }

  /**
   * Joins a multicast group (`rdma_join_multicast`, or `rdma_join_multicast_ex` with
   * `options.joinFlags`) on a UD id whose address is bound or resolved; resolves on
   * MULTICAST_JOIN with the group's UD parameters (QPN 0xffffff, Q_Key, AH attributes).
   */
  joinMulticast(group: AddressInput, options: JoinMulticastOptions = {}): Promise<CmEvent> {
    options ??= {};
    return this.#start(
      "joinMulticast",
      [CmEventType.MULTICAST_JOIN],
      options,
      () => joinMulticast(this, group, options.joinFlags),
    );
  }

  /** Resolves when the connection has been disconnected (by either side); at once if it was. */
  waitDisconnected(options: WaitOptions = {}): Promise<void> {
    if (this.#disconnectSeen) return Promise.resolve();
    if (this.closed) return Promise.reject(new ClosedError("CmId"));
    return this.#events.waitDisconnected(options).then(() => {});
  }

  /**
   * Disconnects (`rdma_disconnect`), waits until DISCONNECTED is seen (the peer answered or
   * the CM timed out; bounded by `options.timeout`, default 10 s), then closes the id (QP
   * first) unless `options.close` is false. Idempotent; a closed id resolves.
   */
  async disconnect(options: DisconnectOptions = {}): Promise<void> {
    options ??= {};
    if (this.closed) return;
    checkWaitOptions(options);
    if (options.close !== undefined && typeof options.close !== "boolean") {
      throw new InvalidArgumentError(
        `disconnect: close must be a boolean, got ${describe(options.close)}`,
      );
    }
    const wasConnected = this.#connected || this.#disconnectSeen;
    this.#sendDisconnect();
    if (wasConnected && !this.#disconnectSeen) {
      try {
        await this.waitDisconnected({ timeout: 10_000, ...options });
      } catch (e) {
        if (!(e instanceof AbortedError) && !(e instanceof ClosedError)) throw e;
      }
    }
    if (options.close !== false) this.close();
  }

  #sendDisconnect(): void {
    if (this.#disconnectSent || this.closed) return;
    this.#disconnectSent = true;
    if (!this.#connected && !this.#disconnectSeen) return;
    // errors here (e.g. EINVAL after the peer's DREQ already moved the id) are not actionable
    native().rdmacm.rdma_disconnect(this.ptr);
  }

  /**
   * Closing tears the id down in order: disconnects if connected (without waiting), destroys its
   * QP, rejects waiting operations with ClosedError, refuses pending requests of a listener,
   * then destroys the id (and the channel the `cmListen`/`cmConnect` helpers made, once no id uses it).
   */
  protected override beforeClose(): void {
    if (this.#moved) return;
    if (this.#connected && !this.#disconnectSeen) this.#sendDisconnect();
    this.#qp?.close();
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    this.#qp = null;
    for (const r of this.#events.requests.splice(0)) r.#refuse();
    this.#connected = false;
    let err: ClosedError | undefined; // made only when a wait is pending
    this.#events.failAll(() => err ??= new ClosedError("CmId"));
    const n = native();
    // a migrated id lives on in the object of its new channel
    const rc = this.#moved ? 0 : n.rdmacm.rdma_destroy_id(this.ptr);
    const errno = rc !== 0 ? n.errno() : 0;
    forgetId(this.channel, this.ptr, this);
    if (this.#removed) releaseRemovedDevices();
    let first: unknown = null;
    for (const r of this.#owned.splice(0).reverse()) {
      try {
        r.close();
      } catch (e) {
        first ??= e;
      }
    }
    // a helper's channel outlives its listener while accepted connections still use it
    if (ownedByIds.has(this.channel) && this.channel.ids.length === 0) this.channel.close();
    if (rc !== 0) throw nativeError("rdma_destroy_id", errno);
    if (first !== null) throw first;
  }

  /** A request nobody accepted: reject it without private data (the id closes). */
  #refuse(): void {
    if (this.closed) return;
    native().rdmacm.rdma_reject(this.ptr, null, 0);
    this.close();
  }

  /** Alias of {@link CmId.disconnect}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.disconnect();
  }

  #deliver(ev: CmEvent): void {
    if (this.closed) return;
    switch (ev.type) {
      case CmEventType.CONNECT_REQUEST:
        ev.id.request = ev;
        this.#events.requests.push(ev.id);
        break;
      case CmEventType.ESTABLISHED:
        if (!this.isUd) this.#connected = true;
        break;
      case CmEventType.DISCONNECTED:
        this.#disconnectSeen = true;
        this.#connected = false;
        this.#recordIwarpQpState(QpState.ERR);
        this.#events.notifyEnd(ev);
        break;
      case CmEventType.DEVICE_REMOVAL:
        // every wait on the id fails: the device is gone (close the id next)
        this.#removed = true;
        this.#connected = false;
        this.#events.failAll((w) => failure(w.op, ev));
        this.#events.notifyEnd(ev);
        return;
    }
    this.#events.route(ev);
  }

  /** Starts an operation (synchronously) and waits for one of `types`. */
  #start(
    op: string,
    types: readonly number[],
    options: WaitOptions,
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
    return this.#events.wait({ op, types }, options);
  }
}

/**
 * The id's channel closes when the last id on it closes (module-private: the helpers make a
 * channel per connection or listener; a listener's accepted connections share it).
 */
export function ownChannel(id: CmId): void {
  ownedByIds.add(id.channel);
}

/**
 * Runs `hook` on every request `getRequest` returns from this listening id and returns what it
 * returns (module-private: `createEndpoint` creates each request's QP, like `rdma_get_request`).
 */
export function setRequestHook(id: CmId, hook: (request: CmId) => CmId): void {
  internals.setRequestHook(id, hook);
}

/**
 * Makes `resource` close after the id is destroyed, and `pd` the id's PD (module-private:
 * `createEndpoint`'s PD, CQs and channels).
 */
export function ownAfter(
  id: CmId,
  resource: NativeResource | null,
  pd?: ProtectionDomain,
): void {
  internals.ownAfter(id, resource, pd);
}

/**
 * Calls `observer` when `id`'s connection ends (DISCONNECTED, DEVICE_REMOVAL) without holding its
 * event channel; returns the remover (module-private to the library: streams use it).
 */
export function observeConnectionEnd(id: CmId, observer: (ev: CmEvent) => void): () => void {
  return internals.events(id).observeEnd(observer);
}

/** Delivers an event read from the channel to its id (module-private to the cm layer). */
export function deliverEvent(id: CmId, ev: CmEvent): void {
  internals.deliver(id, ev);
}

function kernelTimeout(ms: number | undefined): number {
  if (ms === undefined) return 2000;
  checkInteger("timeoutMs", ms, 1, 0x7fffffff);
  return ms;
}
