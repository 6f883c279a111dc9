/**
 * Memory regions: registered memory, either owned native buffers exposed
 * zero-copy as `Uint8Array`, or caller-provided typed arrays.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { AccessFlags, flagNames } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { layoutFor } from "../types/layout.ts";
import { throwReturned } from "../ffi/errors.ts";
import { Resource } from "./resource.ts";
import type { ProtectionDomain } from "./pd.ts";

/** Where a peer may read or write: an address and the rkey that grants it. */
export interface RemoteAddress {
  /** Remote virtual address. */
  readonly addr: bigint;
  /** Remote key of the MR or MW. */
  readonly rkey: number;
  /** Bytes available from `addr`. */
  readonly length: number;
}

/** Options of a memory registration. */
export interface RegisterOptions {
  /**
   * `AccessFlags` bits. Default: `LOCAL_WRITE` only (least privilege). Remote read,
   * write, atomic and MW bind are granted only when asked for; remote write and
   * atomic require local write, as the verbs specification does.
   */
  readonly access?: number;
}

/** Checks an access mask the way the verbs spec does, before the provider sees it. */
export function checkAccess(access: number): number {
  if (!Number.isInteger(access) || access < 0) {
    throw new InvalidArgumentError(`access must be AccessFlags bits, got ${access}`);
  }
  const needsLocalWrite = AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_ATOMIC;
  if ((access & needsLocalWrite) !== 0 && (access & AccessFlags.LOCAL_WRITE) === 0) {
    throw new InvalidArgumentError(
      `access ${flagNames(AccessFlags, access, "IBV_ACCESS_").join("|")}: ` +
        "remote write and remote atomic require IBV_ACCESS_LOCAL_WRITE",
    );
  }
  return access;
}

/**
 * A registered memory region. `buffer` views the registered bytes zero-copy.
 * Caller-provided memory ({@link ProtectionDomain.registerMemory}) must stay
 * alive, unmoved and unresized while registered: the MR keeps a reference to the
 * array, never pass a resizable or transferable buffer.
 */
export class MemoryRegion extends Resource {
  /** The `struct ibv_mr *`. */
  readonly ptr: NativePointer;
  /** The PD it belongs to. */
  readonly pd: ProtectionDomain;
  /** Start address (also the iova) as a number (exact: user addresses are below 2^53). */
  readonly addrNumber: number;
  /** Length in bytes. */
  readonly length: number;
  /** Local key. */
  readonly lkey: number;
  /** Remote key. */
  readonly rkey: number;
  /** The granted `AccessFlags`. */
  readonly access: number;
  /** The registered bytes. */
  readonly buffer: Uint8Array;
  readonly #owned: NativePointer | null;

  /** Registers `length` bytes at `addr`; prefer the PD's `allocBuffer`/`registerMemory`. */
  constructor(
    pd: ProtectionDomain,
    addr: NativePointer,
    buffer: Uint8Array,
    access: number,
    owned: boolean,
  ) {
    checkAccess(access);
    const n = native();
    const mr = n.ibverbs.ibv_reg_mr_iova2(pd.ptr, addr, buffer.byteLength, n.address(addr), access);
    if (mr === null) {
      const errno = n.errno();
      if (owned) n.free(addr);
      throwReturned("ibv_reg_mr", errno, `${buffer.byteLength} bytes`);
    }
    super("MemoryRegion", [pd]);
    const L = layoutFor(n.arch).ibv_mr.fields;
    const view = new DataView(n.arrayBuffer(mr, layoutFor(n.arch).ibv_mr.size));
    this.ptr = mr;
    this.pd = pd;
    this.addrNumber = Number(view.getBigUint64(L.addr.offset, true));
    this.length = buffer.byteLength;
    this.lkey = view.getUint32(L.lkey.offset, true);
    this.rkey = view.getUint32(L.rkey.offset, true);
    this.access = access;
    this.buffer = buffer;
    this.#owned = owned ? addr : null;
  }

  /** The start address as a bigint. */
  get addr(): bigint {
    return BigInt(this.addrNumber);
  }

  /** What a peer needs to access `[offset, offset + length)` of this MR remotely. */
  remote(offset = 0, length: number = this.length - offset): RemoteAddress {
    if (offset < 0 || length < 0 || offset + length > this.length) {
      throw new InvalidArgumentError(
        `range ${offset}+${length} is outside the MR (${this.length})`,
      );
    }
    return { addr: BigInt(this.addrNumber + offset), rkey: this.rkey, length };
  }

  protected destroy(): void {
    const n = native();
    const rc = n.ibverbs.ibv_dereg_mr(this.ptr);
    const errno = n.errno();
    if (this.#owned) n.free(this.#owned);
    if (rc !== 0) throwReturned("ibv_dereg_mr", errno || rc);
  }
}

/** Throws unless the MR is registered on `pd`. */
export function checkSamePd(mr: MemoryRegion, pd: ProtectionDomain, what: string): void {
  mr.assertOpen();
  if (mr.pd !== pd) throw new InvalidArgumentError(`${what}: the MR belongs to another PD`);
}
