/**
 * The rsocket stream state machine in pure TypeScript: rings, credits, the target SGL and the
 * control-message reserve, driven by a transport that posts the work requests it asks for and
 * feeds back the completions. No FFI, no I/O, no allocation per operation: the connection layer
 * drives it over verbs, the tests drive two of them over an in-memory transport.
 *
 * How the bookkeeping works (the same rules as librdmacm's rsocket, so both ends agree):
 *
 * - Sending needs four things: a free send WR (the send queue less {@link RS_QP_CTRL_SIZE} WRs
 *   reserved for control messages; two per chunk on iWARP), at least {@link RS_SNDLOWAT} bytes
 *   free in the send ring, a credit (`sseqNo !== sseqComp`, 16-bit sequence numbers), and a
 *   non-empty entry in the target SGL (the part of the peer's receive ring it advertised). A
 *   chunk is at most {@link RS_MAX_TRANSFER} bytes and never crosses the end of the advertised
 *   entry; it is copied into the send ring (or sent inline when small) and written with RDMA
 *   WRITE WITH IMMEDIATE `DATA | length`.
 * - Receiving: each data message is queued (length only); reads copy out of the receive ring in
 *   order. Consuming a whole message advances `rseqNo`. Credits are granted by an SGL message
 *   carrying `rseqNo + rqSize` (absolute, truncated to 16 bits by the receiver) when half the
 *   queue was consumed since the last grant, and whenever half the ring is free again that half
 *   is advertised by RDMA-writing an SGE into the peer's target SGL (entries used round robin).
 * - Control messages (credit updates, shutdown, disconnect) use the reserved WRs: at most
 *   {@link RS_QP_CTRL_SIZE} in flight (`ctrlSeqno`/`ctrlMaxSeqno`). They consume the peer's
 *   receives without credits; RC's RNR retry (infinite) covers a momentarily empty receive queue.
 *
 * @module
 */

import {
  RS_CAP_NOTICES,
  RS_CONN_FLAG_IOMAP,
  RS_CONN_FLAG_NET,
  RS_IOMAP_SIZE,
  RS_MAX_TRANSFER,
  RS_MSG_SIZE,
  RS_NOTICE_BIT,
  RS_OLAP_START_SIZE,
  RS_QP_CTRL_SIZE,
  RS_SGE_SIZE,
  RS_SGL_SIZE,
  RS_SNDLOWAT,
  RS_VERSION,
  RsCtrl,
  rsMsg,
  rsMsgData,
  rsMsgOp,
  RsOp,
  scaleToValue,
  setAddr,
  valueToScale,
  writeSge,
} from "./protocol.ts";
import type { ConnData } from "./protocol.ts";
import { ProtocolError } from "./errors.ts";
import { IomapTable } from "./_iomap-table.ts";
import {
  checkEngineConfig,
  type EngineConfig,
  type EngineMemory,
  highWord,
  lowWord,
  StreamState,
  type StreamTransport,
  TARGET_MEMORY_SIZE,
  targetMemorySize,
  WR_HIGH_MSG_SEND,
  WR_MSG_SEND,
  WR_RECV,
} from "./_engine-contract.ts";
import { InvalidArgumentError } from "../types/errors.ts";

const { CONNECTED, WRITABLE, READABLE, DISCONNECTED, ERROR } = StreamState;

/**
 * One side of an rsocket stream: call {@link StreamEngine.postInitialReceives} before connecting,
 * {@link StreamEngine.establish} with the peer's connection data once connected, then
 * {@link StreamEngine.write}/{@link StreamEngine.read} and feed every completion back.
 */
export class StreamEngine {
  /** Send ring bytes. */
  readonly sendBufferSize: number;
  /** Receive ring bytes. */
  readonly receiveBufferSize: number;
  /** Send queue depth. */
  readonly sendQueueDepth: number;
  /** Receive queue depth. */
  readonly receiveQueueDepth: number;
  /** Inline bytes. */
  readonly inlineSize: number;
  /** iWARP message-send mode. */
  readonly messageSend: boolean;

  readonly #t: StreamTransport;
  readonly #send: Uint8Array;
  readonly #sendView: DataView;
  readonly #recv: Uint8Array;
  readonly #recvView: DataView;
  readonly #targetView: DataView;
  readonly #recvAddr: number;
  readonly #recvKey: number;
  readonly #targetAddr: number;
  readonly #targetKey: number;
  readonly #ownLittle: boolean;
  #peerLittle = true;
  readonly #ctrlOff: number;
  readonly #iomapOff: number;
  readonly #msgOff: number;
  readonly #wrsPerChunk: number;

  #state = 0;
  #errorStatus = 0;
  // send side
  #sseqNo = 0;
  #sseqComp = 0;
  #sqeAvail: number;
  #ctrlSeqno = 0;
  #sendsCompleted = 0;
  #ctrlMaxSeqno = RS_QP_CTRL_SIZE;
  #sbufAvail: number;
  #cursor = 0;
  #targetSge = 0;
  // receive side
  #rseqNo = 0;
  #rseqComp: number;
  #rbufAvail: number;
  #rbufFreeOffset: number;
  #rbufOffset = 0;
  readonly #rmsg: Uint32Array;
  #rmsgHead = 0;
  #rmsgTail = 0;
  #recvSlot = 0;
  #toRepost = 0;
  // the peer's target SGL
  #remoteSglAddr = 0;
  #remoteSglKey = 0;
  #remoteSglLength = 0;
  #remoteSge = 0;
  // iomap: this side's table (in `target` after the SGL), the peer's, and entries to send
  /** Entries of this side's iomap table. */
  readonly iomapSize: number;
  /** This side's iomap table, as the peer writes it. */
  readonly iomaps: IomapTable;
  #remoteIomapAddr = 0;
  #remoteIomapKey = 0;
  #remoteIomapSize = 0;
  #peerCaps = 0;
  /** Queued iomap writes: [index, offset, addr, key, length] each; index -1 - n: notice n. */
  readonly #ioq: number[] = [];
  #ioOlen = RS_OLAP_START_SIZE;
  /**
   * Called with the argument of each notice the peer sends (see {@link RS_CAP_NOTICES}); while
   * it is null, notices are kept (the newest 4096) for {@link StreamEngine.takeNotices}.
   */
  onNotice: ((arg: number) => void) | null = null;
  readonly #notices: number[] = [];

  /** Creates the engine over registered memory and a transport. */
  constructor(config: EngineConfig, memory: EngineMemory, transport: StreamTransport) {
    const c = config;
    const iomap = checkEngineConfig(c, memory);
    this.iomapSize = iomap;
    this.sendBufferSize = c.sendBufferSize;
    this.receiveBufferSize = c.receiveBufferSize;
    this.sendQueueDepth = c.sendQueueDepth;
    this.receiveQueueDepth = c.receiveQueueDepth;
    this.inlineSize = c.inlineSize;
    this.messageSend = c.messageSend;
    this.#t = transport;
    this.#send = memory.send;
    this.#sendView = new DataView(memory.send.buffer, memory.send.byteOffset, memory.send.length);
    this.#recv = memory.recv;
    this.#recvView = new DataView(memory.recv.buffer, memory.recv.byteOffset, memory.recv.length);
    this.#targetView = new DataView(
      memory.target.buffer,
      memory.target.byteOffset,
      targetMemorySize(c),
    );
    this.iomaps = new IomapTable(this.#targetView, TARGET_MEMORY_SIZE, iomap, !c.bigEndian);
    this.#recvAddr = memory.recvAddr;
    this.#recvKey = memory.recvKey;
    this.#targetAddr = memory.targetAddr;
    this.#targetKey = memory.targetKey;
    this.#ownLittle = !c.bigEndian;
    this.#ctrlOff = c.sendBufferSize;
    this.#iomapOff = c.sendBufferSize + RS_QP_CTRL_SIZE * RS_SGE_SIZE;
    this.#msgOff = this.#iomapOff + RS_IOMAP_SIZE;
    this.#wrsPerChunk = c.messageSend ? 2 : 1;
    this.#sqeAvail = c.sendQueueDepth - RS_QP_CTRL_SIZE;
    this.#sbufAvail = c.sendBufferSize;
    const half = c.receiveBufferSize >>> 1;
    this.#rbufAvail = half;
    this.#rbufFreeOffset = half;
    this.#rseqComp = c.receiveQueueDepth >>> 1;
    this.#rmsg = new Uint32Array(c.receiveQueueDepth + 1);
    new Uint8Array(memory.target.buffer, memory.target.byteOffset, targetMemorySize(c)).fill(0);
  }

  /** This side's connection data for connect/accept. */
  localConnData(): ConnData {
    return {
      version: RS_VERSION,
      // rsocket always sets the iomap flag (with a table of 0 entries unless configured)
      flags: RS_CONN_FLAG_IOMAP | (this.#ownLittle ? 0 : RS_CONN_FLAG_NET),
      credits: this.receiveQueueDepth,
      iomapSize: valueToScale(this.iomapSize),
      capabilities: RS_CAP_NOTICES,
      targetSgl: { addr: this.#targetAddr, key: this.#targetKey, length: RS_SGL_SIZE },
      dataBuf: { addr: this.#recvAddr, key: this.#recvKey, length: this.receiveBufferSize >>> 1 },
    };
  }

  /** Posts the whole receive queue; call once, before connect or accept. */
  postInitialReceives(): void {
    for (let i = 0; i < this.receiveQueueDepth; i++) this.#postRecv();
    this.#t.postReceives();
  }

  /** Starts the stream with the peer's connection data (after ESTABLISHED, or when accepting). */
  establish(peer: ConnData): void {
    if (this.#state !== 0) throw new ProtocolError("the stream is already established");
    if (peer.version !== RS_VERSION) {
      throw new ProtocolError(`rsocket version ${peer.version} is not supported`);
    }
    if (peer.targetSgl.length < 1) throw new ProtocolError("the peer's target SGL has no entries");
    if (peer.dataBuf.length < 1) throw new ProtocolError("the peer's first data buffer is empty");
    this.#remoteSglAddr = peer.targetSgl.addr;
    this.#remoteSglKey = peer.targetSgl.key;
    this.#remoteSglLength = peer.targetSgl.length;
    this.#remoteSge = 1 % peer.targetSgl.length;
    this.#peerLittle = (peer.flags & RS_CONN_FLAG_NET) === 0;
    if ((peer.flags & RS_CONN_FLAG_IOMAP) !== 0) {
      this.#remoteIomapAddr = peer.targetSgl.addr + RS_SGE_SIZE * peer.targetSgl.length;
      this.#remoteIomapKey = peer.targetSgl.key;
      this.#remoteIomapSize = scaleToValue(peer.iomapSize);
    }
    this.#peerCaps = peer.capabilities ?? 0;
    writeSge(
      this.#targetView,
      0,
      peer.dataBuf.addr,
      peer.dataBuf.key,
      peer.dataBuf.length,
      this.#ownLittle,
    );
    this.#sseqComp = peer.credits & 0xffff;
    this.#state = CONNECTED | READABLE | WRITABLE;
  }

  /**
   * Copies `n` bytes without allocating: up to 64 in a loop, a whole array by `set`, part of one
   * by the transport (`set` takes a part only as a new view).
   */
  #copy(dst: Uint8Array, to: number, src: Uint8Array, from: number, n: number): void {
    if (n <= 64) {
      for (let i = 0; i < n; i++) dst[to + i] = src[from + i];
    } else if (from === 0 && n === src.length) {
      dst.set(src, to);
    } else {
      this.#t.copy(dst, to, src, from, n);
    }
  }

  // ---- state ----

  /** The {@link StreamState} bits. */
  get state(): number {
    return this.#state;
  }
  /** True while connected. */
  get connected(): boolean {
    return (this.#state & CONNECTED) !== 0;
  }
  /** True while this side may send. */
  get writable(): boolean {
    return (this.#state & WRITABLE) !== 0;
  }
  /** True while the peer may send. */
  get readable(): boolean {
    return (this.#state & READABLE) !== 0;
  }
  /** True after a DISCONNECT control message was received or sent. */
  get disconnected(): boolean {
    return (this.#state & DISCONNECTED) !== 0;
  }
  /** True after a failed work request or {@link StreamEngine.reset}. */
  get failed(): boolean {
    return (this.#state & ERROR) !== 0;
  }
  /** The status of the work completion that failed the stream (0 if none). */
  get errorStatus(): number {
    return this.#errorStatus;
  }
  /** True when received data is waiting to be read. */
  get hasData(): boolean {
    return this.#rmsgHead !== this.#rmsgTail;
  }
  /** Bytes waiting to be read. */
  get bufferedBytes(): number {
    let n = 0;
    const size = this.#rmsg.length;
    for (let i = this.#rmsgHead; i !== this.#rmsgTail; i = i + 1 === size ? 0 : i + 1) {
      n += this.#rmsg[i];
    }
    return n;
  }
  /** Credits left to send data messages (the peer's grant less what was sent). */
  get sendCredits(): number {
    return (this.#sseqComp - this.#sseqNo) & 0xffff;
  }
  /** Free bytes of the send ring (less what is in flight). */
  get sendBufferFree(): number {
    return this.#sbufAvail;
  }
  /** Send WRs free for data. */
  get sendWrsFree(): number {
    return this.#sqeAvail;
  }
  /** Control messages in flight. */
  get controlInFlight(): number {
    return this.#ctrlSeqno - (this.#ctrlMaxSeqno - RS_QP_CTRL_SIZE);
  }
  /** Bytes left in the target SGE data goes to next. */
  get targetSpace(): number {
    return this.#targetView.getUint32(this.#targetSge * RS_SGE_SIZE + 12, this.#ownLittle);
  }

  /** Entries of the peer's iomap table (0: it has none, or it sent no iomap flag). */
  get remoteIomapSize(): number {
    return this.#remoteIomapSize;
  }
  /** The peer's capability bits (`RS_CAP_*`; 0 for a C rsocket). */
  get peerCapabilities(): number {
    return this.#peerCaps;
  }
  /** True while iomap entries or notices wait to be sent (they go before any later data). */
  get iomapPending(): boolean {
    return this.#ioq.length !== 0;
  }

  /** True when a data chunk can be sent now. */
  canSend(): boolean {
    return this.#sqeAvail >= this.#wrsPerChunk && this.#sbufAvail >= RS_SNDLOWAT &&
      this.#sseqNo !== this.#sseqComp &&
      this.#targetView.getUint32(this.#targetSge * RS_SGE_SIZE + 12, this.#ownLittle) !== 0;
  }

  /** True when every posted send has completed (or the stream is no longer connected). */
  allSendsDone(): boolean {
    return (this.#ctrlMaxSeqno - this.#ctrlSeqno) + this.#sqeAvail === this.sendQueueDepth ||
      (this.#state & CONNECTED) === 0;
  }

  /** True when a control message can be posted now. */
  controlAvailable(): boolean {
    return this.#ctrlSeqno !== this.#ctrlMaxSeqno;
  }

  // ---- data ----

  /**
   * Sends as much of `src[off, off + len)` as credits, ring space and WRs allow now; returns the
   * bytes taken (0 when it must wait for completions), or -1 when this side may no longer send.
   * Each chunk is as large as allowed (up to {@link RS_MAX_TRANSFER}); rsocket's `rsend` starts
   * each call at {@link RS_OLAP_START_SIZE} and doubles, which measured no faster here
   * (bench/results/2026-11-27-overlap.md). A peer takes any chunk length.
   */
  write(src: Uint8Array, off: number, len: number): number {
    if ((this.#state & WRITABLE) === 0) return -1;
    if (this.#ioq.length !== 0 && !this.flushIomaps()) return 0;
    let done = 0;
    while (done < len && this.canSend()) {
      let xfer = len - done;
      if (xfer > RS_MAX_TRANSFER) xfer = RS_MAX_TRANSFER;
      if (xfer > this.#sbufAvail) xfer = this.#sbufAvail;
      const space = this.targetSpace;
      if (xfer > space) xfer = space;
      this.#writeChunk(src, off + done, xfer);
      done += xfer;
    }
    return done;
  }

  #writeChunk(src: Uint8Array, from: number, xfer: number): void {
    this.#sseqNo = (this.#sseqNo + 1) & 0xffff;
    this.#sqeAvail -= this.#wrsPerChunk;
    this.#sbufAvail -= xfer;
    // update the target SGE before posting: the peer may rewrite a used-up entry afterwards
    // (the address as its two words: see highWord)
    const at = this.#targetSge * RS_SGE_SIZE;
    const tv = this.#targetView;
    const little = this.#ownLittle;
    const highAt = little ? at + 4 : at;
    const lowAt = little ? at : at + 4;
    const high = tv.getInt32(highAt, little);
    const low = tv.getInt32(lowAt, little);
    const rkey = tv.getUint32(at + 8, little);
    const left = tv.getUint32(at + 12, little) - xfer;
    const next = (low >>> 0) + xfer;
    tv.setUint32(lowAt, next >>> 0, little);
    if (next > 0xffffffff) tv.setInt32(highAt, (high + 1) | 0, little);
    tv.setUint32(at + 12, left, little);
    if (left === 0) this.#targetSge = (this.#targetSge + 1) % RS_SGL_SIZE;
    // copy into the send ring (an inline chunk is copied by the post, so its bytes stay free)
    const size = this.sendBufferSize;
    const cur = this.#cursor;
    const first = size - cur;
    const msg = rsMsg(RsOp.DATA, xfer);
    const inline = xfer <= this.inlineSize;
    if (xfer <= first) {
      this.#copy(this.#send, cur, src, from, xfer);
      if (!inline) this.#cursor = cur + xfer === size ? 0 : cur + xfer;
      this.#postWriteMsg(msg, cur, xfer, 0, 0, inline, high, low, rkey);
    } else {
      const second = xfer - first;
      this.#copy(this.#send, cur, src, from, first);
      this.#copy(this.#send, 0, src, from + first, second);
      if (!inline) this.#cursor = second;
      this.#postWriteMsg(msg, cur, first, 0, second, inline, high, low, rkey);
    }
  }

  // ---- iomap (rsocket's riomap/riowrite) ----

  /**
   * Queues entry `index` of the peer's iomap table: `[offset, offset + length)` of the peer's
   * direct writes land at `addr` (rkey `key`) here. Like rsocket, the entry is RDMA-written
   * (with an iomap-update message, one credit) before any data sent after this call; it goes now
   * when a send is possible, otherwise with the next write. A length of 0 clears the entry.
   */
  queueIomap(index: number, offset: number, addr: number, key: number, length: number): void {
    if (!Number.isInteger(index) || index < 0 || index >= this.#remoteIomapSize) {
      throw new InvalidArgumentError(`iomap index ${index} is outside the peer's table`);
    }
    this.#ioq.push(index, offset, addr, key, length);
    this.flushIomaps();
  }

  /**
   * Queues a notice for the peer (an iomap-update message with {@link RS_NOTICE_BIT}, no data;
   * one credit): only to a peer with {@link RS_CAP_NOTICES}. Returns whether it was queued.
   */
  queueNotice(arg: number): boolean {
    if ((this.#peerCaps & RS_CAP_NOTICES) === 0 || (this.#state & CONNECTED) === 0) return false;
    this.#ioq.push(-1 - (arg & (RS_NOTICE_BIT - 1)), 0, 0, 0, 0);
    this.flushIomaps();
    return true;
  }

  /**
   * Sends queued iomap entries and notices while a send is possible; returns true when none is
   * left (false: wait for completions and call again, or the stream can no longer send).
   */
  flushIomaps(): boolean {
    const q = this.#ioq;
    if (q.length === 0) return true;
    if ((this.#state & WRITABLE) === 0) return false;
    let i = 0;
    while (i < q.length && this.canSend()) {
      const index = q[i];
      this.#sseqNo = (this.#sseqNo + 1) & 0xffff;
      this.#sbufAvail -= RS_IOMAP_SIZE;
      if (index < 0) {
        this.#sqeAvail -= 1;
        this.#postMsg(rsMsg(RsOp.IOMAP_SGL, RS_NOTICE_BIT | (-1 - index)));
      } else {
        this.#sqeAvail -= this.#wrsPerChunk;
        this.#postIomap(index, q[i + 1], q[i + 2], q[i + 3], q[i + 4]);
      }
      i += 5;
    }
    if (i === q.length) q.length = 0;
    else if (i > 0) q.splice(0, i);
    return q.length === 0;
  }

  #postIomap(index: number, offset: number, addr: number, key: number, length: number): void {
    // struct rs_iomap in the peer's byte order, built in the iomap slot of the send memory
    const v = this.#sendView;
    const slot = this.#iomapOff;
    setAddr(v, slot, offset, this.#peerLittle);
    writeSge(v, slot + 8, addr, key, length, this.#peerLittle);
    const msg = rsMsg(RsOp.IOMAP_SGL, index);
    const raddr = this.#remoteIomapAddr + index * RS_IOMAP_SIZE;
    const high = highWord(raddr);
    const low = lowWord(raddr);
    const rkey = this.#remoteIomapKey;
    if (this.inlineSize >= RS_IOMAP_SIZE) {
      this.#postWriteMsg(msg, slot, RS_IOMAP_SIZE, 0, 0, true, high, low, rkey);
      return;
    }
    // like rsocket: through the send ring when it cannot go inline
    const size = this.sendBufferSize;
    const cur = this.#cursor;
    const first = size - cur;
    if (RS_IOMAP_SIZE <= first) {
      this.#copy(this.#send, cur, this.#send, slot, RS_IOMAP_SIZE);
      this.#cursor = cur + RS_IOMAP_SIZE === size ? 0 : cur + RS_IOMAP_SIZE;
      this.#postWriteMsg(msg, cur, RS_IOMAP_SIZE, 0, 0, false, high, low, rkey);
    } else {
      const second = RS_IOMAP_SIZE - first;
      this.#copy(this.#send, cur, this.#send, slot, first);
      this.#copy(this.#send, 0, this.#send, slot + first, second);
      this.#cursor = second;
      this.#postWriteMsg(msg, cur, first, 0, second, false, high, low, rkey);
    }
  }

  /**
   * rsocket's `riowrite`: writes as much of `src[off, off + len)` as can be sent now to offset
   * `remoteOffset` of the buffers the peer mapped, by plain RDMA WRITEs of the bytes copied into
   * the send ring (inline when small). Each chunk needs what a data chunk needs (a send WR, ring
   * space, and - as rsocket checks - a credit and a target SGE) but consumes no credit. Chunks
   * double up to {@link RS_MAX_TRANSFER} within one sequence of calls: `startChunk` starts one
   * (rsocket starts every `riowrite` at {@link RS_OLAP_START_SIZE}), 0 continues it. Returns the
   * bytes taken (0: wait for completions), -1 when this side may no longer send, -2 when nothing
   * was taken because `remoteOffset` is not in any mapped entry.
   */
  ioWrite(
    src: Uint8Array,
    off: number,
    len: number,
    remoteOffset: number,
    startChunk: number,
  ): number {
    if ((this.#state & WRITABLE) === 0) return -1;
    if (startChunk > 0) this.#ioOlen = Math.min(startChunk, RS_MAX_TRANSFER);
    if (this.#ioq.length !== 0 && !this.flushIomaps()) return 0;
    const table = this.iomaps;
    let done = 0;
    let entry = -1;
    let start = 0;
    let end = 0;
    while (done < len) {
      const at = remoteOffset + done;
      if (entry < 0 || at >= end) {
        entry = table.find(at);
        if (entry < 0) return done > 0 ? done : -2;
        start = table.start(entry);
        end = start + table.length(entry);
      }
      if (!this.canSend()) break;
      const left = len - done;
      let xfer: number;
      if (this.#ioOlen < left) {
        xfer = this.#ioOlen;
        if (this.#ioOlen < RS_MAX_TRANSFER) this.#ioOlen <<= 1;
      } else xfer = left;
      if (xfer > this.#sbufAvail) xfer = this.#sbufAvail;
      if (xfer > end - at) xfer = end - at;
      const raddr = table.addr(entry) + (at - start);
      this.#writeDirect(src, off + done, xfer, highWord(raddr), lowWord(raddr), table.key(entry));
      done += xfer;
    }
    return done;
  }

  #writeDirect(
    src: Uint8Array,
    from: number,
    xfer: number,
    high: number,
    low: number,
    rkey: number,
  ): void {
    this.#sqeAvail -= 1;
    this.#sbufAvail -= xfer;
    const size = this.sendBufferSize;
    const cur = this.#cursor;
    const first = size - cur;
    const wrId = rsMsg(RsOp.WRITE, xfer);
    const inline = xfer <= this.inlineSize;
    if (xfer <= first) {
      this.#copy(this.#send, cur, src, from, xfer);
      if (!inline) this.#cursor = cur + xfer === size ? 0 : cur + xfer;
      this.#t.writeDirect(wrId, cur, xfer, 0, 0, inline, high, low, rkey);
    } else {
      const second = xfer - first;
      this.#copy(this.#send, cur, src, from, first);
      this.#copy(this.#send, 0, src, from + first, second);
      if (!inline) this.#cursor = second;
      this.#t.writeDirect(wrId, cur, first, 0, second, inline, high, low, rkey);
    }
  }

  /**
   * Copies up to `len` received bytes into `dst[off..]`; returns the count, 0 when nothing is
   * buffered yet, or -1 at the end of the stream (the peer shut down or disconnected and every
   * byte was read).
   */
  read(dst: Uint8Array, off: number, len: number): number {
    if (this.#rmsgHead === this.#rmsgTail) return (this.#state & READABLE) === 0 ? -1 : 0;
    const size = this.receiveBufferSize;
    const slots = this.#rmsg.length;
    let copied = 0;
    while (copied < len && this.#rmsgHead !== this.#rmsgTail) {
      const pending = this.#rmsg[this.#rmsgHead];
      let rsize: number;
      if (len - copied < pending) {
        rsize = len - copied;
        this.#rmsg[this.#rmsgHead] = pending - rsize;
      } else {
        rsize = pending;
        this.#rseqNo = (this.#rseqNo + 1) & 0xffff;
        this.#rmsgHead = this.#rmsgHead + 1 === slots ? 0 : this.#rmsgHead + 1;
      }
      let ro = this.#rbufOffset;
      let n = rsize;
      let to = off + copied;
      if (ro === size) ro = 0;
      if (n > size - ro) {
        const end = size - ro;
        this.#copy(dst, to, this.#recv, ro, end);
        to += end;
        n -= end;
        ro = 0;
      }
      this.#copy(dst, to, this.#recv, ro, n);
      this.#rbufOffset = ro + n;
      this.#rbufAvail += rsize;
      copied += rsize;
    }
    return copied;
  }

  // ---- credits and control ----

  #giveCredits(): boolean {
    if ((this.#state & CONNECTED) === 0) return false;
    const ctrl = this.messageSend
      ? this.#ctrlSeqno + 1 - this.#ctrlMaxSeqno < 0
      : this.#ctrlSeqno !== this.#ctrlMaxSeqno;
    if (!ctrl) return false;
    return this.#rbufAvail >= (this.receiveBufferSize >>> 1) ||
      (((this.#rseqNo - this.#rseqComp) << 16) >> 16) >= 0;
  }

  /**
   * Grants credits and advertises free receive ring when rsocket's thresholds are crossed (half
   * the queue consumed since the last grant, or half the ring free). Cheap when there is nothing
   * to do; the connection layer calls it after reads and after each batch of completions.
   */
  updateCredits(): void {
    if (!this.#giveCredits()) return;
    // the credits stand for posted receives: post those the transport held back
    this.#t.postReceives();
    this.#ctrlSeqno++;
    const rq = this.receiveQueueDepth;
    this.#rseqComp = (this.#rseqNo + (rq >>> 1)) & 0xffff;
    const msg = rsMsg(RsOp.SGL, this.#rseqNo + rq);
    const half = this.receiveBufferSize >>> 1;
    if (this.#rbufAvail >= half) {
      if (this.messageSend) this.#ctrlSeqno++;
      const slot = this.#ctrlOff + RS_SGE_SIZE * (this.#ctrlSeqno & (RS_QP_CTRL_SIZE - 1));
      writeSge(
        this.#sendView,
        slot,
        this.#recvAddr + this.#rbufFreeOffset,
        this.#recvKey,
        half,
        this.#peerLittle,
      );
      const sglAddr = this.#remoteSglAddr + this.#remoteSge * RS_SGE_SIZE;
      this.#postWriteMsg(
        msg,
        slot,
        RS_SGE_SIZE,
        0,
        0,
        this.inlineSize >= RS_SGE_SIZE,
        highWord(sglAddr),
        lowWord(sglAddr),
        this.#remoteSglKey,
      );
      this.#rbufAvail -= half;
      this.#rbufFreeOffset += half;
      if (this.#rbufFreeOffset >= this.receiveBufferSize) this.#rbufFreeOffset = 0;
      this.#remoteSge = (this.#remoteSge + 1) % this.#remoteSglLength;
    } else {
      this.#postMsg(msg);
    }
  }

  /**
   * Starts a shutdown like `rshutdown`: `"write"` stops this side's sending (SHUTDOWN, or
   * DISCONNECT when the peer already stopped), `"both"` ends the stream (DISCONNECT). Returns
   * the control message to post with {@link StreamEngine.postControl}, or -1 when the stream is
   * not connected (nothing to tell the peer).
   */
  shutdown(how: "write" | "both"): number {
    if ((this.#state & CONNECTED) === 0) return -1;
    if (how === "both") {
      this.#state &= ~(READABLE | WRITABLE);
      return RsCtrl.DISCONNECT;
    }
    this.#state &= ~WRITABLE;
    return (this.#state & READABLE) !== 0 ? RsCtrl.SHUTDOWN : RsCtrl.DISCONNECT;
  }

  /**
   * Posts a control message when a control slot is free; returns false when it must wait for
   * a completion first (or the stream is not connected).
   */
  postControl(ctrl: number): boolean {
    if ((this.#state & CONNECTED) === 0 || !this.controlAvailable()) return false;
    this.#ctrlSeqno++;
    this.#postMsg(rsMsg(RsOp.CTRL, ctrl));
    return true;
  }

  /**
   * Sends rsocket's keepalive (a control WR: a zero-length RDMA WRITE) when a control slot is
   * free and the stream is connected; returns whether it did.
   */
  postKeepalive(): boolean {
    if ((this.#state & CONNECTED) === 0 || !this.controlAvailable()) return false;
    this.#ctrlSeqno++;
    this.#t.probe(rsMsg(RsOp.CTRL, RsCtrl.KEEPALIVE));
    return true;
  }

  /** How many messages (data and control) this side has posted: it changes on every send. */
  get postedCount(): number {
    return (this.#sseqNo + this.#ctrlSeqno) | 0;
  }

  /** How many send completions (of any status) this side has taken: it changes on every one. */
  get completedCount(): number {
    return this.#sendsCompleted;
  }

  /**
   * Marks the stream reset from outside (the connection manager saw the peer go away, or the
   * connection layer gave up): no longer connected, readable or writable. Buffered data stays
   * readable. No effect after an orderly disconnect.
   */
  reset(): void {
    if ((this.#state & DISCONNECTED) !== 0) return;
    this.#state = ERROR;
  }

  // ---- posting ----

  #postRecv(): void {
    if (this.messageSend) {
      const slot = this.#recvSlot;
      this.#recvSlot = slot + 1 === this.receiveQueueDepth ? 0 : slot + 1;
      this.#t.recv(WR_RECV + slot, this.receiveBufferSize + slot * RS_MSG_SIZE);
    } else {
      this.#t.recv(WR_RECV, -1);
    }
  }

  #postMsg(msg: number): void {
    if (!this.messageSend) this.#t.write(msg, 0, 0, 0, 0, false, 0, 0, 0, msg);
    else this.#sendMsg(msg, msg);
  }

  #postWriteMsg(
    msg: number,
    off1: number,
    len1: number,
    off2: number,
    len2: number,
    inline: boolean,
    high: number,
    low: number,
    rkey: number,
  ): void {
    if (!this.messageSend) {
      this.#t.write(msg, off1, len1, off2, len2, inline, high, low, rkey, msg);
    } else {
      this.#t.write(msg, off1, len1, off2, len2, inline, high, low, rkey, -1);
      this.#sendMsg(WR_MSG_SEND + rsMsg(rsMsgOp(msg), 0), msg);
    }
  }

  #sendMsg(wrId: number, msg: number): void {
    // the message travels in the sender's byte order (what rsocket does: it sends a host u32)
    this.#sendView.setUint32(this.#msgOff, msg, this.#ownLittle);
    this.#t.send(wrId, this.#msgOff, RS_MSG_SIZE);
  }

  // ---- completions ----

  /**
   * Feeds back the completion of a send WR (`status` 0 = success), given as the two 32-bit halves
   * of the wr_id it was posted with.
   */
  completeSend(wrIdHigh: number, wrIdLow: number, status: number): void {
    this.#sendsCompleted = (this.#sendsCompleted + 1) | 0;
    const msgSend = (wrIdHigh & WR_HIGH_MSG_SEND) !== 0;
    const msg = wrIdLow;
    switch (rsMsgOp(msg)) {
      case RsOp.SGL:
        this.#ctrlMaxSeqno++;
        break;
      case RsOp.CTRL:
        this.#ctrlMaxSeqno++;
        if (rsMsgData(msg) === RsCtrl.DISCONNECT && status === 0) this.#state = DISCONNECTED;
        break;
      case RsOp.IOMAP_SGL:
        this.#sqeAvail++;
        if (!msgSend) this.#sbufAvail += 24;
        break;
      default:
        this.#sqeAvail++;
        this.#sbufAvail += rsMsgData(msg);
        break;
    }
    if (status !== 0 && (this.#state & CONNECTED) !== 0) this.#fail(status);
  }

  /**
   * Feeds back the completion of a receive WR, given as the low half of its wr_id (its slot):
   * `imm` is the immediate data (host order) when the completion has one (`hasImm`), otherwise
   * the message is read from the iWARP message slot.
   */
  completeRecv(wrIdLow: number, status: number, hasImm: boolean, imm: number): void {
    if (status !== 0) {
      // a flushed or failed receive while connected: the QP went to error under us
      if ((this.#state & CONNECTED) !== 0) this.#fail(status);
      return;
    }
    this.#toRepost++;
    let msg: number;
    if (hasImm) msg = imm >>> 0;
    else if (this.messageSend) {
      const slot = wrIdLow;
      msg = this.#recvView.getUint32(this.receiveBufferSize + slot * RS_MSG_SIZE, this.#peerLittle);
    } else return; // a completion without a message: nothing to do
    const data = rsMsgData(msg);
    switch (rsMsgOp(msg)) {
      case RsOp.SGL:
        this.#sseqComp = data & 0xffff;
        break;
      case RsOp.CTRL:
        if (data === RsCtrl.DISCONNECT) {
          this.#state = DISCONNECTED;
        } else if (data === RsCtrl.SHUTDOWN) {
          if ((this.#state & WRITABLE) !== 0) this.#state &= ~READABLE;
          else this.#state = DISCONNECTED;
        }
        break;
      case RsOp.DATA: {
        const next = this.#rmsgTail + 1 === this.#rmsg.length ? 0 : this.#rmsgTail + 1;
        if (next === this.#rmsgHead) {
          // more unread data messages than credits were given: the peer broke the protocol
          this.#fail(-1);
          return;
        }
        this.#rmsg[this.#rmsgTail] = data;
        this.#rmsgTail = next;
        break;
      }
      case RsOp.IOMAP_SGL:
        // the entry is already in the table (RDMA-written before the message). rsocket does
        // nothing here; this side also counts the message as consumed, so the sender's credit
        // comes back with the next grant (the receive was re-posted: that stays safe)
        this.#rseqNo = (this.#rseqNo + 1) & 0xffff;
        if ((data & RS_NOTICE_BIT) !== 0) this.#notice(data & (RS_NOTICE_BIT - 1));
        break;
      default:
        // reserved types carry nothing this side uses
        break;
    }
  }

  /**
   * Ends a batch of completions: re-posts one receive per successful receive completion while
   * connected, then grants credits if due.
   */
  afterCompletions(): void {
    if ((this.#state & CONNECTED) !== 0) {
      while (this.#toRepost > 0) {
        this.#toRepost--;
        this.#postRecv();
      }
    } else {
      this.#toRepost = 0;
    }
    this.updateCredits();
  }

  #notice(arg: number): void {
    if (this.onNotice !== null) this.onNotice(arg);
    else {
      if (this.#notices.length >= 4096) this.#notices.shift();
      this.#notices.push(arg);
    }
  }

  /** The notices that arrived while {@link StreamEngine.onNotice} was null (and forgets them). */
  takeNotices(): number[] {
    return this.#notices.splice(0);
  }

  #fail(status: number): void {
    this.#errorStatus = status;
    this.#state = ERROR;
  }
}
