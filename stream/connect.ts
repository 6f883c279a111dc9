/**
 * {@link connect}: the active side of a stream connection (rsocket's `rconnect`).
 *
 * @module
 */

import { CmEventError, InvalidArgumentError, NativeError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { CmEventType } from "../types/enums.ts";
import type { CmId } from "../cm/id.ts";
import { numericHost } from "../cm/connect.ts";
import { newConn, type RdmaConn } from "./conn.ts";
import { ConnectionRefusedError } from "./errors.ts";
import { type ConnectOptions, readDepthOf, streamSizes } from "./options.ts";
import { decodeConnData, encodeConnData } from "./protocol.ts";
import { VerbsTransport } from "./_transport.ts";
import { CmEventChannel } from "../cm/channel.ts";
import { Poller } from "../poller/poller.ts";
import { SharedByKey } from "./_shared.ts";

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
 * The rdma_cm event channel the outgoing connections of one poller share (as accepted ones share
 * their listener's): made by the first, closed by the last one's release after its id closed.
 */
const outgoingChannels = new SharedByKey<Poller, CmEventChannel>((poller) =>
  new CmEventChannel({ poller })
);

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
  const poller = options.poller ?? Poller.default();
  const lease = outgoingChannels.lease(poller);
  let t: VerbsTransport | undefined;
  let id: CmId | undefined;
  try {
    id = lease.value.createId("TCP");
    const source = options.source === undefined
      ? undefined
      : { address: numericHost(options.source, true) };
    await id.resolveAddress({ address: host, port }, { ...wait, source });
    await id.resolveRoute(wait);
    t = new VerbsTransport(id, sizes, poller);
    t.engine.postInitialReceives();
    // rsocket asks for no RDMA READ resources (iWARP: initiator depth 1, which its connection
    // setup reads with); remote buffers need them. A C rsocket accepts with what was asked.
    const depth = readDepthOf(options);
    const responder = Math.min(depth, t.maxResponderResources);
    const initiator = Math.max(
      Math.min(depth, t.maxInitiatorDepth),
      t.messageSend ? 1 : 0,
    );
    const ev = await id.connect({
      privateData: encodeConnData({ ...t.engine.localConnData(), tag: t.tag }),
      responderResources: responder,
      initiatorDepth: initiator,
      flowControl: true,
      retryCount: 7,
      rnrRetryCount: 7,
    }, wait);
    const peer = decodeConnData(ev.privateData);
    t.engine.establish(peer);
    t.peerTag = peer.tag ?? 0;
    t.peerQpNum = ev.conn?.qpNum ?? 0;
    // what the accepting side granted (its responder resources, seen from here)
    t.readDepth = depth === 0 ? 0 : Math.min(initiator, ev.conn?.initiatorDepth ?? initiator);
    return newConn(id, t, lease.release, options);
  } catch (e) {
    for (const f of [() => id?.close(), () => t?.close(), lease.release]) {
      try {
        f();
      } catch {
        // the first error is the one to report
      }
    }
    throw refusedOr(e, `${hostname}:${port}`);
  }
}
