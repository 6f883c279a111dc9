/**
 * Remote memory by token: what a peer needs to reach registered memory with RDMA READ and
 * WRITE (address, rkey, length, access), as 32 bytes an application sends however it likes
 * (private data, a message, a file), and the other end's view of it.
 *
 * ```ts
 * import { AccessFlags, type MemoryRegion, type QueuePair, RemoteMemory } from "@rdma/verbs";
 * declare const mr: MemoryRegion, qp: QueuePair, local: MemoryRegion;
 *
 * const token = mr.token(); // the owner; mr registered with AccessFlags.REMOTE_WRITE (and/or READ)
 * const remote = RemoteMemory.from(token); // the peer
 * await remote.write(qp, { mr: local, length: 4096 }, 0); // RDMA WRITE, resolves when completed
 * await remote.read(qp, { mr: local, length: 4096 }, 0); // RDMA READ
 * ```
 *
 * Token layout ({@link REMOTE_TOKEN_SIZE} bytes, every field big-endian):
 *
 * | offset | field   | meaning                                                                  |
 * | ------ | ------- | ------------------------------------------------------------------------ |
 * | 0      | u8      | version ({@link REMOTE_TOKEN_VERSION})                                   |
 * | 1      | u8      | access: bit 0 remote read, bit 1 remote write ({@link TokenAccess})      |
 * | 2      | u16     | connection tag (streams: the owner's; 0 here)                            |
 * | 4      | u32     | id of the exposure (streams: for revocation; 0 here)                     |
 * | 8      | u64     | address of the first byte, as the peer's work requests name it (iova)    |
 * | 16     | u32     | rkey                                                                     |
 * | 20     | u32     | the owner's QP number (0: not bound to a connection)                     |
 * | 24     | u64     | length in bytes                                                          |
 *
 * A token grants what the registration grants, to whoever holds it and has a QP on the same
 * PD's device connection: treat it like a capability. Closing the MR revokes it: a work request
 * that uses it afterwards fails at the peer with `IBV_WC_REM_ACCESS_ERR`, which moves that
 * peer's RC QP to the error state.
 *
 * @module
 */

import { AccessFlags, WrOpcode } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { describe } from "../types/check.ts";
import { isInstance } from "../ffi/resource.ts";
import type { WaitOptions } from "../poller/wait.ts";
import type { CompletionRecord } from "../poller/tracker.ts";
import type { MemoryRegion } from "./mr.ts";
import type { QueuePair } from "./qp.ts";
import type { Remote, Sge } from "./wr.ts";

/** Size of a remote-memory token in bytes. */
export const REMOTE_TOKEN_SIZE = 32;
/** The token layout version this library writes and reads. */
export const REMOTE_TOKEN_VERSION = 1;

/** The access bits of a token. */
export const TokenAccess: {
  /** The peer may RDMA READ the memory. */
  readonly READ: 1;
  /** The peer may RDMA WRITE the memory. */
  readonly WRITE: 2;
} = Object.freeze(
  {
    /** The peer may RDMA READ the memory. */
    READ: 1,
    /** The peer may RDMA WRITE the memory. */
    WRITE: 2,
  } as const,
);

/** The fields of a token. */
export interface TokenFields {
  /** {@link TokenAccess} bits. */
  readonly access: number;
  /** Connection tag (0: none). */
  readonly tag: number;
  /** Exposure id (0: none). */
  readonly id: number;
  /** Address of the first byte as the peer names it (below 2^53). */
  readonly addr: number;
  /** rkey. */
  readonly rkey: number;
  /** The owner's QP number (0: any). */
  readonly qpNum: number;
  /** Length in bytes. */
  readonly length: number;
}

function setU53(v: DataView, at: number, value: number): void {
  v.setUint32(at, Math.floor(value / 0x1_0000_0000) >>> 0, false);
  v.setUint32(at + 4, value >>> 0, false);
}

function getU53(v: DataView, at: number): number {
  const hi = v.getUint32(at, false);
  if (hi >= 0x200000) return -1;
  return hi * 0x1_0000_0000 + v.getUint32(at + 4, false);
}

/** Encodes token fields into {@link REMOTE_TOKEN_SIZE} bytes (see the module for the layout). */
export function encodeToken(f: TokenFields): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(REMOTE_TOKEN_SIZE);
  const v = new DataView(out.buffer);
  v.setUint8(0, REMOTE_TOKEN_VERSION);
  v.setUint8(1, f.access & 3);
  v.setUint16(2, f.tag & 0xffff, false);
  v.setUint32(4, f.id >>> 0, false);
  setU53(v, 8, f.addr);
  v.setUint32(16, f.rkey >>> 0, false);
  v.setUint32(20, f.qpNum >>> 0, false);
  setU53(v, 24, f.length);
  return out;
}

/**
 * Decodes a token; throws `InvalidArgumentError` (naming the problem) when it is not one this
 * library can use: another size or version, unknown access bits, a range past 2^53.
 */
export function decodeToken(token: Uint8Array): TokenFields {
  if (!(token instanceof Uint8Array)) {
    throw new InvalidArgumentError(`a token is a Uint8Array, got ${describe(token)}`);
  }
  if (token.length !== REMOTE_TOKEN_SIZE) {
    throw new InvalidArgumentError(
      `a token has ${REMOTE_TOKEN_SIZE} bytes, this one ${token.length}`,
    );
  }
  const v = new DataView(token.buffer, token.byteOffset, REMOTE_TOKEN_SIZE);
  const version = v.getUint8(0);
  if (version !== REMOTE_TOKEN_VERSION) {
    throw new InvalidArgumentError(
      `token version ${version} is not supported (only ${REMOTE_TOKEN_VERSION})`,
    );
  }
  const access = v.getUint8(1);
  if ((access & ~3) !== 0) {
    throw new InvalidArgumentError(`token access bits 0x${access.toString(16)} are unknown`);
  }
  const addr = getU53(v, 8);
  const length = getU53(v, 24);
  if (addr < 0 || length < 0 || addr + length > Number.MAX_SAFE_INTEGER) {
    throw new InvalidArgumentError("the token's address range does not fit in 53 bits");
  }
  return {
    access,
    tag: v.getUint16(2, false),
    id: v.getUint32(4, false),
    addr,
    rkey: v.getUint32(16, false),
    qpNum: v.getUint32(20, false),
    length,
  };
}

/** The token of `[offset, offset + length)` of `mr` (module-private: `mr.token()`). */
export function memoryToken(
  mr: MemoryRegion,
  offset = 0,
  length?: number,
): Uint8Array<ArrayBuffer> {
  const r = mr.remote(offset, length);
  const a = mr.access;
  const access = ((a & AccessFlags.REMOTE_READ) !== 0 ? TokenAccess.READ : 0) |
    ((a & AccessFlags.REMOTE_WRITE) !== 0 ? TokenAccess.WRITE : 0);
  if (access === 0) {
    throw new InvalidArgumentError(
      "the MR grants no remote access: register it with AccessFlags.REMOTE_READ and/or REMOTE_WRITE",
    );
  }
  const addr = Number(r.addr);
  if (!Number.isSafeInteger(addr + r.length)) {
    throw new InvalidArgumentError("the MR's iova range does not fit in 53 bits");
  }
  return encodeToken({ access, tag: 0, id: 0, addr, rkey: r.rkey, qpNum: 0, length: r.length });
}

/**
 * Another process's registered memory, from its token: bounds and access are checked before a
 * work request is posted; `write`/`read` post RDMA WRITE/READ on a connected RC QP and resolve
 * with the completion.
 */
export class RemoteMemory {
  /** Address of the first byte (as the owner's device names it). */
  readonly addr: number;
  /** rkey. */
  readonly rkey: number;
  /** Length in bytes. */
  readonly length: number;
  /** The owner allows RDMA READ. */
  readonly readable: boolean;
  /** The owner allows RDMA WRITE. */
  readonly writable: boolean;
  /** The token's fields. */
  readonly fields: TokenFields;

  private constructor(f: TokenFields) {
    this.fields = f;
    this.addr = f.addr;
    this.rkey = f.rkey;
    this.length = f.length;
    this.readable = (f.access & TokenAccess.READ) !== 0;
    this.writable = (f.access & TokenAccess.WRITE) !== 0;
  }

  /** The remote memory a token names (see the module for its layout). */
  static from(token: Uint8Array): RemoteMemory {
    return new RemoteMemory(decodeToken(token));
  }

  /**
   * The `remote` of a work request for `[offset, offset + length)`; throws
   * `InvalidArgumentError` when the range is outside the memory.
   */
  at(offset = 0, length = 1): Remote {
    if (
      !Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0
    ) {
      throw new InvalidArgumentError(
        `remote range ${describe(offset)}+${describe(length)} must be non-negative integers`,
      );
    }
    if (offset + length > this.length) {
      throw new InvalidArgumentError(
        `remote range ${offset}+${length} is outside the remote memory (${this.length} bytes)`,
      );
    }
    return { addr: this.addr + offset, rkey: this.rkey };
  }

  /**
   * RDMA WRITE of the local bytes `local` (an MR, or an SGE of one) to `offset` here, on `qp`;
   * resolves with the completion.
   */
  write(
    qp: QueuePair,
    local: MemoryRegion | Sge,
    offset = 0,
    options?: WaitOptions,
  ): Promise<CompletionRecord> {
    return this.#post(qp, WrOpcode.RDMA_WRITE, local, offset, options);
  }

  /**
   * RDMA READ from `offset` here into the local bytes `local` (an MR with local write, or an
   * SGE of one), on `qp` (connected with an initiator depth of at least 1); resolves with the
   * completion.
   */
  read(
    qp: QueuePair,
    local: MemoryRegion | Sge,
    offset = 0,
    options?: WaitOptions,
  ): Promise<CompletionRecord> {
    return this.#post(qp, WrOpcode.RDMA_READ, local, offset, options);
  }

  /** `write` and `read`: checks access and bounds, then posts; a refusal rejects, never throws. */
  #post(
    qp: QueuePair,
    opcode: typeof WrOpcode.RDMA_WRITE | typeof WrOpcode.RDMA_READ,
    local: MemoryRegion | Sge,
    offset: number,
    options: WaitOptions | undefined,
  ): Promise<CompletionRecord> {
    try {
      const read = opcode === WrOpcode.RDMA_READ;
      if (!(read ? this.readable : this.writable)) {
        throw new InvalidArgumentError(
          `the token does not grant remote ${read ? "read" : "write"}`,
        );
      }
      const sge = toSge(local);
      const remote = this.at(offset, sge.length);
      return qp.send({ opcode, remote, sg: [sge] }, options);
    } catch (e) {
      return Promise.reject(e);
    }
  }
}

function toSge(local: MemoryRegion | Sge): Sge & { readonly length: number } {
  if (typeof local !== "object" || local === null) {
    throw new InvalidArgumentError(`local memory must be an MR or an SGE, got ${describe(local)}`);
  }
  if ("mr" in local) {
    const offset = local.offset ?? 0;
    if (!Number.isSafeInteger(offset) || offset < 0) {
      throw new InvalidArgumentError(
        `the local SGE's offset must be a non-negative integer, got ${describe(offset)}`,
      );
    }
    const mrLength = isInstance<MemoryRegion>(local.mr, "MemoryRegion") ? local.mr.length : 0;
    return { mr: local.mr, offset, length: local.length ?? mrLength - offset };
  }
  return { mr: local, offset: 0, length: local.length };
}
