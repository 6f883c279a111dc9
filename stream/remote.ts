/**
 * Remote buffers by token on a stream connection, between two peers of this library: one side
 * `expose()`s memory and sends its token however it likes; the other side's `remote(token)` reads
 * and writes it with RDMA READ and RDMA WRITE on the connection's own QP.
 *
 * How it shares the connection:
 *
 * - Send queue: the QP has `remoteQueueDepth` send WRs (and CQ entries) beyond the stream's, and
 *   one-sided operations use only those: at most that many are in flight (more wait: that is
 *   the backpressure); the stream's engine never sees them. RDMA READs in flight are also
 *   bounded by the read depth the connection settled (`readDepth`).
 * - Completions: their wr_ids start at `ONE_SIDED_WR_ID`; the connection hands those to this
 *   module and everything else to the engine.
 * - Waiting: an operation spins on the CQ and waits for the connection's progress like a read
 *   or write does.
 * - Memory: data in memory this connection exposed (a view of a handle's `buffer`) goes zero
 *   copy; other data goes through a registered staging area of {@link STAGING_SLOTS} slots of
 *   {@link STAGING_SLOT_SIZE} bytes, allocated on first use.
 * - Revocation: closing a handle deregisters its memory and, when the peer is this library, sends
 *   it a notice (an rsocket iomap-update message with a flag, which a C rsocket would ignore):
 *   from then on the peer refuses the token before posting (`RevokedError`). An operation
 *   already in flight, or one racing the notice, fails at the device with a remote access error,
 *   which moves the RC QP to the error state: the connection is reset.
 *
 * @module
 */

import { AccessFlags, SendFlags, WcStatus, WrOpcode } from "../types/enums.ts";
import { ClosedError, InvalidArgumentError } from "../types/errors.ts";
import { describe } from "../types/check.ts";
import { native } from "../ffi/native.ts";
import { NativeResource } from "../ffi/resource.ts";
import { WaitList, type WaitOptions } from "../poller/wait.ts";
import type { MemoryRegion } from "../verbs/mr.ts";
import type { PreparedSend } from "../verbs/prepared.ts";
import {
  decodeToken,
  encodeToken,
  REMOTE_TOKEN_SIZE,
  TokenAccess,
  type TokenFields,
} from "../verbs/remote-memory.ts";
import type { ConnCore } from "./_core.ts";
import { ONE_SIDED_WR_ID } from "./_engine-contract.ts";
import { InvalidTokenError, RemoteAccessError, RevokedError } from "./errors.ts";
import { RS_NOTICE_BIT } from "./protocol.ts";

/** Bytes of one staging slot (data not in exposed memory moves through these). */
export const STAGING_SLOT_SIZE = 256 * 1024;
/** Staging slots of a connection (at most; fewer when `remoteQueueDepth` is smaller). */
export const STAGING_SLOTS = 8;
/** The largest single RDMA READ/WRITE posted (longer operations are split). */
const MAX_CHUNK = 1 << 30;

/** Options of `conn.expose()`. */
export interface ExposeOptions {
  /** The peer may read it (RDMA READ). Default true. */
  readonly read?: boolean;
  /** The peer may write it (RDMA WRITE). Default false. */
  readonly write?: boolean;
}

/**
 * Registered memory of the connection that operations may use as local memory without a copy:
 * exposed memory and iomapped buffers (module-private bookkeeping).
 */
export interface LocalMemory {
  /** The registered bytes. */
  readonly buffer: Uint8Array;
  /** Registered bytes. */
  readonly length: number;
  /** The registration. */
  readonly mr: MemoryRegion;
  /** Operations in flight that use it. */
  inFlight: number;
  /** Closed while in use: deregister when the last operation completes. */
  deferred: boolean;
}

const construct = Symbol("ExposedMemory");

/**
 * Memory exposed to the peer with `conn.expose()`. Send `token` to the peer; `close()` revokes
 * it (deregisters the memory - once this side's own operations that use it as local memory have
 * completed - and tells the peer). Its `buffer` is also local memory for zero-copy
 * `remote()` operations of this connection.
 */
export class ExposedMemory extends NativeResource {
  /** The token the peer passes to `conn.remote()` (32 bytes, `REMOTE_TOKEN_SIZE`). */
  readonly token: Uint8Array<ArrayBuffer>;
  /** The exposed bytes (detached once closed, when the library allocated them). */
  readonly buffer: Uint8Array;
  /** Exposed bytes. */
  readonly length: number;
  /** The exposure's id on this connection (in the token; revocation notices name it). */
  readonly id: number;
  /** The peer may read it. */
  readonly readable: boolean;
  /** The peer may write it. */
  readonly writable: boolean;
  /** The registration (the connection's PD). */
  readonly mr: MemoryRegion;
  /** This side's operations in flight that use it as local memory (module-private). */
  inFlight = 0;
  /** Closed while operations used it: deregistered when the last one completes. */
  deferred = false;
  readonly #ops: RemoteOps;

  /** Not for direct use: `conn.expose()` makes handles. */
  constructor(
    ops: RemoteOps,
    owner: NativeResource,
    mr: MemoryRegion,
    f: TokenFields,
    token: symbol,
  ) {
    if (token !== construct) {
      throw new InvalidArgumentError("ExposedMemory is made by conn.expose()");
    }
    super("ExposedMemory", [owner]);
    this.#ops = ops;
    this.mr = mr;
    this.buffer = mr.buffer;
    this.length = mr.length;
    this.id = f.id;
    this.readable = (f.access & TokenAccess.READ) !== 0;
    this.writable = (f.access & TokenAccess.WRITE) !== 0;
    this.token = encodeToken(f);
  }

  /** Revokes the exposure (see the class). Idempotent. */
  protected destroy(): void {
    this.#ops.release(this);
  }
}

/** One one-sided operation (remote read or write, `iowrite`): its chunks in flight, first failure. */
export interface OneSidedOp {
  pending: number;
  error: Error | null;
  cancelled: boolean;
}

/**
 * The peer's exposed memory, from `conn.remote(token)`. `read()` and `write()` resolve once the
 * RDMA operation completed (a write: acknowledged by the peer's device on InfiniBand/RoCE, sent on
 * iWARP); a stream message sent after a write arrives after its bytes, which tells the peer they
 * landed. Bad offsets and lengths, a token without the access, and
 * a revoked token are refused before anything is posted.
 */
export class RemoteBuffer {
  /** Bytes of the remote memory. */
  readonly length: number;
  /** The token allows `read()`. */
  readonly readable: boolean;
  /** The token allows `write()`. */
  readonly writable: boolean;
  /** The exposure's id (as the owner numbered it). */
  readonly id: number;
  readonly #ops: RemoteOps;
  readonly #addr: number;
  readonly #rkey: number;

  /** Not for direct use: `conn.remote()` makes these. */
  constructor(ops: RemoteOps, f: TokenFields, token: symbol) {
    if (token !== construct) {
      throw new InvalidArgumentError("RemoteBuffer is made by conn.remote()");
    }
    this.#ops = ops;
    this.length = f.length;
    this.readable = (f.access & TokenAccess.READ) !== 0;
    this.writable = (f.access & TokenAccess.WRITE) !== 0;
    this.id = f.id;
    this.#addr = f.addr;
    this.#rkey = f.rkey;
  }

  /** True once the owner's revocation notice arrived (operations are refused). */
  get revoked(): boolean {
    return this.#ops.isRevoked(this.id);
  }

  #check(offset: number, length: number, write: boolean): void {
    this.#ops.checkOpen();
    if (!Number.isSafeInteger(offset) || offset < 0) {
      throw new InvalidArgumentError(
        `remote offset must be a non-negative integer, got ${describe(offset)}`,
      );
    }
    if (offset + length > this.length) {
      throw new InvalidArgumentError(
        `remote range ${offset}+${length} is outside the remote memory (${this.length} bytes)`,
      );
    }
    if (this.#ops.isRevoked(this.id)) {
      throw new RevokedError(`the peer revoked its exposed memory ${this.id}`);
    }
    if (write ? !this.writable : !this.readable) {
      throw new RemoteAccessError(
        `the token does not grant remote ${write ? "write" : "read"} (expose(..., { ${
          write ? "write" : "read"
        }: true }) on the peer)`,
      );
    }
  }

  /**
   * RDMA READ of `[offset, offset + n)`: `n` bytes into a new array, or `into.length` bytes into
   * `into` (zero copy when `into` views memory this connection exposed). Resolves with the
   * bytes read once the operation completed.
   */
  read(
    offset: number,
    lengthOrInto: number | Uint8Array,
    options?: WaitOptions,
  ): Promise<Uint8Array> {
    try {
      let into: Uint8Array;
      if (typeof lengthOrInto === "number") {
        if (!Number.isSafeInteger(lengthOrInto) || lengthOrInto < 0) {
          throw new InvalidArgumentError(
            `read length must be a non-negative integer, got ${describe(lengthOrInto)}`,
          );
        }
        this.#check(offset, lengthOrInto, false);
        into = new Uint8Array(lengthOrInto);
      } else if (lengthOrInto instanceof Uint8Array) {
        into = lengthOrInto;
        this.#check(offset, into.length, false);
      } else {
        throw new InvalidArgumentError(
          `read needs a length or a Uint8Array, got ${describe(lengthOrInto)}`,
        );
      }
      this.#ops.checkReads();
      return this.#ops.run(true, into, this.#addr + offset, this.#rkey, options).then(() => into);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * RDMA WRITE of `data` to `[offset, offset + data.length)` (zero copy when `data` views memory
   * this connection exposed); resolves once the operation completed.
   */
  write(offset: number, data: Uint8Array, options?: WaitOptions): Promise<void> {
    try {
      if (!(data instanceof Uint8Array)) {
        throw new InvalidArgumentError(`write needs a Uint8Array, got ${describe(data)}`);
      }
      this.#check(offset, data.length, true);
      return this.#ops.run(false, data, this.#addr + offset, this.#rkey, options);
    } catch (e) {
      return Promise.reject(e);
    }
  }
}

/** Matches any wait of a list without keys. */
const anyWait = () => true;

/** The one-sided operations of one connection. */
export class RemoteOps {
  readonly #core: ConnCore;
  readonly #depth: number;
  readonly #free: number[] = [];
  readonly #slotOp: (OneSidedOp | null)[];
  readonly #slotRead: Uint8Array;
  readonly #slotStage: Int32Array;
  readonly #slotCopy: (Uint8Array | null)[];
  readonly #slotCopyAt: Float64Array;
  readonly #slotLen: Float64Array;
  readonly #slotLocal: (LocalMemory | null)[];
  #readsInFlight = 0;
  /** Whether an operation has the turn to post its chunks; the others wait in `#postTurn`. */
  #posting = false;
  readonly #postTurn = new WaitList<void>();
  #stage: MemoryRegion | null = null;
  readonly #stageFree: number[] = [];
  readonly #stageSlots: number;
  readonly #prepared = new Map<
    MemoryRegion,
    { write: PreparedSend; read: PreparedSend; state: Float64Array }
  >();
  readonly #exposed = new Map<number, ExposedMemory>();
  readonly #byBuffer = new Map<ArrayBufferLike, LocalMemory[]>();
  readonly #revoked = new Set<number>();
  #nextId = 1;

  /** Made by the connection on first use; takes over its one-sided completions. */
  constructor(core: ConnCore) {
    this.#core = core;
    const depth = core.transport.extraSendWrs;
    this.#depth = depth;
    for (let i = depth - 1; i >= 0; i--) this.#free.push(i);
    this.#slotOp = new Array(depth).fill(null);
    this.#slotRead = new Uint8Array(depth);
    this.#slotStage = new Int32Array(depth).fill(-1);
    this.#slotCopy = new Array(depth).fill(null);
    this.#slotCopyAt = new Float64Array(depth);
    this.#slotLen = new Float64Array(depth);
    this.#slotLocal = new Array(depth).fill(null);
    this.#stageSlots = Math.min(STAGING_SLOTS, depth);
    // bound methods, not closures (docs/06-lifetimes.md)
    core.onOneSided = this.#complete.bind(this);
    for (const id of core.engine.takeNotices()) this.#revoked.add(id);
    core.engine.onNotice = this.#noteRevoked.bind(this);
  }

  #noteRevoked(id: number): void {
    this.#revoked.add(id);
  }

  /** `conn.expose()`. */
  expose(buffer: Uint8Array | number, options: ExposeOptions = {}): ExposedMemory {
    const core = this.#core;
    if (typeof options !== "object" || options === null) {
      throw new InvalidArgumentError("expose options must be an object");
    }
    const read = options.read ?? true;
    const write = options.write ?? false;
    if (typeof read !== "boolean" || typeof write !== "boolean") {
      throw new InvalidArgumentError("expose: read and write must be booleans");
    }
    let length: number;
    if (typeof buffer === "number") {
      if (!Number.isSafeInteger(buffer) || buffer < 1) {
        throw new InvalidArgumentError(
          `expose size must be a positive integer, got ${describe(buffer)}`,
        );
      }
      length = buffer;
    } else if (buffer instanceof Uint8Array) {
      if (buffer.length === 0) throw new InvalidArgumentError("expose needs a non-empty buffer");
      length = buffer.length;
    } else {
      throw new InvalidArgumentError(
        `expose needs a Uint8Array or a size, got ${describe(buffer)}`,
      );
    }
    const flags = AccessFlags.LOCAL_WRITE | (read ? AccessFlags.REMOTE_READ : 0) |
      (write ? AccessFlags.REMOTE_WRITE : 0);
    const pd = core.transport.pd;
    const mr = typeof buffer === "number"
      ? pd.allocBuffer(length, { access: flags })
      : pd.registerMemory(buffer, { access: flags });
    let h: ExposedMemory;
    try {
      const id = this.#nextId;
      this.#nextId = id + 1 >= RS_NOTICE_BIT ? 1 : id + 1;
      h = new ExposedMemory(this, core.owner, mr, {
        access: (read ? TokenAccess.READ : 0) | (write ? TokenAccess.WRITE : 0),
        tag: core.transport.tag,
        id,
        addr: mr.addrNumber,
        rkey: mr.rkey,
        qpNum: core.transport.qp.qpNum,
        length,
      }, construct);
    } catch (e) {
      mr.close();
      throw e;
    }
    this.#exposed.set(h.id, h);
    this.addLocal(h);
    return h;
  }

  /** Makes `m`'s memory usable as local memory of operations (zero copy). */
  addLocal(m: LocalMemory): void {
    const ab = m.buffer.buffer;
    const list = this.#byBuffer.get(ab);
    if (list) list.push(m);
    else this.#byBuffer.set(ab, [m]);
  }

  /**
   * `m` closes: no new operation uses it; its registration is closed now, or (`deregister`
   * false: the caller closes it) left alone; while operations use it, when the last completes.
   */
  removeLocal(m: LocalMemory, deregister: boolean): void {
    const list = this.#byBuffer.get(m.buffer.buffer);
    if (list) {
      const i = list.indexOf(m);
      if (i >= 0) list.splice(i, 1);
      if (list.length === 0) this.#byBuffer.delete(m.buffer.buffer);
    }
    if (m.inFlight === 0) {
      if (deregister) this.#deregister(m);
    } else m.deferred = true;
  }

  /** True when `data` lies in registered memory of this connection (operations go zero copy). */
  isLocal(data: Uint8Array): boolean {
    return this.#localOf(data) !== null;
  }

  /** `conn.remote()`. */
  remote(token: Uint8Array): RemoteBuffer {
    let f: TokenFields;
    try {
      f = decodeToken(token);
    } catch (e) {
      throw new InvalidTokenError((e as Error).message);
    }
    const t = this.#core.transport;
    if (f.tag === 0 || f.tag !== t.peerTag) {
      throw new InvalidTokenError(
        t.peerTag === 0
          ? "the peer is not this library (a C rsocket): it cannot expose memory"
          : f.tag === 0
          ? "the token was not made by conn.expose() (a verbs-level token: use RemoteMemory.from)"
          : "the token was made on another connection (its connection tag differs)",
      );
    }
    if (t.peerQpNum !== 0 && f.qpNum !== t.peerQpNum) {
      throw new InvalidTokenError(
        `the token was made on another connection (QP ${f.qpNum}; the peer's is ${t.peerQpNum})`,
      );
    }
    if (f.id === 0) throw new InvalidTokenError("the token has no exposure id");
    return new RemoteBuffer(this, f, construct);
  }

  /** True once the peer's notice revoked exposure `id`. */
  isRevoked(id: number): boolean {
    return this.#revoked.has(id);
  }

  /** Throws when no operation can be posted: the connection is closed or gone. */
  checkOpen(): void {
    const core = this.#core;
    if (core.closing) throw new ClosedError("RdmaConn");
    if (!core.engine.connected) throw core.writeError();
    if (this.#depth === 0) {
      throw new InvalidArgumentError(
        "the connection has remoteQueueDepth 0: no one-sided operations",
      );
    }
  }

  /** Throws when this side may not issue RDMA READs. */
  checkReads(): void {
    if (this.#core.transport.readDepth === 0) {
      throw new RemoteAccessError(
        "the connection has no RDMA READ resources (readDepth 0 here, or the accepting side granted none)",
      );
    }
  }

  /** An exposure closes: tell the peer, deregister (now, or after this side's operations). */
  release(h: ExposedMemory): void {
    const core = this.#core;
    this.#exposed.delete(h.id);
    // when the connection closes, its teardown deregisters after the QP is gone
    if (!core.closing && (h.readable || h.writable)) {
      core.guard(() => void core.engine.queueNotice(h.id));
    }
    this.removeLocal(h, !core.closing);
  }

  #deregister(h: LocalMemory): void {
    const p = this.#prepared.get(h.mr);
    if (p) {
      this.#prepared.delete(h.mr);
      p.write.close();
      p.read.close();
    }
    h.mr.close();
  }

  /** The registered memory `data` lies in, or null. */
  #localOf(data: Uint8Array): LocalMemory | null {
    const list = this.#byBuffer.get(data.buffer);
    if (!list) return null;
    for (const h of list) {
      const start = h.buffer.byteOffset;
      if (data.byteOffset >= start && data.byteOffset + data.length <= start + h.length) return h;
    }
    return null;
  }

  /** Runs one operation: its chunks posted as slots free up, then waits for all of them. */
  async run(
    read: boolean,
    data: Uint8Array,
    raddr: number,
    rkey: number,
    options: WaitOptions | undefined,
  ): Promise<void> {
    const op = await this.post(read, data, raddr, rkey, options);
    if (op !== null) await this.finish(op, options);
  }

  /**
   * Posts one operation's chunks as slots free up; resolves with it once every chunk is posted
   * (null for no bytes). Work posted on the connection afterwards goes on the wire after it.
   */
  async post(
    read: boolean,
    data: Uint8Array,
    raddr: number,
    rkey: number,
    options: WaitOptions | undefined,
  ): Promise<OneSidedOp | null> {
    const len = data.length;
    if (len === 0) return null;
    const core = this.#core;
    const e = core.engine;
    const local = this.#localOf(data);
    const chunkMax = local ? Math.min(MAX_CHUNK, core.transport.maxMessageSize) : STAGING_SLOT_SIZE;
    const op: OneSidedOp = { pending: 0, error: null, cancelled: false };
    if (!local) this.#stageMemory();
    // one operation posts at a time, in call order (the turn is handed over, never barged):
    // two woken by the same completion would otherwise both see the one free slot
    if (this.#posting) await this.#postTurn.add(options, undefined, "one-sided operation");
    this.#posting = true;
    let done = 0;
    try {
      while (done < len) {
        const ready = () =>
          !e.connected || op.error !== null || this.#canPost(read, local === null);
        while (!ready()) await core.waitUntil(ready, options);
        if (op.error) break;
        if (!e.connected) throw core.writeError();
        this.checkOpen();
        const n = Math.min(len - done, chunkMax);
        if (!this.#post(op, read, data, done, n, local, raddr + done, rkey)) break;
        done += n;
      }
    } catch (err) {
      op.cancelled = true;
      throw err;
    } finally {
      if (!this.#postTurn.resolveFirst(anyWait, undefined)) this.#posting = false;
    }
    return op;
  }

  /** Waits until every posted chunk of `op` completed; throws the operation's error. */
  async finish(op: OneSidedOp, options: WaitOptions | undefined): Promise<void> {
    const e = this.#core.engine;
    const finished = () => op.pending === 0 || !e.connected;
    try {
      if (!finished()) await this.#core.waitUntil(finished, options);
    } catch (err) {
      op.cancelled = true;
      throw err;
    }
    if (op.error) throw op.error;
    if (op.pending > 0) {
      op.cancelled = true;
      throw this.#core.writeError();
    }
  }

  #canPost(read: boolean, staged: boolean): boolean {
    return this.#free.length > 0 && (!staged || this.#stageFree.length > 0) &&
      (!read || this.#readsInFlight < this.#core.transport.readDepth);
  }

  #stageMemory(): void {
    if (this.#stage !== null) return;
    this.#stage = this.#core.transport.pd.allocBuffer(this.#stageSlots * STAGING_SLOT_SIZE, {
      access: AccessFlags.LOCAL_WRITE,
    });
    for (let i = this.#stageSlots - 1; i >= 0; i--) this.#stageFree.push(i);
  }

  /** The prepared RDMA WRITE and READ whose one SGE is in `mr`. */
  #preparedFor(mr: MemoryRegion) {
    let p = this.#prepared.get(mr);
    if (!p) {
      const qp = this.#core.transport.qp;
      const wr = (opcode: typeof WrOpcode.RDMA_WRITE | typeof WrOpcode.RDMA_READ) =>
        qp.prepareSend({
          opcode,
          flags: SendFlags.SIGNALED,
          remote: { addr: 0, rkey: 0 },
          sg: [{ mr, offset: 0, length: 1 }],
        });
      // the SGE each list holds now: offset, length (kept to update it in a valid order)
      p = {
        write: wr(WrOpcode.RDMA_WRITE),
        read: wr(WrOpcode.RDMA_READ),
        state: new Float64Array([0, 1, 0, 1]),
      };
      this.#prepared.set(mr, p);
    }
    return p;
  }

  /** Posts one chunk; returns false when the post failed (the op carries the error). */
  #post(
    op: OneSidedOp,
    read: boolean,
    data: Uint8Array,
    from: number,
    n: number,
    local: LocalMemory | null,
    raddr: number,
    rkey: number,
  ): boolean {
    const slot = this.#free.pop()!;
    let mr: MemoryRegion;
    let off: number;
    let stage = -1;
    if (local) {
      mr = local.mr;
      off = data.byteOffset - local.buffer.byteOffset + from;
      local.inFlight++;
    } else {
      mr = this.#stage!;
      stage = this.#stageFree.pop()!;
      off = stage * STAGING_SLOT_SIZE;
      if (!read) native().copy(mr.buffer, off, data, from, n);
    }
    this.#slotOp[slot] = op;
    this.#slotRead[slot] = read ? 1 : 0;
    this.#slotStage[slot] = stage;
    this.#slotCopy[slot] = read && !local ? data : null;
    this.#slotCopyAt[slot] = from;
    this.#slotLen[slot] = n;
    this.#slotLocal[slot] = local;
    if (read) this.#readsInFlight++;
    op.pending++;
    const p = this.#preparedFor(mr);
    const list = read ? p.read : p.write;
    const k = read ? 2 : 0;
    const posted = this.#core.guard(() => {
      list.setWrId(0, ONE_SIDED_WR_ID + slot);
      list.setRemoteAddr(0, raddr);
      list.setRkey(0, rkey);
      setSge(list, p.state, k, off, n, mr.length);
      list.post();
    });
    if (!posted) {
      this.#complete(slot, -1, this.#core.writeError());
      return false;
    }
    return true;
  }

  /** A one-sided WR completed (or its post failed: status -1). */
  #complete(slot: number, status: number, error: Error | null): void {
    const op = this.#slotOp[slot];
    if (op === null) return;
    const read = this.#slotRead[slot] === 1;
    const stage = this.#slotStage[slot];
    if (status === 0 && read && stage >= 0 && !op.cancelled) {
      const to = this.#slotCopy[slot]!;
      const at = stage * STAGING_SLOT_SIZE;
      native().copy(to, this.#slotCopyAt[slot], this.#stage!.buffer, at, this.#slotLen[slot]);
    }
    if (stage >= 0) this.#stageFree.push(stage);
    const local = this.#slotLocal[slot];
    if (local !== null) {
      local.inFlight--;
      if (local.inFlight === 0 && local.deferred) {
        local.deferred = false;
        if (!this.#core.closing) this.#deregister(local);
      }
    }
    if (read) this.#readsInFlight--;
    this.#slotOp[slot] = null;
    this.#slotCopy[slot] = null;
    this.#slotLocal[slot] = null;
    this.#free.push(slot);
    if (status !== 0 && op.error === null) op.error = this.#failure(status, error);
    op.pending--;
  }

  #failure(status: number, error: Error | null): Error {
    if (
      status === WcStatus.REM_ACCESS_ERR || status === WcStatus.REM_INV_REQ_ERR ||
      status === WcStatus.REM_OP_ERR
    ) {
      return new RemoteAccessError(
        "the peer's device refused the operation (its memory was revoked, or the access is not " +
          "granted); the connection is reset",
        { cause: error ?? undefined },
      );
    }
    if (status < 0 && error) return error;
    return this.#core.resetError();
  }
}

/** Sets the one SGE of a prepared list to `[off, off + len)` in an order that stays valid. */
function setSge(
  p: PreparedSend,
  state: Float64Array,
  k: number,
  off: number,
  len: number,
  mrLength: number,
): void {
  const curOff = state[k];
  const curLen = state[k + 1];
  if (curOff === off && curLen === len) return;
  if (curOff + len <= mrLength) {
    if (curLen !== len) p.setLength(0, 0, len);
    if (curOff !== off) p.setOffset(0, 0, off);
  } else if (off + curLen <= mrLength) {
    p.setOffset(0, 0, off);
    p.setLength(0, 0, len);
  } else {
    p.setLength(0, 0, 1);
    p.setOffset(0, 0, off);
    p.setLength(0, 0, len);
  }
  state[k] = off;
  state[k + 1] = len;
}

/**
 * Reads one token (`REMOTE_TOKEN_SIZE` bytes) from `conn`'s stream; rejects with
 * `InvalidTokenError` when the stream ends first.
 */
export async function readToken(
  conn: { read(p: Uint8Array, options: WaitOptions & { min: number }): Promise<number | null> },
  options: WaitOptions | undefined,
): Promise<Uint8Array> {
  const token = new Uint8Array(REMOTE_TOKEN_SIZE);
  const n = await conn.read(token, { ...options, min: REMOTE_TOKEN_SIZE });
  if (n === null || n < REMOTE_TOKEN_SIZE) {
    throw new InvalidTokenError(`the stream ended after ${n ?? 0} bytes of a token`);
  }
  return token;
}
