/**
 * Memory regions: registered memory, either owned native buffers exposed
 * zero-copy as `Uint8Array`, or caller-provided typed arrays.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import {
  AccessFlags,
  enumName,
  flagNames,
  OdpGeneralCaps,
  ReregMrErrCode,
  ReregMrFlags,
} from "../types/enums.ts";
import { InvalidArgumentError, UnsupportedError } from "../types/errors.ts";
import { nativeError, strerror, throwReturned } from "../ffi/errors.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import type { NativeBlock } from "../ffi/memory.ts";
import { Errno } from "../types/errno.ts";
import { checkConstruct, CONSTRUCT, NativeResource } from "../ffi/resource.ts";
import type { ProtectionDomain } from "./pd.ts";
import { isU64, type Sge, type U64 } from "./wr.ts";
import { checkInteger, describe } from "../types/check.ts";
import { memoryToken } from "./remote-memory.ts";

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

/**
 * The memory an MR registers: an owned native block, a caller's typed array, a dma-buf (by fd),
 * or nothing (`ibv_alloc_null_mr`).
 */
type Backing =
  | { readonly block: NativeBlock }
  | { readonly array: Uint8Array }
  | { readonly dmabuf: DmabufRange }
  | { readonly nullMr: true };

/** A range of a dma-buf to register (`ibv_reg_dmabuf_mr`). */
export interface DmabufRange {
  /** The dma-buf file descriptor (stays the caller's: the MR does not close it). */
  readonly fd: number;
  /** Offset of the range in the dma-buf (default 0). */
  readonly offset?: U64;
  /** Bytes to register. */
  readonly length: number;
  /** The I/O virtual address of the first byte: local SGEs and peers use it (default 0). */
  readonly iova?: U64;
}

/** What `mr.rereg()` changes (`ibv_rereg_mr`); at least one field. */
export interface ReregOptions {
  /** New `AccessFlags` (`IBV_REREG_MR_CHANGE_ACCESS`). */
  readonly access?: number;
  /**
   * New memory (`IBV_REREG_MR_CHANGE_TRANSLATION`): a caller's array, same rules as
   * `pd.registerMemory`. Library-owned memory of the MR is freed once the new one is in place.
   */
  readonly memory?: Uint8Array;
}

/** The length of a null MR: any SGE length (it reads zeros and drops writes). */
const NULL_MR_LENGTH = 0xffffffff;

/** How many tracked work requests use each MR (module-private: `holdMemory`). */
const holds = new WeakMap<MemoryRegion, number>();

/**
 * A registered memory region. `buffer` views the registered bytes zero-copy. Memory the library
 * allocated ({@link ProtectionDomain.allocBuffer}) is freed by `close()`, and `buffer` is
 * detached then (length 0): it never reads freed memory. Caller-provided memory
 * ({@link ProtectionDomain.registerMemory}) must stay alive, unmoved and unresized while
 * registered: the MR keeps a reference to the array; never pass a resizable or transferable
 * buffer. A dma-buf or null MR has no `buffer` (length 0); its SGE addresses are I/O virtual
 * addresses (`addrNumber` is the dma-buf's iova, 0 for a null MR).
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
  #addrNumber: number;
  #iova: bigint;
  #length: number;
  #lkey: number;
  #rkey: number;
  #access: number;
  #buffer: Uint8Array;
  #block: NativeBlock | null;

  /** Not for direct use: `pd.allocBuffer()`, `pd.registerMemory()` and kin make MRs. */
  constructor(
    pd: ProtectionDomain,
    backing: Backing,
    access: number,
    iova: U64 | undefined,
    token: symbol,
  ) {
    checkConstruct(token, "MRs are made by pd.allocBuffer() or pd.registerMemory()");
    const block = "block" in backing ? backing.block : null;
    const buffer = block ? block.bytes : "array" in backing ? backing.array : new Uint8Array(0);
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
    let mr: NativePointer | null;
    let addrNumber: number, length: number, va: bigint;
    if ("dmabuf" in backing) {
      const d = backing.dmabuf;
      va = BigInt(d.iova ?? 0);
      addrNumber = Number(va);
      length = d.length;
      const reg = n.ibverbs.ibv_reg_dmabuf_mr;
      if (!reg) throw nativeError("ibv_reg_dmabuf_mr", Errno.EOPNOTSUPP, "libibverbs lacks it");
      n.setErrno(0);
      mr = reg(pd.ptr, d.offset ?? 0, d.length, d.iova ?? 0, d.fd, access);
      if (mr === null) {
        throw odpAware(
          pd,
          "ibv_reg_dmabuf_mr",
          n.errno(),
          access,
          `${pd.context.deviceName}, fd ${d.fd}, ${d.length} bytes`,
        );
      }
    } else if ("nullMr" in backing) {
      va = 0n;
      addrNumber = 0;
      length = NULL_MR_LENGTH;
      const fn = pd.context.extendedOp("alloc_null_mr");
      if (!fn) throw nativeError("ibv_alloc_null_mr", Errno.EOPNOTSUPP, "no extended context");
      n.setErrno(0);
      mr = n.fnPointer(fn, IBVERBS_OPS.alloc_null_mr)(pd.ptr);
      if (mr === null) {
        throw nativeError(
          "ibv_alloc_null_mr",
          n.errno() || Errno.EOPNOTSUPP,
          pd.context.deviceName,
        );
      }
    } else {
      const addr = block ? block.ptr : n.pointerOf(buffer);
      addrNumber = Number(n.address(addr));
      length = buffer.byteLength;
      va = BigInt(iova ?? addrNumber);
      mr = n.ibverbs.ibv_reg_mr_iova2(pd.ptr, addr, length, iova ?? n.address(addr), access);
      if (mr === null) {
        const errno = n.errno();
        block?.free();
        throw (access & AccessFlags.ON_DEMAND) !== 0
          ? odpAware(pd, "ibv_reg_mr", errno, access, `${pd.context.deviceName}, ${length} bytes`)
          : memlockAware(errno, length);
      }
    }
    super("MemoryRegion", [pd]);
    const L = layouts().ibv_mr;
    const view = new DataView(n.arrayBuffer(mr, L.size));
    this.ptr = mr;
    this.pd = pd;
    this.#addrNumber = addrNumber;
    this.#iova = va;
    this.#length = length;
    this.#lkey = view.getUint32(L.fields.lkey.offset, true);
    this.#rkey = view.getUint32(L.fields.rkey.offset, true);
    this.#access = access;
    this.#buffer = buffer;
    this.#block = block;
  }

  /** Start address in this process as a number (exact: user addresses are below 2^53). */
  get addrNumber(): number {
    return this.#addrNumber;
  }

  /** The I/O virtual address peers use for the first byte (the start address unless chosen). */
  get iova(): bigint {
    return this.#iova;
  }

  /** Length in bytes. */
  get length(): number {
    return this.#length;
  }

  /** Local key. */
  get lkey(): number {
    return this.#lkey;
  }

  /** Remote key. */
  get rkey(): number {
    return this.#rkey;
  }

  /** The granted `AccessFlags`. */
  get access(): number {
    return this.#access;
  }

  /** The registered bytes (detached once closed, when the library owns the memory). */
  get buffer(): Uint8Array {
    return this.#buffer;
  }

  /** The start address in this process as a bigint. */
  get addr(): bigint {
    return BigInt(this.#addrNumber);
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

  /**
   * A token a peer turns into `RemoteMemory.from(token)` to RDMA READ/WRITE
   * `[offset, offset + length)` of this MR (32 bytes; layout in verbs/remote-memory.ts).
   */
  token(offset = 0, length?: number): Uint8Array<ArrayBuffer> {
    this.assertOpen();
    return memoryToken(this, offset, length);
  }

  /**
   * `ibv_rereg_mr`: changes the access rights and/or the memory of the registration in place
   * (the keys may change; read them again). Refused while tracked work requests use the MR.
   * Providers without it (soft-RoCE, soft-iWARP) raise UnsupportedError and leave the MR as
   * it was.
   */
  rereg(options: ReregOptions): void {
    this.assertOpen();
    if (typeof options !== "object" || options === null) {
      throw new InvalidArgumentError("rereg options must be an object");
    }
    const refusal = this.closeRefusal();
    if (refusal !== null) throw new InvalidArgumentError(`rereg: ${refusal}`);
    let flags = 0;
    let access = this.#access;
    if (options.access !== undefined) {
      access = checkAccess(options.access);
      flags |= ReregMrFlags.CHANGE_ACCESS;
    }
    const memory = options.memory;
    if (memory !== undefined) {
      if (!(memory instanceof Uint8Array) || memory.byteLength === 0) {
        throw new InvalidArgumentError("rereg: memory must be a non-empty Uint8Array");
      }
      const b = memory.buffer as ArrayBuffer & { resizable?: boolean; growable?: boolean };
      if (b.resizable || b.growable) {
        throw new InvalidArgumentError("rereg: cannot register a resizable or growable buffer");
      }
      flags |= ReregMrFlags.CHANGE_TRANSLATION;
    }
    if (flags === 0) throw new InvalidArgumentError("rereg: give access and/or memory");
    const n = native();
    const addr = memory ? n.pointerOf(memory) : null;
    n.setErrno(0);
    // libibverbs wants access 0 unless it changes
    const rc = n.ibverbs.ibv_rereg_mr(
      this.ptr,
      flags,
      null,
      addr,
      memory?.byteLength ?? 0,
      (flags & ReregMrFlags.CHANGE_ACCESS) !== 0 ? access : 0,
    );
    if (rc !== 0) {
      const errno = n.errno();
      throw nativeError(
        "ibv_rereg_mr",
        errno || Errno.EINVAL,
        `${enumName(ReregMrErrCode, rc, "IBV_REREG_MR_ERR_")}, ${this.pd.context.deviceName}`,
      );
    }
    const L = layouts().ibv_mr;
    const view = new DataView(n.arrayBuffer(this.ptr, L.size));
    this.#lkey = view.getUint32(L.fields.lkey.offset, true);
    this.#rkey = view.getUint32(L.fields.rkey.offset, true);
    this.#access = access;
    if (memory && addr) {
      const old = this.#block;
      this.#addrNumber = Number(n.address(addr));
      this.#iova = BigInt(this.#addrNumber);
      this.#length = memory.byteLength;
      this.#buffer = memory;
      this.#block = null;
      old?.free();
    }
  }

  /** Refuses a direct `close()` while tracked work requests use the memory. */
  protected override closeRefusal(): string | null {
    const held = holds.get(this) ?? 0;
    return held > 0
      ? `${held} tracked work request(s) still use this MR: await them (or close their QP) first`
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

/** Registers a dma-buf range (module-private: `pd.registerDmabuf`). */
export function registerDmabuf(
  pd: ProtectionDomain,
  range: DmabufRange,
  access: number,
): MemoryRegion {
  return new MemoryRegion(pd, { dmabuf: range }, access, undefined, CONSTRUCT);
}

/** `ibv_alloc_null_mr` (module-private: `pd.allocNullMr`). */
export function allocNullMr(pd: ProtectionDomain): MemoryRegion {
  return new MemoryRegion(pd, { nullMr: true }, AccessFlags.LOCAL_WRITE, undefined, CONSTRUCT);
}

/**
 * The error of a registration that asked for on-demand paging: on a device whose
 * `odp_caps.general_caps` lacks `IBV_ODP_SUPPORT`, an UnsupportedError naming the device and
 * the errno the provider returned (soft-RoCE and soft-iWARP on Linux 6.1 answer EINVAL).
 */
function odpAware(
  pd: ProtectionDomain,
  op: string,
  errno: number,
  access: number,
  context: string,
): Error {
  if ((access & AccessFlags.ON_DEMAND) === 0) return nativeError(op, errno, context);
  let odp = true;
  try {
    odp = (pd.context.queryDeviceEx().odpCaps.generalCaps & BigInt(OdpGeneralCaps.SUPPORT)) !== 0n;
  } catch {
    // keep the provider's answer
  }
  if (odp) return nativeError(op, errno, context);
  return new UnsupportedError(
    op,
    errno,
    strerror(errno),
    `${context}: ${pd.context.deviceName} has no on-demand paging (odp_caps.general_caps lacks IBV_ODP_SUPPORT)`,
  );
}

/** Registers library-owned memory (module-private: `pd.allocBuffer`). */
export function registerBlock(
  pd: ProtectionDomain,
  block: NativeBlock,
  access: number,
  iova?: U64,
): MemoryRegion {
  return new MemoryRegion(pd, { block }, access, iova, CONSTRUCT);
}

/** Registers a caller's array (module-private: `pd.registerMemory`). */
export function registerArray(
  pd: ProtectionDomain,
  array: Uint8Array,
  access: number,
  iova?: U64,
): MemoryRegion {
  return new MemoryRegion(pd, { array }, access, iova, CONSTRUCT);
}

/**
 * Holds the MRs of `sg` until the returned function runs (module-private: tracked WRs): while
 * held an MR refuses a direct `close()`.
 */
export function holdMemory(sg: readonly Sge[] | undefined): () => void {
  if (!sg || sg.length === 0) return () => {};
  const mrs = sg.map((s) => s.mr);
  const hold = (mr: MemoryRegion, delta: number) => holds.set(mr, (holds.get(mr) ?? 0) + delta);
  for (const mr of mrs) hold(mr, 1);
  let done = false;
  return () => {
    if (done) return;
    done = true;
    for (const mr of mrs) hold(mr, -1);
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
