/**
 * What every CM id offers apart from its connection state: the `struct rdma_cm_id` it wraps
 * (device, port, addresses, transport), its ID-level options, the IB path records of its route,
 * `rdma_init_qp_attr`, leaving a multicast group, and the helpers of `<rdma/rdma_verbs.h>` over
 * its QP, PD and CQs, and the options of the id's operations. `CmId` adds the state and the
 * connection operations.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { ClosedError, InvalidArgumentError, UnsupportedError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { type McJoinFlag, OptionId, PortSpace, type QpState } from "../types/enums.ts";
import { checkCall, strerror } from "../ffi/errors.ts";
import { NativeResource } from "../ffi/resource.ts";
import type { WaitOptions } from "../poller/wait.ts";
import type { Context } from "../verbs/context.ts";
import type { MemoryRegion } from "../verbs/mr.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { QpAttr } from "../verbs/qp-attr.ts";
import type { QueuePair } from "../verbs/qp.ts";
import type { QpInit } from "../verbs/qp-init.ts";
import type { WorkCompletionData } from "../verbs/wc.ts";
import type { Remote, U64, UdDestination } from "../verbs/wr.ts";
import type { Bytes } from "../types/bytes.ts";
import { checkInteger } from "../types/check.ts";
import { type AddressInput, AF_IB, decodeSockaddr, type SocketAddress } from "./address.ts";
import type { CmEventChannel } from "./channel.ts";
import type { PrivateDataContext } from "./conn_param.ts";
import { cmContext } from "./_context.ts";
import { leaveMulticast, setIdOption } from "./_id-options.ts";
import { initQpAttr } from "./_init-qp-attr.ts";
import { type PathRecord, routePaths } from "./path.ts";
import {
  getComp,
  type MsgBuffer,
  type MsgOptions,
  postRecvMsg,
  postSendMsg,
  regMemory,
} from "./id-verbs.ts";

/** How to create a QP on a CM id: the verbs {@link QpInit}; the type defaults from the port space. */
export type CmQpInit = Omit<QpInit, "type"> & { readonly type?: QpInit["type"] };

/** Options of `CmId.joinMulticast`: the wait's bounds and the kind of membership. */
export interface JoinMulticastOptions extends WaitOptions {
  /**
   * The join flags of `rdma_join_multicast_ex`: `McJoinFlag.FULLMEMBER`, or
   * `McJoinFlag.SENDONLY_FULLMEMBER` (send to the group without receiving: the QP is not
   * attached). Without it the join is `rdma_join_multicast` (a full member).
   */
  joinFlags?: McJoinFlag;
}

/** Options of `CmId.disconnect`: the wait's bounds (default 10 s) and what happens after. */
export interface DisconnectOptions extends WaitOptions {
  /**
   * Close the id (its QP first) once DISCONNECTED is seen (default true). False leaves both
   * open, as `rdma_disconnect` alone does: destroy the QP and the id later.
   */
  close?: boolean;
}

/** Options of resolution: the wait's bounds and the kernel's own limit. */
export interface ResolveOptions extends WaitOptions {
  /** The kernel's resolution timeout in ms (default 2000). */
  timeoutMs?: number;
}

/** The base of `CmId`: the id's native struct, options and rdma_verbs.h helpers. */
export abstract class CmIdBase extends NativeResource {
  /** The `struct rdma_cm_id *`. */
  readonly ptr: NativePointer;
  /** The event channel the id reports on. */
  readonly channel: CmEventChannel;
  /** The port space (`PortSpace.TCP`, `UDP`, `IB`, `IPOIB`). */
  readonly portSpace: PortSpace;
  readonly #bytes: Uint8Array;
  readonly #view: DataView;

  /** Wraps the `struct rdma_cm_id *` of `channel` (the subclass checks who may). */
  protected constructor(channel: CmEventChannel, ptr: NativePointer) {
    super("CmId", [channel]);
    const L = layouts().rdma_cm_id;
    this.channel = channel;
    this.ptr = ptr;
    const buf = native().arrayBuffer(ptr, L.size);
    this.#bytes = new Uint8Array(buf);
    this.#view = new DataView(buf);
    this.portSpace = this.#view.getUint32(L.fields.ps.offset, true) as PortSpace;
  }

  /** The QP created on the id, or null. */
  abstract get qp(): QueuePair | null;

  /** The id's PD (`id->pd`), or null. */
  abstract get pd(): ProtectionDomain | null;

  /** Throws {@link ClosedError} when the id or its channel is closed. */
  override assertOpen(): void {
    if (this.closed || this.channel.closed) throw new ClosedError("CmId");
  }

  /** True for the UD port spaces (UDP, IPoIB). */
  get isUd(): boolean {
    return this.portSpace === PortSpace.UDP || this.portSpace === PortSpace.IPOIB;
  }

  /** The `struct ibv_context *` the id is bound to (NULL before bind/resolve). */
  get verbsPtr(): NativePointer | null {
    this.assertOpen();
    return native().readPointer(this.ptr, layouts().rdma_cm_id.fields.verbs.offset);
  }

  /** The RDMA port number the id is bound to (0 before bind/resolve). */
  get portNum(): number {
    this.assertOpen();
    return this.#view.getUint8(layouts().rdma_cm_id.fields.port_num.offset);
  }

  /**
   * The verbs {@link Context} of the device the id is bound to (librdmacm's own context):
   * allocate the PD, CQs and MRs of the id's QP from it. Throws before the address is resolved.
   */
  get context(): Context {
    const verbs = this.verbsPtr;
    if (verbs === null) {
      throw new InvalidArgumentError("the id is not bound to a device yet (resolve or bind first)");
    }
    return cmContext(verbs);
  }

  /** librdmacm dereferences the id's device on some paths: refuse them before it is bound. */
  protected requireDevice(op: string, hint: string): void {
    if (this.verbsPtr === null) {
      throw new InvalidArgumentError(`${op}: the id is not bound to a device yet (${hint})`);
    }
  }

  /** iWARP has no UD service: refuse UD operations on an iWARP device. */
  protected checkUdSupported(op: string): void {
    if (this.isUd && this.transport === "iwarp") {
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
    return decodeSockaddr(
      this.#bytes,
      layouts().rdma_cm_id.fields["route.addr.src_storage"].offset,
    );
  }

  /** The peer address (`route.addr.dst_addr`), or null when not resolved/connected. */
  get peerAddress(): SocketAddress | null {
    this.assertOpen();
    return decodeSockaddr(
      this.#bytes,
      layouts().rdma_cm_id.fields["route.addr.dst_storage"].offset,
    );
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
    const L = layouts();
    const dev = n.readPointer(verbs, L.ibv_context.fields.device.offset);
    if (dev === null) return null;
    const off = L.ibv_device.fields.transport_type.offset;
    const t = new DataView(n.arrayBuffer(dev, off + 4)).getInt32(off, true);
    return t === 1 ? "iwarp" : "ib";
  }

  /** What decides this id's private-data limits. */
  privateDataContext(): PrivateDataContext {
    const off = layouts().rdma_cm_id.fields["route.addr.src_addr.sa_family"].offset;
    const fam = this.#view.getUint16(off, true);
    return { transport: this.transport ?? "ib", ud: this.isUd, afIb: fam === AF_IB };
  }

  /**
   * The attributes of the next QP state of this connection (`rdma_init_qp_attr`: INIT once the
   * address is resolved or a request arrived, RTR and RTS once the peer answered), as the verbs
   * layer's typed attributes: a QP made with plain verbs follows the connection with
   * `qp.modify(id.initQpAttr(QpState.RTR))`.
   */
  initQpAttr(state: QpState): QpAttr {
    return initQpAttr(this, state);
  }

  /** The IB path records of the resolved route (`route.path_rec`); empty on iWARP or before. */
  get routePaths(): PathRecord[] {
    return routePaths(this);
  }

  /** Tells the CM about a QP async event (`rdma_notify`), e.g. `EventType.COMM_EST`. */
  notify(event: number): void {
    this.assertOpen();
    checkInteger("event", event, 0, 0x7fffffff);
    checkCall("rdma_notify", native().rdmacm.rdma_notify(this.ptr, event));
  }

  /** Sets the type of service (`RDMA_OPTION_ID_TOS`, 0..255) for later connections. */
  setTos(tos: number): void {
    setIdOption(this, OptionId.TOS, tos, 1, "TOS");
  }

  /** Allows binding to a port in use (`RDMA_OPTION_ID_REUSEADDR`). */
  setReuseAddress(on: boolean): void {
    setIdOption(this, OptionId.REUSEADDR, on ? 1 : 0, 4, "REUSEADDR");
  }

  /** Restricts an IPv6 listener to IPv6 (`RDMA_OPTION_ID_AFONLY`). */
  setAfOnly(on: boolean): void {
    setIdOption(this, OptionId.AFONLY, on ? 1 : 0, 4, "AFONLY");
  }

  /** Sets the QP's local ACK timeout exponent (`RDMA_OPTION_ID_ACK_TIMEOUT`, 0..31). */
  setAckTimeout(exponent: number): void {
    checkInteger("ACK timeout exponent", exponent, 0, 31);
    setIdOption(this, OptionId.ACK_TIMEOUT, exponent, 1, "ACK_TIMEOUT");
  }

  /** Leaves a multicast group (`rdma_leave_multicast`). */
  leaveMulticast(group: AddressInput): void {
    leaveMulticast(this, group);
  }

  /** `rdma_reg_msgs`: registers `memory` (bytes in place, or a length to allocate) for sends and receives in the id's PD. */
  regMsgs(memory: Bytes | number): MemoryRegion {
    return regMemory(this, "rdma_reg_msgs", memory);
  }

  /** `rdma_reg_read`: registers `memory` in the id's PD for local use and remote RDMA reads. */
  regRead(memory: Bytes | number): MemoryRegion {
    return regMemory(this, "rdma_reg_read", memory);
  }

  /** `rdma_reg_write`: registers `memory` in the id's PD for local use and remote RDMA writes. */
  regWrite(memory: Bytes | number): MemoryRegion {
    return regMemory(this, "rdma_reg_write", memory);
  }

  /** `rdma_post_recv(v)`: posts one receive into `buffer` on the id's QP (or its SRQ); `wrId` is C's `context`. */
  postRecv(buffer: MsgBuffer, wrId: U64 = 0): void {
    postRecvMsg(this, buffer, wrId);
  }

  /** `rdma_post_send(v)`: posts one SEND of `message` (registered memory, or bytes sent inline). */
  postSend(message: MsgBuffer | Uint8Array, options: MsgOptions = {}): void {
    postSendMsg(this, "send", message, options);
  }

  /** `rdma_post_read(v)`: posts an RDMA READ of `remote` into `buffer`. */
  postRead(buffer: MsgBuffer, remote: Remote, options: MsgOptions = {}): void {
    postSendMsg(this, "read", buffer, options, remote);
  }

  /** `rdma_post_write(v)`: posts an RDMA WRITE of `message` (registered, or inline bytes) to `remote`. */
  postWrite(message: MsgBuffer | Uint8Array, remote: Remote, options: MsgOptions = {}): void {
    postSendMsg(this, "write", message, options, remote);
  }

  /** `rdma_post_ud_send`: posts one SEND of `message` to a UD destination (AH, QPN, Q_Key). */
  postUdSend(message: MsgBuffer | Uint8Array, to: UdDestination, options: MsgOptions = {}): void {
    postSendMsg(this, "udSend", message, options, to);
  }

  /** `rdma_get_send_comp`: the next completion of the QP's send CQ (a copy; status unchecked). */
  getSendComp(options: WaitOptions = {}): Promise<WorkCompletionData> {
    return getComp(this, "send", options);
  }

  /** `rdma_get_recv_comp`: the next completion of the QP's receive CQ (a copy; status unchecked). */
  getRecvComp(options: WaitOptions = {}): Promise<WorkCompletionData> {
    return getComp(this, "recv", options);
  }
}

function ntohs(v: number): number {
  return ((v & 0xff) << 8) | ((v >> 8) & 0xff);
}
