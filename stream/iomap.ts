/**
 * rsocket's iomap on a connection: `riomap`/`riounmap` (a buffer of this side registered and its
 * entry written into the peer's iomap table) and `riowrite` (plain RDMA WRITEs to the buffers the
 * peer mapped, found by offset in this side's own table). The wire work - entries, chunks,
 * credits - is the engine's ({@link StreamEngine.queueIomap}, {@link StreamEngine.ioWrite});
 * this module owns the memory registrations, the peer's table slots and the waiting.
 *
 * @module
 */

import { AccessFlags } from "../types/enums.ts";
import { ClosedError, InvalidArgumentError } from "../types/errors.ts";
import { describe } from "../types/check.ts";
import { NativeResource } from "../ffi/resource.ts";
import type { MemoryRegion } from "../verbs/mr.ts";
import type { WaitOptions } from "../poller/wait.ts";
import type { ConnCore } from "./_core.ts";
import type { OneSidedOp, RemoteOps } from "./remote.ts";
import { NoIomapSlotError, UnmappedOffsetError } from "./errors.ts";
import { RS_CAP_NOTICES, RS_MAX_TRANSFER, RS_OLAP_START_SIZE } from "./protocol.ts";

/** Options of `conn.iomap()`. */
export interface IomapOptions {
  /**
   * The offset the peer's `iowrite()`s name the first byte by (default 0; -1: the buffer's
   * address, as rsocket's `riomap` does with -1). Mappings of one connection must not overlap.
   */
  readonly offset?: number;
  /**
   * `"write"` (default, rsocket's `PROT_WRITE`): the peer may write it, and it takes an entry of
   * the peer's table; `"none"` (`PROT_NONE`): registered for local use only, no entry.
   */
  readonly access?: "write" | "none";
}

/**
 * The smallest `iowrite` sent zero copy from registered memory: smaller ones are copied into the
 * send ring (they resolve once posted, so consecutive small writes overlap; a zero-copy write
 * resolves once completed, which costs a round trip each).
 */
export const IOWRITE_ZERO_COPY_MIN = 256 * 1024;

const construct = Symbol("IoMapping");

/**
 * A buffer mapped with `conn.iomap()`: the peer's `iowrite(data, offset)` for an offset in
 * `[offset, offset + length)` lands at `buffer[offset' - offset]`. `close()` is `iounmap`.
 */
export class IoMapping extends NativeResource {
  /** The offset of the first byte in the peer's `iowrite()`s. */
  readonly offset: number;
  /** Mapped bytes. */
  readonly length: number;
  /** The entry of the peer's table it holds (-1 for `access: "none"`). */
  readonly index: number;
  /** The mapped memory (detached once closed, when the library allocated it). */
  readonly buffer: Uint8Array;
  /** The registration (owned by the mapping; the connection's PD). */
  readonly mr: MemoryRegion;
  /** This side's operations in flight that use it as local memory (module-private). */
  inFlight = 0;
  /** Closed while operations used it: deregistered when the last one completes. */
  deferred = false;
  readonly #maps: IoMaps;

  /** Not for direct use: `conn.iomap()` makes mappings. */
  constructor(
    maps: IoMaps,
    owner: NativeResource,
    mr: MemoryRegion,
    offset: number,
    index: number,
    token: symbol,
  ) {
    if (token !== construct) throw new InvalidArgumentError("IoMapping is made by conn.iomap()");
    super("IoMapping", [owner]);
    this.#maps = maps;
    this.mr = mr;
    this.offset = offset;
    this.length = mr.length;
    this.index = index;
    this.buffer = mr.buffer;
  }

  /** Unmaps (rsocket's `riounmap`): see `conn.iounmap()`. Idempotent. */
  protected destroy(): void {
    this.#maps.release(this);
  }
}

/** The iomap state of one connection. */
export class IoMaps {
  readonly #core: ConnCore;
  readonly #ops: () => RemoteOps;
  /** The peer's table: which of this side's mappings holds each entry. */
  readonly #slots: (IoMapping | null)[] = [];
  readonly #all = new Set<IoMapping>();

  /** Made by the connection on first use; `ops` gives its one-sided operations. */
  constructor(core: ConnCore, ops: () => RemoteOps) {
    this.#core = core;
    this.#ops = ops;
  }

  /** The one-sided operations, when the connection has send WRs for them. */
  #zeroCopy(): RemoteOps | null {
    return this.#core.transport.extraSendWrs > 0 ? this.#ops() : null;
  }

  /** `conn.iomap()`. */
  map(buffer: Uint8Array | number, options: IomapOptions = {}): IoMapping {
    const core = this.#core;
    const e = core.engine;
    if (typeof options !== "object" || options === null) {
      throw new InvalidArgumentError("iomap options must be an object");
    }
    const access = options.access ?? "write";
    if (access !== "write" && access !== "none") {
      throw new InvalidArgumentError(
        `iomap access must be "write" or "none", got ${describe(access)}`,
      );
    }
    let length: number;
    if (typeof buffer === "number") {
      if (!Number.isSafeInteger(buffer) || buffer < 1) {
        throw new InvalidArgumentError(
          `iomap size must be a positive integer, got ${describe(buffer)}`,
        );
      }
      length = buffer;
    } else if (buffer instanceof Uint8Array) {
      if (buffer.length === 0) throw new InvalidArgumentError("iomap needs a non-empty buffer");
      length = buffer.length;
    } else {
      throw new InvalidArgumentError(`iomap needs a Uint8Array or a size, got ${describe(buffer)}`);
    }
    const asked = options.offset ?? 0;
    if (!Number.isSafeInteger(asked) || asked < -1) {
      throw new InvalidArgumentError(
        `iomap offset must be an integer >= -1, got ${describe(asked)}`,
      );
    }
    if (asked >= 0 && asked + length > Number.MAX_SAFE_INTEGER) {
      throw new InvalidArgumentError("iomap offset + length must stay below 2^53");
    }
    let index = -1;
    if (access === "write") {
      if (!e.writable) throw core.writeError();
      const size = e.remoteIomapSize;
      for (let i = 0; i < size; i++) {
        if (!this.#slots[i]) {
          index = i;
          break;
        }
      }
      if (index < 0) {
        throw new NoIomapSlotError(
          size === 0
            ? "the peer offers no iomap table (its iomapSize, or a C rsocket's RDMA_IOMAPSIZE, is 0)"
            : `the peer's iomap table is full (${size} entr${size === 1 ? "y" : "ies"}; ` +
              "unmap one, or raise iomapSize on the peer)",
        );
      }
      if (asked >= 0) this.#checkOverlap(asked, length);
    }
    const pd = core.transport.pd;
    const flags = AccessFlags.LOCAL_WRITE | (access === "write" ? AccessFlags.REMOTE_WRITE : 0);
    const mr = typeof buffer === "number"
      ? pd.allocBuffer(length, { access: flags })
      : pd.registerMemory(buffer, { access: flags });
    let m: IoMapping;
    try {
      const offset = asked === -1 ? mr.addrNumber : asked;
      if (asked === -1 && index >= 0) this.#checkOverlap(offset, length);
      m = new IoMapping(this, core.owner, mr, offset, index, construct);
    } catch (err) {
      mr.close();
      throw err;
    }
    this.#all.add(m);
    this.#zeroCopy()?.addLocal(m);
    if (index >= 0) {
      this.#slots[index] = m;
      core.guard(() => e.queueIomap(index, m.offset, mr.addrNumber, mr.rkey, mr.length));
    }
    return m;
  }

  #checkOverlap(offset: number, length: number): void {
    for (const m of this.#slots) {
      if (m && offset < m.offset + m.length && m.offset < offset + length) {
        throw new InvalidArgumentError(
          `iomap range ${offset}+${length} overlaps the mapping at ${m.offset}+${m.length}`,
        );
      }
    }
  }

  /** `conn.iounmap()`. */
  unmap(mapping: IoMapping | Uint8Array): void {
    if (mapping instanceof IoMapping) {
      if (!this.#all.has(mapping) && !mapping.closed) {
        throw new InvalidArgumentError("the mapping belongs to another connection");
      }
      mapping.close();
      return;
    }
    if (mapping instanceof Uint8Array) {
      for (const m of this.#all) {
        if (m.buffer === mapping) {
          m.close();
          return;
        }
      }
      throw new InvalidArgumentError("iounmap: the buffer is not mapped on this connection");
    }
    throw new InvalidArgumentError(`iounmap needs a mapping or a buffer, got ${describe(mapping)}`);
  }

  /** A mapping closes: free its entry (clearing it at the peer) and its registration. */
  release(m: IoMapping): void {
    this.#all.delete(m);
    const core = this.#core;
    if (m.index >= 0 && this.#slots[m.index] === m) {
      this.#slots[m.index] = null;
      const e = core.engine;
      // a peer of this library gets its entry cleared, so its iowrite() there fails cleanly
      // (rsocket leaves it, and a C peer would not give the message's credit back)
      if (!core.closing && e.writable && (e.peerCapabilities & RS_CAP_NOTICES) !== 0) {
        core.guard(() => e.queueIomap(m.index, 0, 0, 0, 0));
      }
    }
    // when the connection closes, its teardown deregisters the memory after the QP is gone;
    // this side's own operations that use it as local memory complete first
    const ops = this.#zeroCopy();
    if (ops) ops.removeLocal(m, !core.closing);
    else if (!core.closing) m.mr.close();
  }

  /** `conn.iowrite()`. */
  async write(data: Uint8Array, remoteOffset: number, options?: WaitOptions): Promise<number> {
    if (!(data instanceof Uint8Array)) throw new InvalidArgumentError("iowrite needs a Uint8Array");
    if (!Number.isSafeInteger(remoteOffset) || remoteOffset < 0) {
      throw new InvalidArgumentError(
        `iowrite offset must be a non-negative integer, got ${describe(remoteOffset)}`,
      );
    }
    const len = data.length;
    if (len === 0) return 0;
    const core = this.#core;
    const e = core.engine;
    // the whole range must be mapped by the peer before anything is sent
    for (let at = remoteOffset; at < remoteOffset + len;) {
      const i = e.iomaps.find(at);
      const entry = i < 0 ? null : e.iomaps.entry(i);
      if (entry === null) {
        throw new UnmappedOffsetError(
          `iowrite: offset ${at} is not in a buffer the peer mapped (${this.#describeTable()})`,
          at,
          0,
        );
      }
      at = entry.offset + entry.length;
    }
    const ops = len >= IOWRITE_ZERO_COPY_MIN ? this.#zeroCopy() : null;
    if (ops !== null && ops.isLocal(data)) {
      return this.#writeZeroCopy(ops, data, remoteOffset, options);
    }
    await core.lock(options);
    try {
      let done = 0;
      // rsocket starts each riowrite with a 2 KiB chunk, doubling to 64 KiB, so that the first
      // bytes leave while the rest is copied; that only helps a long write to an idle queue
      let start = len > RS_MAX_TRANSFER && e.allSendsDone() ? RS_OLAP_START_SIZE : RS_MAX_TRANSFER;
      while (done < len) {
        if (core.closing) throw new ClosedError("RdmaConn");
        let n = -1;
        if (
          !core.guard(() =>
            void (n = e.ioWrite(data, done, len - done, remoteOffset + done, start))
          )
        ) {
          throw core.writeError();
        }
        start = 0;
        if (n === -1) throw core.writeError();
        if (n === -2) {
          throw new UnmappedOffsetError(
            `iowrite: the peer unmapped offset ${remoteOffset + done} during the write`,
            remoteOffset + done,
            done,
          );
        }
        done += n;
        if (done < len) await core.waitWrite(options);
      }
      return len;
    } finally {
      core.unlock();
    }
  }

  /**
   * `iowrite` of data in registered memory of this connection: one RDMA WRITE per mapped range
   * straight from it (no copy into the send ring, no 64 KiB chunks), on the connection's
   * one-sided send WRs; resolves once they completed (the memory may then be reused). The
   * connection's writes are held only until the WRITEs are posted, so later `iowrite`s and stream
   * writes queue behind them on the wire while they are in flight (as rsocket's `riowrite`
   * returns once its data is queued). The wire is the same as rsocket's: plain RDMA WRITEs into
   * the peer's mapped buffers.
   */
  async #writeZeroCopy(
    ops: RemoteOps,
    data: Uint8Array,
    remoteOffset: number,
    options: WaitOptions | undefined,
  ): Promise<number> {
    const core = this.#core;
    const e = core.engine;
    const posted: OneSidedOp[] = [];
    await core.lock(options);
    try {
      // this side's pending entries go first, as rsocket sends them before a riowrite
      while (e.iomapPending) {
        if (!e.writable) throw core.writeError();
        if (!core.guard(() => e.flushIomaps())) await core.waitWrite(options);
      }
      for (let done = 0; done < data.length;) {
        const at = remoteOffset + done;
        const i = e.iomaps.find(at);
        const entry = i < 0 ? null : e.iomaps.entry(i);
        if (entry === null) {
          throw new UnmappedOffsetError(
            `iowrite: the peer unmapped offset ${at} during the write`,
            at,
            done,
          );
        }
        const n = Math.min(data.length - done, entry.offset + entry.length - at);
        const part = data.subarray(done, done + n);
        const op = await ops.post(
          false,
          part,
          entry.addr + (at - entry.offset),
          entry.key,
          options,
        );
        if (op !== null) posted.push(op);
        done += n;
      }
    } finally {
      core.unlock();
    }
    for (let i = 0; i < posted.length; i++) await ops.finish(posted[i], options);
    return data.length;
  }

  #describeTable(): string {
    const e = this.#core.engine;
    const parts: string[] = [];
    for (let i = 0; i < e.iomapSize; i++) {
      const entry = e.iomaps.entry(i);
      if (entry) parts.push(`${entry.offset}+${entry.length}`);
    }
    return parts.length === 0
      ? `it mapped none; this side offers ${e.iomapSize} entr${e.iomapSize === 1 ? "y" : "ies"}`
      : `it mapped ${parts.join(", ")}`;
  }
}
