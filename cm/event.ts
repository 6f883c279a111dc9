/**
 * Connection manager events as plain data: {@link decodeEvent} copies everything
 * out of a `struct rdma_cm_event` (type, status, ids, private data, the
 * connection or UD parameters) so that it can be acked at once.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer, Pointer } from "../types/ctypes.ts";
import { cmEventStr, CmEventType, lazyEnumNames, PortSpace } from "../types/enums.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { type AhAttrData, decodeAhAttr } from "../verbs/ah.ts";
import type { CmId } from "./id.ts";

/** The connection parameters of a connected-mode event (`param.conn`). */
export interface ConnEventParam {
  /**
   * On CONNECT_REQUEST: the responder resources this side needs, i.e. the
   * peer's initiator depth (the kernel reports the pair from the receiver's
   * point of view).
   */
  readonly responderResources: number;
  /** On CONNECT_REQUEST: the initiator depth this side may use, i.e. the peer's responder resources. */
  readonly initiatorDepth: number;
  /** Flow control flag. */
  readonly flowControl: boolean;
  /** Retry count. */
  readonly retryCount: number;
  /** RNR retry count. */
  readonly rnrRetryCount: number;
  /** Whether the peer uses an SRQ. */
  readonly srq: boolean;
  /** The peer's QP number. */
  readonly qpNum: number;
}

/** The UD parameters of a UD or multicast event (`param.ud`): where to send datagrams. */
export interface UdEventParam {
  /** The remote QP number (0xffffff for a multicast group). */
  readonly qpNum: number;
  /** The remote Q_Key. */
  readonly qkey: number;
  /** The address handle attributes to reach the peer or group (pass them to `pd.createAh`). */
  readonly ahAttr: AhAttrData;
}

/** One connection manager event, copied out of librdmacm and already acked. */
export interface CmEvent {
  /** The `rdma_cm_event_type`. */
  readonly type: CmEventType;
  /** Its C name, e.g. `RDMA_CM_EVENT_ESTABLISHED`. */
  readonly name: string;
  /** The status: 0, a negative errno, or a transport reject reason (REJECTED). */
  readonly status: number;
  /** The id the event is for (on CONNECT_REQUEST: the new id of the incoming connection). */
  readonly id: CmId;
  /** On CONNECT_REQUEST: the listening id; otherwise null. */
  readonly listenId: CmId | null;
  /** Private data that came with the event (a copy), or null when none. */
  readonly privateData: Uint8Array | null;
  /** Connected-mode parameters (TCP/IB port spaces), or null. */
  readonly conn: ConnEventParam | null;
  /** UD parameters (UDP/IPoIB port spaces and multicast events), or null. */
  readonly ud: UdEventParam | null;
}

/** An event decoded before its ids are mapped to objects. */
export interface RawEvent extends Omit<CmEvent, "id" | "listenId"> {
  /** The `rdma_cm_id *` of the event. */
  readonly idPtr: NativePointer;
  /** The listening `rdma_cm_id *` (CONNECT_REQUEST), or NULL. */
  readonly listenPtr: Pointer;
  /** The port space of the id. */
  readonly portSpace: number;
}

const eventName = lazyEnumNames(CmEventType, "RDMA_CM_EVENT_");

/** The C name of a `rdma_cm_event_type` (`RDMA_CM_EVENT_...`, or "UNKNOWN EVENT"). */
export function cmEventName(type: number): string {
  return eventName(type) ?? cmEventStr(type);
}

let scratch: NativeBlock | undefined;
const PD_MAX = 256;

function isUdSpace(ps: number): boolean {
  return ps === PortSpace.UDP || ps === PortSpace.IPOIB;
}

/**
 * Copies a `struct rdma_cm_event` out into a {@link RawEvent}. The caller acks
 * the event right after (private data lives in the event until then).
 */
export function decodeEvent(ev: NativePointer): RawEvent {
  const n = native();
  const L = layouts();
  const E = L.rdma_cm_event;
  const f = E.fields;
  const psOff = L.rdma_cm_id.fields.ps.offset;
  const s = scratch ??= new NativeBlock(E.size + 8 + PD_MAX, 8);
  n.libc.memcpy(s.ptr, ev, E.size);
  const v = s.view;
  const idPtr = n.readPointer(s.ptr, f.id.offset) as NativePointer;
  const listenPtr = n.readPointer(s.ptr, f.listen_id.offset);
  const type = v.getUint32(f.event.offset, true) as CmEventType;
  const status = v.getInt32(f.status.offset, true);
  // the id's port space decides which member of the param union is valid
  n.libc.memcpy(n.offset(s.ptr, E.size), n.offset(idPtr, psOff), 4);
  const portSpace = v.getUint32(E.size, true);
  const pdPtr = n.readPointer(s.ptr, f["param.conn.private_data"].offset);
  const pdLen = v.getUint8(f["param.conn.private_data_len"].offset);
  let privateData: Uint8Array | null = null;
  if (pdPtr !== null && pdLen > 0) {
    const at = E.size + 8;
    n.libc.memcpy(n.offset(s.ptr, at), pdPtr, pdLen);
    privateData = s.bytes.slice(at, at + pdLen);
  }
  const multicast = type === CmEventType.MULTICAST_JOIN || type === CmEventType.MULTICAST_ERROR;
  const ud = isUdSpace(portSpace) || multicast;
  let conn: ConnEventParam | null = null;
  let udp: UdEventParam | null = null;
  if (ud) {
    udp = {
      qpNum: v.getUint32(f["param.ud.qp_num"].offset, true),
      qkey: v.getUint32(f["param.ud.qkey"].offset, true),
      ahAttr: decodeAhAttr(v, f["param.ud.ah_attr"].offset),
    };
  } else {
    conn = {
      responderResources: v.getUint8(f["param.conn.responder_resources"].offset),
      initiatorDepth: v.getUint8(f["param.conn.initiator_depth"].offset),
      flowControl: v.getUint8(f["param.conn.flow_control"].offset) !== 0,
      retryCount: v.getUint8(f["param.conn.retry_count"].offset),
      rnrRetryCount: v.getUint8(f["param.conn.rnr_retry_count"].offset),
      srq: v.getUint8(f["param.conn.srq"].offset) !== 0,
      qpNum: v.getUint32(f["param.conn.qp_num"].offset, true),
    };
  }
  return {
    type,
    name: cmEventName(type),
    status,
    idPtr,
    listenPtr,
    portSpace,
    privateData,
    conn,
    ud: udp,
  };
}
