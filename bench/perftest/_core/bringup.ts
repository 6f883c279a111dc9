/**
 * QP bring-up and connection management for the perftest tools: opening the device, creating
 * QPs and address handles, the INIT → RTR → RTS transitions with perftest's attributes, and
 * every rdma_cm call (listen, accept, connect with retries, QPs on CM ids, disconnect). No
 * other module of the tools calls these library functions, so a rename in the library is a
 * one-line change here.
 *
 * @module
 */

import {
  type AddressHandle,
  type AhAttr,
  cmConnect as connectOnCm,
  CmEventChannel,
  CmEventError,
  type CmId,
  cmListen as listenOnCm,
  type CmListener,
  type ConnParam,
  type Context,
  listDevices,
  type Mtu,
  openDevice,
  type ProtectionDomain,
  type QpInit,
  QpType,
  type QueuePair,
  TransportType,
} from "../../../mod.ts";

/** Opens a device by name (the first one when undefined). */
export function openContext(name: string | undefined): Context {
  return openDevice(name);
}

/** True when the device is an iWARP device (QPs connect only through rdma_cm). */
export function isIwarp(name: string): boolean {
  return listDevices().find((d) => d.name === name)?.transportType === TransportType.IWARP;
}

/** Creates a QP on a PD (the plain path; -R creates them on CM ids). */
export function createQp(pd: ProtectionDomain, init: QpInit): QueuePair {
  return pd.createQp(init);
}

/** Creates an address handle (UD sends). */
export function createAh(pd: ProtectionDomain, attr: AhAttr): AddressHandle {
  return pd.createAh(attr);
}

/** What the transitions need, with perftest's values. */
export interface PathOptions {
  readonly port: number;
  /** `Mtu` enum value. */
  readonly pathMtu: Mtu;
  /** Local GID index, or -1 for no GRH (IB with LIDs). */
  readonly gidIndex: number;
  readonly sl: number;
  /** RC ACK timeout exponent (-u). */
  readonly qpTimeout: number;
  /** Remote access the QP grants (`AccessFlags`). */
  readonly access: number;
}

/** The other side of a connection as the exchange gave it. */
export interface PeerQp {
  readonly lid: number;
  readonly qpn: number;
  readonly psn: number;
  readonly gid: Uint8Array;
  /** The peer's outstanding reads (our initiator depth). */
  readonly outReads: number;
}

/** perftest's Q_Key of UD QPs. */
export const QKEY = 0x11111111;

/** RESET → INIT: port, P_Key 0, and the remote access (RC/UC) or the Q_Key (UD). */
export function qpToInit(qp: QueuePair, o: PathOptions): void {
  qp.toInit({ port: o.port, pkeyIndex: 0, accessFlags: o.access, qkey: QKEY });
}

/**
 * INIT → RTR towards `peer`, with perftest's attributes: a GRH (hop limit 255) whenever a
 * GID index is in use, min RNR timer 12 and our outstanding reads as responder resources.
 */
export function qpToRtr(qp: QueuePair, peer: PeerQp, myOutReads: number, o: PathOptions): void {
  if (qp.type === QpType.UD) return qp.toRtr(undefined, {});
  qp.toRtr(
    {
      qpNum: peer.qpn,
      psn: peer.psn,
      lid: peer.lid,
      gid: o.gidIndex >= 0 ? peer.gid : undefined,
    },
    {
      port: o.port,
      pathMtu: o.pathMtu,
      sgidIndex: o.gidIndex >= 0 ? o.gidIndex : undefined,
      hopLimit: 0xff,
      sl: o.sl,
      minRnrTimer: 12,
      maxDestRdAtomic: myOutReads,
    },
  );
}

/** RTR → RTS: our PSN; RC also the timeout, 7 retries, 7 RNR retries, the peer's reads. */
export function qpToRts(qp: QueuePair, myPsn: number, peer: PeerQp, o: PathOptions): void {
  qp.toRts({
    psn: myPsn,
    timeout: o.qpTimeout,
    retryCnt: 7,
    rnrRetry: 7,
    maxRdAtomic: peer.outReads,
  });
}

/** The address handle a UD QP sends to `peer` with. */
export function udAddressHandle(pd: ProtectionDomain, peer: PeerQp, o: PathOptions): AddressHandle {
  return createAh(pd, {
    port: o.port,
    dlid: peer.lid,
    sl: o.sl,
    grh: o.gidIndex >= 0 ? { dgid: peer.gid, sgidIndex: o.gidIndex, hopLimit: 0xff } : undefined,
  });
}

/**
 * A listening rdma_cm id on an event channel of its own: the accepted connections live on
 * that channel, so they outlive the listener (perftest frees the port for the next listener).
 */
export interface CmListening {
  readonly listener: CmListener;
  readonly channel: CmEventChannel;
}

/** Listens for rdma_cm connections on every address at `port`. */
export function cmListen(port: number): CmListening {
  const channel = new CmEventChannel();
  try {
    return { listener: listenOnCm({ hostname: "0.0.0.0", port, backlog: 16, channel }), channel };
  } catch (e) {
    channel.close();
    throw e;
  }
}

/**
 * Takes the next connection request: `setup` creates the QP on the new id (and posts its
 * receives), then the request is accepted; resolves once it is established.
 */
export async function cmAccept(
  l: CmListening,
  setup: (id: CmId) => void,
  param: ConnParam,
): Promise<CmId> {
  const id = await l.listener.accept();
  setup(id);
  await id.accept(param);
  return id;
}

/** Stops listening and frees the port; the accepted connections stay. */
export function cmStopListening(l: CmListening): void {
  l.listener.close();
}

/**
 * Connects to `host:port` through rdma_cm: `setup` creates the QP on the id once the route is
 * resolved. A refused or unreachable attempt (the server is not listening yet) is retried
 * every 100 ms until `patienceMs` has passed, as perftest's client does for the test QPs.
 */
export async function cmConnect(
  host: string,
  port: number,
  setup: (id: CmId) => void,
  param: ConnParam,
  patienceMs: number,
): Promise<CmId> {
  const deadline = performance.now() + patienceMs;
  for (;;) {
    try {
      const { id } = await connectOnCm({ hostname: host, port, beforeConnect: setup, ...param });
      return id;
    } catch (e) {
      if (!(e instanceof CmEventError) || performance.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** Creates the RC QP of a CM id with this PD and these CQs (left in INIT until connected). */
export function cmCreateQp(id: CmId, pd: ProtectionDomain, init: Omit<QpInit, "type">): QueuePair {
  return id.createQp(pd, init);
}

/** The device context of a CM id (allocate its PD, CQs and MRs there). */
export function cmContext(id: CmId): Context {
  return id.context;
}

/** Disconnects (waiting for the peer's answer when `wait`), then closes the id and its QP. */
export async function cmClose(id: CmId, wait: boolean): Promise<void> {
  if (wait) await id.disconnect({ timeout: 5000 }).catch(() => id.close());
  else id.close();
}
