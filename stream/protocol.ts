/**
 * rsocket's stream wire format, in pure TypeScript (no FFI): the constants and defaults both
 * ends must agree on, the 32-bit immediate messages, and `struct rs_conn_data`, the private data
 * exchanged by connect and accept.
 *
 * The format as librdmacm (rdma-core 44) puts it on the wire:
 *
 * - Connection data (40 bytes, every multi-byte field big-endian): `version` u8 (1), `flags` u8
 *   (bit 0: the sender's host is big-endian, so SGL entries it receives by RDMA WRITE are in that
 *   order; bit 1: the sender has an iomap area after its target SGL), `credits` u16 (its receive
 *   queue depth), 3 reserved bytes, `target_iomap_size` u8 (a scaled count), then two SGEs of
 *   `{addr u64, key u32, length u32}`: the target SGL (address, rkey and number of entries of the
 *   table the peer writes receive-buffer advertisements into) and the first data buffer (the first
 *   half of the receive ring).
 * - Immediate data: bits 31..29 are the message type, bits 28..0 its argument. Data (0): that
 *   many bytes were written into the next part of the receive ring. SGL/credit update (4): the
 *   argument is the sequence number up to which the sender of the update can take data messages
 *   (not a delta), and a target SGL entry may have been rewritten. Iomap update (6): the
 *   sender RDMA-wrote a 24-byte `struct rs_iomap` into entry `index` of the receiver's iomap table
 *   (the receiver's target memory after its target SGL; the receiver's byte order); the
 *   receiver needs to do nothing. Direct writes (`riowrite`, type 2) are plain RDMA WRITEs into
 *   a buffer the receiver mapped; they carry no message.
 *   Control (7): 0 disconnect, 1 keepalive (a zero-length RDMA WRITE without immediate, never
 *   seen by the receiver), 2 shutdown (no more data from the sender).
 * - iWARP has no RDMA WRITE WITH IMMEDIATE: the data goes by RDMA WRITE and the 32-bit message
 *   follows as a 4-byte inline SEND in the sender's byte order (the connection data's flag).
 *
 * @module
 */

import { ProtocolError } from "./errors.ts";

/** The protocol version carried in the connection data. */
export const RS_VERSION = 1;
/** Connection-data flag: the sender is a big-endian host. */
export const RS_CONN_FLAG_NET = 1;
/** Connection-data flag: the sender has an iomap table after its target SGL. */
export const RS_CONN_FLAG_IOMAP = 2;
/** Size of `struct rs_conn_data` in bytes. */
export const RS_CONN_DATA_SIZE = 40;
/** Size of one SGE of the target SGL (`{addr u64, key u32, length u32}`). */
export const RS_SGE_SIZE = 16;
/** Entries in a target SGL (rsocket's RS_SGL_SIZE). */
export const RS_SGL_SIZE = 2;
/** Size of an iWARP message SEND. */
export const RS_MSG_SIZE = 4;
/** Largest data message rsocket sends (RS_MAX_TRANSFER). */
export const RS_MAX_TRANSFER = 65536;
/** A sender needs at least this much free send ring before it sends (RS_SNDLOWAT). */
export const RS_SNDLOWAT = 2048;
/** Smallest queue depth (RS_QP_MIN_SIZE). */
export const RS_QP_MIN_SIZE = 16;
/** Largest queue depth (RS_QP_MAX_SIZE). */
export const RS_QP_MAX_SIZE = 0xfffe;
/** Send WRs reserved for control messages (RS_QP_CTRL_SIZE). */
export const RS_QP_CTRL_SIZE = 4;
/** Largest message argument (29 bits). */
export const RS_MSG_DATA_MAX = 0x1fffffff;
/**
 * Size of one iomap entry (`struct rs_iomap`: `offset` u64, then an `rs_sge` of `addr` u64,
 * `key` u32, `length` u32), in the byte order of the side whose table holds it.
 */
export const RS_IOMAP_SIZE = 24;
/** The first chunk of an `riowrite` (RS_OLAP_START_SIZE); chunks double up to RS_MAX_TRANSFER. */
export const RS_OLAP_START_SIZE = 2048;
/** The largest iomap table the 8-bit scale of the connection data can carry (0x7f << 8). */
export const RS_IOMAP_MAX = 0x7f00;
/**
 * Capability bits this library puts in the first reserved byte of the connection data (rsocket
 * zeroes the reserved bytes and never reads them, so a C peer sends 0 and ignores ours).
 * {@link RS_CAP_NOTICES}: the sender takes iomap-update messages with bit
 * {@link RS_NOTICE_BIT} set as notices (a revoked remote buffer), and counts every iomap-update
 * message it receives as consumed (its credit returns).
 */
export const RS_CAP_NOTICES = 1;
/** Bit of an iomap-update message's argument that makes it a notice, not a table index. */
export const RS_NOTICE_BIT = 0x10000000;

/**
 * rsocket's defaults (librdmacm, when `/etc/rdma/rsocket/*` does not override them): the C side
 * uses these unless the program sets options, so a connection with these values needs no
 * options on either side.
 */
export const RSOCKET_DEFAULTS: {
  /** Send ring bytes (`wmem_default`, 128 KiB). */
  readonly sendBufferSize: number;
  /** Receive ring bytes (`mem_default`, 128 KiB). */
  readonly receiveBufferSize: number;
  /** Send queue depth (`sqsize_default`). */
  readonly sendQueueDepth: number;
  /** Receive queue depth and initial credits (`rqsize_default`). */
  readonly receiveQueueDepth: number;
  /** Inline bytes per send (`inline_default`). */
  readonly inlineSize: number;
} = Object.freeze({
  sendBufferSize: 1 << 17,
  receiveBufferSize: 1 << 17,
  sendQueueDepth: 384,
  receiveQueueDepth: 384,
  inlineSize: 64,
});

/** Message types (bits 31..29 of a message). */
export const RsOp = Object.freeze(
  {
    /** Application data written into the receive ring; the argument is its length. */
    DATA: 0,
    /** Direct write into an iomapped buffer (local only: never sent as a message). */
    WRITE: 2,
    /** Credit update, possibly with a rewritten target SGL entry. */
    SGL: 4,
    /** An iomap entry was rewritten; the argument is its index. */
    IOMAP_SGL: 6,
    /** Control message; the argument is an {@link RsCtrl} value. */
    CTRL: 7,
  } as const,
);

/** Control messages (the argument of {@link RsOp.CTRL}). */
export const RsCtrl = Object.freeze(
  {
    /** The sender is fully disconnected: no more data either way. */
    DISCONNECT: 0,
    /** Keepalive probe (a zero-length RDMA WRITE without immediate data). */
    KEEPALIVE: 1,
    /** The sender shut down its sending side. */
    SHUTDOWN: 2,
  } as const,
);

/** Builds a 32-bit message from a type and a 29-bit argument. */
export function rsMsg(op: number, data: number): number {
  return ((op << 29) | (data & RS_MSG_DATA_MAX)) >>> 0;
}

/** The type of a message (bits 31..29). */
export function rsMsgOp(msg: number): number {
  return msg >>> 29;
}

/** The argument of a message (bits 28..0). */
export function rsMsgData(msg: number): number {
  return msg & RS_MSG_DATA_MAX;
}

/** One scatter/gather entry as rsocket exchanges it. */
export interface RsSge {
  /** Virtual address (a number: user addresses are below 2^53). */
  addr: number;
  /** rkey. */
  key: number;
  /** Length in bytes (for a target SGL: the number of entries). */
  length: number;
}

/** `struct rs_conn_data`, decoded. */
export interface ConnData {
  /** Protocol version (1). */
  version: number;
  /** `RS_CONN_FLAG_*` bits. */
  flags: number;
  /** Initial credits: the sender's receive queue depth. */
  credits: number;
  /** The scaled iomap table size (0: none); see {@link scaleToValue}. */
  iomapSize: number;
  /** This library's capability bits (`RS_CAP_*`; 0 from a C rsocket). Default 0. */
  capabilities?: number;
  /**
   * This library's connection tag (a random 16-bit value in reserved bytes 5-6; 0 from a C
   * rsocket): tokens of exposed memory carry it, so a token of another connection is caught.
   */
  tag?: number;
  /** Where the sender's target SGL is (length = entries). */
  targetSgl: RsSge;
  /** The sender's first receive buffer (the first half of its receive ring). */
  dataBuf: RsSge;
}

/** Reads a u64 as a number; throws when it does not fit in 53 bits. */
export function getAddr(view: DataView, offset: number, littleEndian: boolean): number {
  const hi = view.getUint32(offset + (littleEndian ? 4 : 0), littleEndian);
  const lo = view.getUint32(offset + (littleEndian ? 0 : 4), littleEndian);
  if (hi >= 0x200000) {
    throw new ProtocolError(
      `address 0x${hi.toString(16)}${lo.toString(16).padStart(8, "0")} ` +
        "does not fit in 53 bits",
    );
  }
  return hi * 0x1_0000_0000 + lo;
}

/** Writes a number below 2^53 as a u64. */
export function setAddr(view: DataView, offset: number, value: number, littleEndian: boolean) {
  const hi = Math.floor(value / 0x1_0000_0000) >>> 0;
  const lo = value >>> 0;
  view.setUint32(offset + (littleEndian ? 4 : 0), hi, littleEndian);
  view.setUint32(offset + (littleEndian ? 0 : 4), lo, littleEndian);
}

/** Reads one `rs_sge` at `offset` in the given byte order. */
export function readSge(view: DataView, offset: number, littleEndian: boolean): RsSge {
  return {
    addr: getAddr(view, offset, littleEndian),
    key: view.getUint32(offset + 8, littleEndian),
    length: view.getUint32(offset + 12, littleEndian),
  };
}

/** Writes one `rs_sge` at `offset` in the given byte order. */
export function writeSge(
  view: DataView,
  offset: number,
  addr: number,
  key: number,
  length: number,
  littleEndian: boolean,
): void {
  setAddr(view, offset, addr, littleEndian);
  view.setUint32(offset + 8, key >>> 0, littleEndian);
  view.setUint32(offset + 12, length >>> 0, littleEndian);
}

/** Encodes connection data into 40 bytes (into `out` when given). */
export function encodeConnData(
  cd: ConnData,
  out: Uint8Array = new Uint8Array(RS_CONN_DATA_SIZE),
): Uint8Array {
  if (out.length < RS_CONN_DATA_SIZE) {
    throw new ProtocolError(`connection data needs ${RS_CONN_DATA_SIZE} bytes`);
  }
  const v = new DataView(out.buffer, out.byteOffset, RS_CONN_DATA_SIZE);
  out.fill(0, 0, RS_CONN_DATA_SIZE);
  v.setUint8(0, cd.version);
  v.setUint8(1, cd.flags);
  v.setUint16(2, cd.credits, false);
  v.setUint8(4, cd.capabilities ?? 0);
  v.setUint16(5, cd.tag ?? 0, false);
  v.setUint8(7, cd.iomapSize);
  writeSge(v, 8, cd.targetSgl.addr, cd.targetSgl.key, cd.targetSgl.length, false);
  writeSge(v, 24, cd.dataBuf.addr, cd.dataBuf.key, cd.dataBuf.length, false);
  return out;
}

/**
 * Decodes connection data (the first 40 bytes of private data; transports pad it). Throws
 * {@link ProtocolError} when it is short or not version 1.
 */
export function decodeConnData(bytes: Uint8Array | null | undefined): ConnData {
  if (!bytes || bytes.length < RS_CONN_DATA_SIZE) {
    throw new ProtocolError(
      `the peer sent ${bytes?.length ?? 0} bytes of private data; rsocket connection data is ` +
        `${RS_CONN_DATA_SIZE} (is the peer an rsocket?)`,
    );
  }
  const v = new DataView(bytes.buffer, bytes.byteOffset, RS_CONN_DATA_SIZE);
  const version = v.getUint8(0);
  if (version !== RS_VERSION) {
    throw new ProtocolError(`rsocket version ${version} is not supported (only ${RS_VERSION})`);
  }
  return {
    version,
    flags: v.getUint8(1),
    credits: v.getUint16(2, false),
    iomapSize: v.getUint8(7),
    capabilities: v.getUint8(4),
    tag: v.getUint16(5, false),
    targetSgl: readSge(v, 8, false),
    dataBuf: readSge(v, 24, false),
  };
}

/** rsocket's 8-bit scale of a count (iomap sizes): exact up to 128, then coarser. */
export function valueToScale(value: number, bits = 8): number {
  const half = 1 << (bits - 1);
  return value <= half ? value : half | (value >> bits);
}

/** The inverse of {@link valueToScale}. */
export function scaleToValue(scale: number, bits = 8): number {
  const half = 1 << (bits - 1);
  return scale <= half ? scale : (scale & ~half) << bits;
}

/**
 * The iomap table size rsocket actually uses for a requested one (`RDMA_IOMAPSIZE`): exact up
 * to 128, then rounded down to a multiple of 256, at most {@link RS_IOMAP_MAX}.
 */
export function iomapEntries(requested: number): number {
  const v = Math.min(Math.max(0, Math.floor(requested)), RS_IOMAP_MAX);
  return scaleToValue(valueToScale(v));
}

/** Clamps a queue depth the way rsocket does: at least 16, at most `deviceMax` and 0xfffe. */
export function clampQueueDepth(depth: number, deviceMax: number): number {
  const max = Math.min(deviceMax, RS_QP_MAX_SIZE);
  if (depth > max) return max;
  if (depth < RS_QP_MIN_SIZE) return RS_QP_MIN_SIZE;
  return depth;
}
