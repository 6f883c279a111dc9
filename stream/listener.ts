/**
 * {@link RdmaListener} and {@link listen}: the passive side of rsocket streams. Each incoming
 * request's connection data is checked, the connection's verbs objects are made and its
 * receives posted, and it is accepted with this side's connection data and the request's own
 * parameters (what rsocket does).
 *
 * @module
 */

import { NativeResource } from "../ffi/resource.ts";
import { ClosedError, InvalidArgumentError } from "../types/errors.ts";
import type { WaitOptions } from "../poller/wait.ts";
import { CmEventChannel } from "../cm/channel.ts";
import { Poller } from "../poller/poller.ts";
import type { CmId } from "../cm/id.ts";
import { numericHost } from "../cm/connect.ts";
import { newConn, type RdmaConn } from "./conn.ts";
import { readDepthOf, type StreamOptions, streamSizes } from "./options.ts";
import { type RdmaAddr, toAddr } from "../cm/address.ts";
import { ProtocolError } from "./errors.ts";
import { decodeConnData, encodeConnData } from "./protocol.ts";
import { VerbsTransport } from "./_transport.ts";

/** Options of {@link listen}. */
export interface ListenOptions extends StreamOptions {
  /** Local host name or address (default "0.0.0.0": every IPv4 address). */
  hostname?: string;
  /** Port (0 picks a free one; see `addr`). */
  port: number;
  /** Connection requests the kernel queues (default 0: its default). */
  backlog?: number;
  /** Bind even when the port is in use by a closing connection (default true, as rstream). */
  reuseAddress?: boolean;
}

/**
 * A listening rsocket endpoint: `accept()` (or `for await`) yields {@link RdmaConn}s. Closing
 * the listener stops accepting; connections already accepted stay open and are closed on their
 * own.
 */
export class RdmaListener extends NativeResource implements AsyncIterable<RdmaConn> {
  /** The bound address (the port filled in when 0 was asked for). */
  readonly addr: RdmaAddr<"tcp">;
  readonly #channel: CmEventChannel;
  readonly #id: CmId;
  readonly #options: StreamOptions;
  #live = 0;
  readonly #release = () => {
    this.#live--;
    this.#maybeCloseChannel();
  };

  /** Not for direct use: {@link listen} makes listeners. */
  constructor(channel: CmEventChannel, id: CmId, options: StreamOptions, token: symbol) {
    if (token !== construct) throw new InvalidArgumentError("RdmaListener is made by listen()");
    super("RdmaListener", []);
    this.#channel = channel;
    this.#id = id;
    this.#options = options;
    this.addr = toAddr(id.localAddress, "tcp");
  }

  /** A pending `accept()` keeps the process alive (the default). */
  ref(): void {
    this.#channel.keepsProcessAlive = true;
  }

  /**
   * A pending `accept()` no longer keeps the process alive (like `Deno.Listener.unref`); it still
   * completes while the process runs for other reasons. Connections accepted from the listener
   * share its event channel: their connection-manager waits (the disconnect when they close)
   * follow the listener's setting.
   */
  unref(): void {
    this.#channel.keepsProcessAlive = false;
  }

  /**
   * Waits for the next connection and accepts it. A request that does not carry rsocket
   * connection data is rejected and skipped. Stream options given here override the
   * listener's for this connection.
   */
  async accept(options?: WaitOptions & StreamOptions): Promise<RdmaConn> {
    for (;;) {
      this.assertOpen();
      let req: CmId;
      try {
        req = await this.#id.getRequest(
          options ? { signal: options.signal, timeout: options.timeout } : undefined,
        );
      } catch (e) {
        if (e instanceof ClosedError) this.assertOpen();
        throw e;
      }
      try {
        return await this.#accept(req, options);
      } catch (e) {
        if (e instanceof ProtocolError) continue; // not an rsocket peer
        throw e;
      }
    }
  }

  async #accept(
    req: CmId,
    options: (WaitOptions & StreamOptions) | undefined,
  ): Promise<RdmaConn> {
    let t: VerbsTransport | undefined;
    const opts = options ? { ...this.#options, ...options } : this.#options;
    const wait = options ? { signal: options.signal, timeout: options.timeout } : undefined;
    try {
      const request = req.request!;
      const peer = decodeConnData(request.privateData);
      t = new VerbsTransport(req, streamSizes(opts), opts.poller ?? Poller.default());
      t.engine.postInitialReceives();
      t.engine.establish(peer);
      t.peerTag = peer.tag ?? 0;
      const cp = request.conn;
      t.peerQpNum = cp?.qpNum ?? 0;
      // the request's own parameters, as rsocket accepts (seen from this side: its responder
      // resources are the reads the peer wants to issue), within this device and readDepth
      // (iWARP: at least the 1 its connection setup reads with)
      const depth = readDepthOf(opts);
      const cap = (v: number, max: number, floor: number) =>
        Math.min(v, max, Math.max(depth, floor));
      const responder = cap(
        cp?.responderResources ?? 0,
        t.maxResponderResources,
        t.messageSend ? 1 : 0,
      );
      const initiator = cap(cp?.initiatorDepth ?? 0, t.maxInitiatorDepth, 0);
      await req.accept({
        privateData: encodeConnData({ ...t.engine.localConnData(), tag: t.tag }),
        responderResources: responder,
        initiatorDepth: initiator,
        flowControl: cp?.flowControl ?? true,
        rnrRetryCount: 7,
      }, wait);
      t.readDepth = initiator;
      this.#live++;
      return newConn(req, t, this.#release, opts);
    } catch (e) {
      try {
        if (!req.closed) {
          if (!req.connected) req.reject();
          else req.close();
        }
      } catch {
        // the request may already be gone
      }
      try {
        t?.close();
      } catch {
        // report the first error
      }
      throw e;
    }
  }

  /** Connections as they arrive, until the listener is closed. */
  async *[Symbol.asyncIterator](): AsyncGenerator<RdmaConn, void, undefined> {
    while (!this.closed) {
      try {
        yield await this.accept();
      } catch (e) {
        if (e instanceof ClosedError && this.closed) return;
        throw e;
      }
    }
  }

  #maybeCloseChannel(): void {
    if (this.closed && this.#live === 0) this.#channel.close();
  }

  /** Stops listening (pending requests are refused); accepted connections stay open. */
  protected destroy(): void {
    try {
      this.#id.close();
    } finally {
      this.#maybeCloseChannel();
    }
  }
}

const construct = Symbol("RdmaListener");

/** Listens for rsocket stream connections on `hostname:port`. */
export function listen(options: ListenOptions): RdmaListener {
  if (typeof options !== "object" || options === null) {
    throw new InvalidArgumentError("listen options must be an object");
  }
  streamSizes(options);
  const host = numericHost(options.hostname ?? "0.0.0.0", true);
  const channel = new CmEventChannel({ poller: options.poller });
  try {
    const id = channel.createId("TCP");
    if (options.reuseAddress ?? true) id.setReuseAddress(true);
    id.bind({ address: host, port: options.port ?? 0 });
    id.listen(options.backlog ?? 0);
    return new RdmaListener(channel, id, options, construct);
  } catch (e) {
    channel.close();
    throw e;
  }
}
