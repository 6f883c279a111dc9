/**
 * The common flows in one call each: {@link cmListen} (create, bind, listen) and
 * {@link cmConnect} (create, resolve address and route, create the QP, post
 * receives, connect).
 *
 * @module
 */

import { checkConstruct, CONSTRUCT } from "../ffi/resource.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import type { PortSpace } from "../types/enums.ts";
import { parseIPv4, parseIPv6, type RdmaAddr, toAddr } from "./address.ts";
import { getAddrInfo } from "./addrinfo.ts";
import { CmEventChannel } from "./channel.ts";
import type { ConnParam } from "./conn_param.ts";
import type { CmEvent } from "./event.ts";
import { type CmId, ownChannel } from "./id.ts";
import type { WaitOptions } from "../poller/wait.ts";

/** Options of {@link cmListen}. */
export interface CmListenOptions {
  /** Local address or host name to bind (default "0.0.0.0", any IPv4 address; "::" for any). */
  hostname?: string;
  /** Former name of `hostname` (kept as an alias). */
  address?: string;
  /** Local port; 0 (default) picks a free one. */
  port?: number;
  /** Pending connection requests the kernel queues (0 = its default). */
  backlog?: number;
  /** Port space (default `"TCP"`: RC; `"UDP"` for UD). */
  portSpace?: keyof typeof PortSpace;
  /** Event channel to use; by default the listener gets its own and closes it. */
  channel?: CmEventChannel;
  /** Sets `RDMA_OPTION_ID_REUSEADDR` before binding. */
  reuseAddress?: boolean;
}

/**
 * A listening id. `await listener.accept()` (or `for await (const req of
 * listener)`) yields each incoming connection as a new {@link CmId}: create
 * its QP, post receives, then `await req.accept(...)` or `req.reject(...)`.
 * Closing the listener rejects requests nobody took; accepted connections
 * stay open; the channel the listener made closes when the last of them closes.
 */
export class CmListener implements Disposable {
  /** The listening id. */
  readonly id: CmId;
  /** The bound address (the port filled in when 0 was asked for), shaped as `RdmaListener.addr`. */
  readonly addr: RdmaAddr;

  /** Not for direct use: {@link cmListen} makes one. */
  constructor(id: CmId, token: symbol) {
    checkConstruct(token, "listeners are made by cmListen()");
    if (!id.listening) throw new InvalidArgumentError("CmListener: the id is not listening");
    this.id = id;
    this.addr = toAddr(id.localAddress, id.isUd ? "udp" : "tcp");
  }

  /** The next incoming connection request. */
  accept(options: WaitOptions = {}): Promise<CmId> {
    return this.id.getRequest(options);
  }

  /** Incoming connection requests until the listener closes. */
  [Symbol.asyncIterator](): AsyncGenerator<CmId, void, undefined> {
    return this.id[Symbol.asyncIterator]();
  }

  /** Stops listening: pending requests are rejected and the id closes; accepted connections stay open. */
  close(): void {
    this.id.close();
  }

  /** Alias of {@link CmListener.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}

/** A new id on `channel`, or on a channel of its own that it closes when it closes. */
function newId(channel: CmEventChannel | undefined, portSpace: keyof typeof PortSpace): CmId {
  if (channel) return channel.createId(portSpace);
  const own = new CmEventChannel();
  try {
    const id = own.createId(portSpace);
    ownChannel(id);
    return id;
  } catch (e) {
    own.close();
    throw e;
  }
}

/**
 * A numeric address for `host`: itself when numeric, else the first address `rdma_getaddrinfo`
 * resolves it to (local ones for a listener).
 */
export function numericHost(host: string, passive: boolean): string {
  if (typeof host !== "string" || host === "") {
    throw new InvalidArgumentError(`hostname must be a non-empty string, got ${String(host)}`);
  }
  if (parseIPv4(host) || parseIPv6(host)) return host;
  const found = getAddrInfo(host, null, { passive, noRoute: true });
  const a = passive ? found[0]?.source : found[0]?.destination;
  if (!a) throw new InvalidArgumentError(`hostname "${host}" resolves to no address`);
  return a.address;
}

/** Creates an id, binds it and listens. */
export function cmListen(options: CmListenOptions): CmListener {
  if (typeof options !== "object" || options === null) {
    throw new InvalidArgumentError("listen options must be an object");
  }
  const host = numericHost(options.hostname ?? options.address ?? "0.0.0.0", true);
  const id = newId(options.channel, options.portSpace ?? "TCP");
  try {
    if (options.reuseAddress) id.setReuseAddress(true);
    id.bind({ address: host, port: options.port ?? 0 });
    id.listen(options.backlog ?? 0);
    return new CmListener(id, CONSTRUCT);
  } catch (e) {
    id.close();
    throw e;
  }
}

/** Options of {@link cmConnect}: where to connect, the connection parameters and the wait bounds. */
export interface CmConnectOptions extends ConnParam, WaitOptions {
  /** Destination host name or numeric IPv4/IPv6 address (names resolve through `rdma_getaddrinfo`). */
  hostname?: string;
  /** Former name of `hostname` (kept as an alias). */
  address?: string;
  /** Destination port. */
  port: number;
  /** Local address to resolve from. */
  source?: string;
  /** Port space (default `"TCP"`: RC; `"UDP"` for UD). */
  portSpace?: keyof typeof PortSpace;
  /** Event channel to use; by default the id gets its own and closes it. */
  channel?: CmEventChannel;
  /** Kernel timeout of address and of route resolution, ms (default 2000). */
  resolveTimeoutMs?: number;
  /** Type of service for the connection. */
  tos?: number;
  /**
   * Runs after the route is resolved and before `rdma_connect`: create the QP
   * on the id (`createQp`) and post receives here.
   */
  beforeConnect?: (id: CmId) => void | Promise<void>;
}

/** The result of {@link cmConnect}: the connected id and its ESTABLISHED event. */
export interface CmConnection {
  /** The connected id (close or `await disconnect()` it). */
  readonly id: CmId;
  /** The ESTABLISHED event (peer private data; UD parameters for UD ids). */
  readonly event: CmEvent;
}

/**
 * Creates an id, resolves the address and route, runs `beforeConnect`, then
 * connects. On any failure the id is closed and the error (a
 * {@link CmEventError} for REJECTED/UNREACHABLE/...) is thrown.
 */
export async function cmConnect(options: CmConnectOptions): Promise<CmConnection> {
  if (typeof options !== "object" || options === null) {
    throw new InvalidArgumentError("connect options must be an object");
  }
  const target = options.hostname ?? options.address;
  if (target === undefined) throw new InvalidArgumentError("connect: hostname is required");
  const host = numericHost(target, false);
  const id = newId(options.channel, options.portSpace ?? "TCP");
  try {
    const wait = { signal: options.signal, timeout: options.timeout };
    if (options.tos !== undefined) id.setTos(options.tos);
    await id.resolveAddress(
      { address: host, port: options.port },
      {
        ...wait,
        source: options.source === undefined ? undefined : { address: options.source },
        timeoutMs: options.resolveTimeoutMs,
      },
    );
    await id.resolveRoute({ ...wait, timeoutMs: options.resolveTimeoutMs });
    await options.beforeConnect?.(id);
    const event = await id.connect(options, wait);
    return { id, event };
  } catch (e) {
    id.close();
    throw e;
  }
}
