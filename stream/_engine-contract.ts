/**
 * What the stream engine (`_engine.ts`) is given and gives: its configuration and memory, the
 * transport it posts through and that feeds back the completions, its state bits, and the wr_id
 * ranges of its work requests. Pure: no FFI, no I/O.
 *
 * @module
 */

import { InvalidArgumentError } from "../types/errors.ts";
import {
  RS_IOMAP_SIZE,
  RS_MSG_SIZE,
  RS_QP_CTRL_SIZE,
  RS_SGE_SIZE,
  RS_SGL_SIZE,
  RS_SNDLOWAT,
  scaleToValue,
  valueToScale,
} from "./protocol.ts";

/** State bits of a stream (the same meaning as rsocket's). */
export const StreamState = Object.freeze(
  {
    /** Connected (cleared by a disconnect, a reset or an error). */
    CONNECTED: 0x100,
    /** This side may still send data. */
    WRITABLE: 0x200,
    /** The peer may still send data (cleared by its shutdown). */
    READABLE: 0x400,
    /** Fully disconnected by a DISCONNECT control message (sent and completed, or received). */
    DISCONNECTED: 0x1000,
    /** A work request failed or the connection was reset. */
    ERROR: 0x2000,
  } as const,
);

/** The sizes and mode of one stream. */
export interface EngineConfig {
  /** Send ring bytes (at least 2 × `RS_SNDLOWAT`). */
  readonly sendBufferSize: number;
  /** Receive ring bytes (even; each half is advertised as one target SGE). */
  readonly receiveBufferSize: number;
  /** Send queue depth granted (at least {@link RS_QP_CTRL_SIZE} + 2). */
  readonly sendQueueDepth: number;
  /** Receive queue depth posted; also the initial credits given to the peer. */
  readonly receiveQueueDepth: number;
  /** Inline bytes the QP granted (chunks up to this size go inline). */
  readonly inlineSize: number;
  /** iWARP: data by RDMA WRITE, messages by 4-byte inline SEND. */
  readonly messageSend: boolean;
  /** Declare this side big-endian (tests exercise the peer-order path with it). Default false. */
  readonly bigEndian?: boolean;
  /**
   * Entries of this side's iomap table (the peer may map this many buffers for its direct
   * writes); a value {@link iomapEntries} keeps. Default 0.
   */
  readonly iomapSize?: number;
}

/**
 * The registered memory a stream uses. `send` holds the send ring, then
 * {@link RS_QP_CTRL_SIZE} slots for SGL updates, one iomap-entry slot, then one message slot
 * ({@link sendMemorySize}); `recv` holds the receive ring, then one 4-byte message slot per
 * receive on iWARP ({@link receiveMemorySize}); `target` holds the target SGL the peer writes
 * into, then the iomap table ({@link targetMemorySize}).
 */
export interface EngineMemory {
  /** Send memory (local access only). */
  readonly send: Uint8Array;
  /** Receive memory (the peer RDMA-writes into its ring). */
  readonly recv: Uint8Array;
  /** Address of `recv` as the peer must use it. */
  readonly recvAddr: number;
  /** rkey of `recv`. */
  readonly recvKey: number;
  /** Target SGL and iomap table ({@link targetMemorySize} bytes; the peer RDMA-writes into it). */
  readonly target: Uint8Array;
  /** Address of `target`. */
  readonly targetAddr: number;
  /** rkey of `target`. */
  readonly targetKey: number;
}

/** Bytes of target SGL memory a stream needs (without an iomap table). */
export const TARGET_MEMORY_SIZE = RS_SGL_SIZE * RS_SGE_SIZE;

/** Bytes of target memory a stream with `config` needs: the target SGL, then the iomap table. */
export function targetMemorySize(config: EngineConfig): number {
  return TARGET_MEMORY_SIZE + RS_IOMAP_SIZE * (config.iomapSize ?? 0);
}

/** Bytes of send memory a stream with `config` needs. */
export function sendMemorySize(config: EngineConfig): number {
  return config.sendBufferSize + RS_QP_CTRL_SIZE * RS_SGE_SIZE + RS_IOMAP_SIZE + 8;
}

/** Bytes of receive memory a stream with `config` needs. */
export function receiveMemorySize(config: EngineConfig): number {
  return config.receiveBufferSize +
    (config.messageSend ? config.receiveQueueDepth * RS_MSG_SIZE : 0);
}

/**
 * Checks a configuration and the memory given for it; returns the iomap entries (0 when none).
 * Throws {@link InvalidArgumentError} for a value the protocol or the memory cannot carry.
 */
export function checkEngineConfig(c: EngineConfig, memory: EngineMemory): number {
  if (!Number.isInteger(c.sendBufferSize) || c.sendBufferSize < 2 * RS_SNDLOWAT) {
    throw new InvalidArgumentError(`sendBufferSize must be an integer >= ${2 * RS_SNDLOWAT}`);
  }
  if (
    !Number.isInteger(c.receiveBufferSize) || c.receiveBufferSize < 2 ||
    c.receiveBufferSize % 2 !== 0 || c.receiveBufferSize > 0x3ffffffe
  ) {
    throw new InvalidArgumentError("receiveBufferSize must be an even integer >= 2");
  }
  if (!Number.isInteger(c.sendQueueDepth) || c.sendQueueDepth < RS_QP_CTRL_SIZE + 2) {
    throw new InvalidArgumentError(`sendQueueDepth must be an integer >= ${RS_QP_CTRL_SIZE + 2}`);
  }
  if (!Number.isInteger(c.receiveQueueDepth) || c.receiveQueueDepth < 2) {
    throw new InvalidArgumentError("receiveQueueDepth must be an integer >= 2");
  }
  if (c.messageSend && c.inlineSize < RS_MSG_SIZE) {
    throw new InvalidArgumentError(`iWARP messages need at least ${RS_MSG_SIZE} inline bytes`);
  }
  const iomap = c.iomapSize ?? 0;
  if (!Number.isInteger(iomap) || iomap < 0 || scaleToValue(valueToScale(iomap)) !== iomap) {
    throw new InvalidArgumentError(
      `iomapSize ${iomap} cannot be carried by rsocket's connection data (see iomapEntries)`,
    );
  }
  if (memory.send.length < sendMemorySize(c)) {
    throw new InvalidArgumentError("send memory too small");
  }
  if (memory.recv.length < receiveMemorySize(c)) {
    throw new InvalidArgumentError("receive memory too small");
  }
  if (memory.target.length < targetMemorySize(c)) {
    throw new InvalidArgumentError("target memory too small");
  }
  return iomap;
}

/**
 * The two 32-bit words of an address below 2^53, as 32-bit integers: what the transport takes,
 * so that no number above 2^31 crosses a call on the posting path (V8 boxes one there).
 */
export function highWord(addr: number): number {
  return Math.floor(addr / 0x1_0000_0000) | 0;
}
/** See {@link highWord}. */
export function lowWord(addr: number): number {
  return addr | 0;
}

/**
 * The most receives a transport may hold back before it posts them (see
 * {@link StreamTransport.recv}): at most 32, and at most a quarter of the receive queue. The
 * peer's control messages (grants, ring advertisements) take receives without credits, and a
 * side that only writes never grants credits, which is the other time held receives are posted:
 * a batch larger than the queue would never fill, its receives would run out, and both ends
 * would wait for each other.
 */
export function receiveBatch(receiveQueueDepth: number): number {
  return Math.max(1, Math.min(32, receiveQueueDepth >>> 2));
}

/**
 * What the engine asks of the transport. Offsets are into {@link EngineMemory.send} (sends) or
 * {@link EngineMemory.recv} (receives). Every send is signaled; its completion goes back through
 * {@link StreamEngine.completeSend} with the halves of the same `wrId`, in posting order.
 */
export interface StreamTransport {
  /**
   * Posts an RDMA WRITE of `[off1, off1 + len1)` and `[off2, off2 + len2)` of the send memory
   * (`len1` 0: no data; `len2` 0: one SGE) to the remote address `remoteHigh`/`remoteLow` (its
   * two 32-bit words as 32-bit integers: no number above 2^31 crosses the call, which V8 would
   * box) and `rkey`, inline when `inline`. With `imm >= 0` it is an RDMA WRITE WITH IMMEDIATE
   * carrying `imm` (host order; the wire carries it big-endian).
   */
  write(
    wrId: number,
    off1: number,
    len1: number,
    off2: number,
    len2: number,
    inline: boolean,
    remoteHigh: number,
    remoteLow: number,
    rkey: number,
    imm: number,
  ): void;
  /** Posts an inline SEND of `len` bytes at `off` of the send memory (iWARP messages). */
  send(wrId: number, off: number, len: number): void;
  /**
   * Posts a zero-length RDMA WRITE without immediate data (rsocket's keepalive): the peer sees
   * nothing, but its completion fails when the peer is gone.
   */
  probe(wrId: number): void;
  /**
   * Posts a plain RDMA WRITE (no immediate, no message; rsocket's `riowrite`) of
   * `[off1, off1 + len1)` and `[off2, off2 + len2)` of the send memory to the remote address
   * `remoteHigh`/`remoteLow` (as for {@link StreamTransport.write}) and `rkey`, inline when
   * `inline`.
   */
  writeDirect(
    wrId: number,
    off1: number,
    len1: number,
    off2: number,
    len2: number,
    inline: boolean,
    remoteHigh: number,
    remoteLow: number,
    rkey: number,
  ): void;
  /**
   * Posts a receive. On iWARP `off` is the 4-byte message slot in the receive memory, posted at
   * once; otherwise it is -1 and the receive has no SGE (it only takes the immediate data): the
   * transport may hold those back and post them in batches of {@link receiveBatch} (no more),
   * until {@link postReceives}.
   */
  recv(wrId: number, off: number): void;
  /**
   * Posts every receive held back. The engine calls it before it grants credits (a credit
   * must stand for a posted receive) and after the initial receives.
   */
  postReceives(): void;
  /**
   * Copies `n` bytes (more than 64, part of `src`) from `src[from..]` to `dst[to..]`, between a
   * caller's array and the rings, without allocating (the verbs transport: `Native.copy`).
   */
  copy(dst: Uint8Array, to: number, src: Uint8Array, from: number, n: number): void;
}

/**
 * wr_id bit marking the SEND half of an iWARP data or SGL message. The tags are bits of the
 * wr_id's high half and the low half is the message or the slot, so that completions are fed
 * back as two small integers ({@link WR_HIGH_MSG_SEND}, {@link WR_HIGH_RECV}).
 */
export const WR_MSG_SEND = 2 ** 32;
/** wr_id bit marking a receive. */
export const WR_RECV = 2 ** 33;
/** {@link WR_MSG_SEND} in the wr_id's high half. */
export const WR_HIGH_MSG_SEND = 1;
/** {@link WR_RECV} in the wr_id's high half. */
export const WR_HIGH_RECV = 2;
/** {@link ONE_SIDED_WR_ID} in the wr_id's high half. */
export const WR_HIGH_ONE_SIDED = 4;

/** The first wr_id value that marks a receive (`wrId >= RECV_WR_ID` is a receive). */
export const RECV_WR_ID = WR_RECV;

/**
 * The first wr_id of the connection's own one-sided operations (remote buffers): the engine
 * never posts one, and their completions never reach it.
 */
export const ONE_SIDED_WR_ID = 2 ** 34;
