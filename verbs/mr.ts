/**
 * Memory regions: registered memory, either owned native buffers exposed
 * zero-copy as `Uint8Array`, or caller-provided typed arrays.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { AccessFlags, flagNames } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { nativeError, throwReturned } from "../ffi/errors.ts";
import type { NativeBlock } from "../ffi/memory.ts";
import { Errno } from "../types/errno.ts";
import { NativeResource } from "../ffi/resource.ts";
import type { ProtectionDomain } from "./pd.ts";
import { isU64, type Sge, type U64 } from "./wr.ts";
import { checkInteger, describe } from "../types/check.ts";

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
   * The I/O virtual address peers use for the first byte (`ibv_reg_mr_iova2`); default: the
   * buffer's own address. `mr.remote()` reports addresses from it.
   */
  readonly iova?: U64;
  /**
   * `AccessFlags` bits. Default: `LOCAL_WRITE` only (least privilege). Remote read,
   * write, atomic and MW bind are granted only when asked for; remote write and
   * atomic require local write, as the verbs specification does.
   */
  readonly access?: number;
}

/** Checks an access mask the way the verbs spec does, before the provider sees it. */
export function checkAccess(access: number): number {
  checkInteger("access (AccessFlags bits)", access, 0, 0x7fffffff);
  const needsLocalWrite = AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_ATOMIC;
  if ((access & needsLocalWrite) !== 0 && (access & AccessFlags.LOCAL_WRITE) === 0) {
    throw new InvalidArgumentError(
      `access ${flagNames(AccessFlags, access, "IBV_ACCESS_").join("|")}: ` +
        "remote write and remote atomic require IBV_ACCESS_LOCAL_WRITE",
    );
  }
  return access;
}

/** The memory an MR registers: an owned native block, or a caller's typed array. */
type Backing = { readonly block: NativeBlock } | { readonly array: Uint8Array };

const construct = Symbol("MemoryRegion");
let holdOf: (mr: MemoryRegion, delta: number) => void;

/**
 * A registered memory region. `buffer` views the registered bytes zero-copy. Memory the library
 * allocated ({@link ProtectionDomain.allocBuffer}) is freed by `close()`, and `buffer` is
 * detached then (length 0): it never reads freed memory. Caller-provided memory
 * ({@link ProtectionDomain.registerMemory}) must stay alive, unmoved and unresized while
 * registered: the MR keeps a reference to the array; never pass a resizable or transferable
 * buffer.
 *
 * A buffer must stay registered until every work request using it has completed. The MR
 * enforces this for the work requests it can see: while `qp.send()`/`qp.recv()` promises that
 * use it are pending, `close()` throws InvalidArgumentError (closing its PD or context still
 * closes it, after their QPs). Work requests posted with `postSend`/`postRecv` are the
 * caller's to wait for; an MR closed under one makes it complete with an error
 * (`IBV_WC_LOC_PROT_ERR` or a flush), never touch freed memory: `ibv_dereg_mr` returns only
 * once the device stopped using the region.
 */
export class MemoryRegion extends NativeResource {
  /** The `struct ibv_mr *`. */
  readonly ptr: NativePointer;
  /** The PD it belongs to. */
  readonly pd: ProtectionDomain;
  /** Start address in this process as a number (exact: user addresses are below 2^53). */
  readonly addrNumber: number;
  /** The I/O virtual address peers use for the first byte (the start address unless chosen). */
  readonly iova: bigint;
  /** Length in bytes. */
  readonly length: number;
  /** Local key. */
  readonly lkey: number;
  /** Remote key. */
  readonly rkey: number;
  /** The granted `AccessFlags`. */
  readonly access: number;
  /** The registered bytes (detached once closed, when the library owns the memory). */
  readonly buffer: Uint8Array;
  readonly #block: NativeBlock | null;
  #held = 0;

  static {
    holdOf = (mr, delta) => {
      mr.#held += delta;
    };
  }

  /** Not for direct use: `pd.allocBuffer()` and `pd.registerMemory()` make MRs. */
  constructor(
    pd: ProtectionDomain,
    backing: Backing,
    access: number,
    iova: U64 | undefined,
    token: symbol,
  ) {
    if (token !== construct) {
      throw new InvalidArgumentError("MRs are made by pd.allocBuffer() or pd.registerMemory()");
    }
    const block = "block" in backing ? backing.block : null;
    const buffer = block ? block.bytes : (backing as { array: Uint8Array }).array;
    try {
      checkAccess(access);
      if (iova !== undefined && !isU64(iova)) {
        throw new InvalidArgumentError(`iova must be a bigint or a non-negative safe integer`);
      }
    } catch (e) {
      block?.free();
      throw e;
    }
    const n = native();
    const addr = block ? block.ptr : n.pointerOf(buffer);
    const mr = n.ibverbs.ibv_reg_mr_iova2(
      pd.ptr,
      addr,
      buffer.byteLength,
      iova ?? n.address(addr),
      access,
    );
    if (mr === null) {
      const errno = n.errno();
      block?.free();
      throw memlockAware(errno, buffer.byteLength);
    }
    super("MemoryRegion", [pd]);
    const L = layouts().ibv_mr;
    const view = new DataView(n.arrayBuffer(mr, L.size));
    this.ptr = mr;
    this.pd = pd;
    this.addrNumber = Number(n.address(addr));
    this.iova = BigInt(iova ?? this.addrNumber);
    this.length = buffer.byteLength;
    this.lkey = view.getUint32(L.fields.lkey.offset, true);
    this.rkey = view.getUint32(L.fields.rkey.offset, true);
    this.access = access;
    this.buffer = buffer;
    this.#block = block;
  }

  /** The start address in this process as a bigint. */
  get addr(): bigint {
    return BigInt(this.addrNumber);
  }

  /** What a peer needs to access `[offset, offset + length)` of this MR remotely (at its iova). */
  remote(offset = 0, length?: number): RemoteAddress {
    checkInteger("offset", offset, 0, this.length);
    length ??= this.length - offset;
    if (!Number.isSafeInteger(length) || length < 0 || offset + length > this.length) {
      throw new InvalidArgumentError(
        `range ${describe(offset)}+${describe(length)} is outside the MR (${this.length})`,
      );
    }
    return { addr: this.iova + BigInt(offset), rkey: this.rkey, length };
  }

  /** Refuses a direct `close()` while tracked work requests use the memory. */
  protected override closeRefusal(): string | null {
    return this.#held > 0
      ? `${this.#held} tracked work request(s) still use this MR: await them (or close their QP) first`
      : null;
  }

  /** Releases the native object (called once by `close()`). */
  protected destroy(): void {
    const n = native();
    const rc = n.ibverbs.ibv_dereg_mr(this.ptr);
    const errno = n.errno();
    if (this.#block) this.#block.free(); // detaches `buffer`
    if (rc !== 0) throwReturned("ibv_dereg_mr", errno || rc);
  }
}

/** Registers library-owned memory (module-private: `pd.allocBuffer`). */
export function registerBlock(
  pd: ProtectionDomain,
  block: NativeBlock,
  access: number,
  iova?: U64,
): MemoryRegion {
  return new MemoryRegion(pd, { block }, access, iova, construct);
}

/** Registers a caller's array (module-private: `pd.registerMemory`). */
export function registerArray(
  pd: ProtectionDomain,
  array: Uint8Array,
  access: number,
  iova?: U64,
): MemoryRegion {
  return new MemoryRegion(pd, { array }, access, iova, construct);
}

/**
 * Holds the MRs of `sg` until the returned function runs (module-private: tracked WRs): while
 * held an MR refuses a direct `close()`.
 */
export function holdMemory(sg: readonly Sge[] | undefined): () => void {
  if (!sg || sg.length === 0) return () => {};
  const mrs = sg.map((s) => s.mr);
  for (const mr of mrs) holdOf(mr, 1);
  let done = false;
  return () => {
    if (done) return;
    done = true;
    for (const mr of mrs) holdOf(mr, -1);
  };
}

/** The error of a failed registration; ENOMEM/EAGAIN name the locked-memory limit. */
function memlockAware(errno: number, bytes: number): Error {
  const base = nativeError("ibv_reg_mr", errno, `${bytes} bytes`);
  if (errno !== Errno.ENOMEM && errno !== Errno.EAGAIN && errno !== Errno.EPERM) return base;
  base.message += ". Registered memory is pinned and counts against RLIMIT_MEMLOCK " +
    "(`ulimit -l`): raise it (e.g. `ulimit -l unlimited` as root, `LimitMEMLOCK=infinity` " +
    "for a systemd service, or `* - memlock unlimited` in /etc/security/limits.conf)";
  return base;
}

/** Throws unless the MR is registered on `pd`. */
export function checkSamePd(mr: MemoryRegion, pd: ProtectionDomain, what: string): void {
  mr.assertOpen();
  if (mr.pd !== pd) throw new InvalidArgumentError(`${what}: the MR belongs to another PD`);
}
