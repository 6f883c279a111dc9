/**
 * The `Native` interface: everything the upper layers may ask of the runtime.
 * One loader per runtime implements it (`ffi/deno.ts`, `ffi/bun.ts`); nothing
 * outside `ffi/` knows which runtime it is on.
 *
 * @module
 */

import type {
  ArgValues,
  BoundFunction,
  BoundLibrary,
  FunctionSpec,
  Int64,
  NativePointer,
  Pointer,
  ResultValue,
} from "./ctypes.ts";
import type { IBVERBS } from "./symbols/ibverbs.ts";
import type { RDMACM } from "./symbols/rdmacm.ts";
import type { LIBC } from "./symbols/libc.ts";

/** How function pointers (the inline verbs) are called on this runtime. */
export type FnPointerPath = "CFunction" | "trampoline" | "libffi" | "UnsafeFnPointer";

/**
 * A call to one function pointer with its arguments fixed in advance, so that the
 * hot path (post a prepared WR, poll a CQ) is one FFI call that allocates nothing.
 */
export interface PreparedCall<S extends FunctionSpec> {
  /** Calls the function with the current arguments. */
  call(): ResultValue<S["result"]>;
  /**
   * Calls until the (integer) result is not 0, at most `tries` (1 or more) times, and returns the last
   * result: a busy poll. Where the loader can, the tries loop in native code (one FFI call);
   * elsewhere they are `tries` calls.
   */
  retry(tries: number): ResultValue<S["result"]>;
  /** True when {@link PreparedCall.retry}'s tries loop in native code (one FFI call). */
  readonly nativeRetry: boolean;
  /** Replaces one integer or pointer argument for later calls. */
  setArg(index: number, value: ArgValues<S["args"]>[number]): void;
  /** Releases the native argument block (idempotent). */
  free(): void;
}

/** The runtime services that the type-neutral layers are written against. */
export interface Native {
  /** The runtime this loader serves. */
  readonly runtime: "deno" | "bun";
  /** CPU architecture, as used by the layout tables (`x86_64`, `aarch64`). */
  readonly arch: string;
  /** How function pointers are called on this runtime. */
  readonly fnPointerPath: FnPointerPath;
  /** libibverbs, opened on first use. */
  readonly ibverbs: BoundLibrary<typeof IBVERBS>;
  /** librdmacm, opened on first use. */
  readonly rdmacm: BoundLibrary<typeof RDMACM>;
  /** The libc calls this library needs. */
  readonly libc: BoundLibrary<typeof LIBC>;

  /** The calling thread's errno; read it right after a failing synchronous call. */
  errno(): number;
  /** Sets errno (to 0 before calls that may fail without setting it). */
  setErrno(value: number): void;

  /** The address of a pointer as a bigint (0n for NULL). */
  address(p: Pointer): bigint;
  /** A pointer from an address (NULL for 0). */
  pointer(address: Int64): Pointer;
  /** `p + bytes`. */
  offset(p: NativePointer, bytes: number): NativePointer;
  /** The address of a JS typed array's memory (slow in Deno: setup only). */
  pointerOf(view: ArrayBufferView): NativePointer;

  /** Allocates zeroed native memory aligned to `align` (default 64); throws on failure. */
  alloc(size: number, align?: number): NativePointer;
  /**
   * Frees memory from {@link Native.alloc}; `size` and `align` as given to it (the census counts
   * the bytes without a table of live blocks: one would allocate on the JS heap per block).
   */
  free(p: Pointer, size: number, align?: number): void;
  /** A zero-copy ArrayBuffer over native memory; valid only while the memory lives. */
  arrayBuffer(p: NativePointer, byteLength: number): ArrayBuffer;
  /**
   * Copies `n` bytes from `src[srcOffset..]` to `dst[dstOffset..]` (the ranges may overlap)
   * without allocating: Deno on x86-64 makes one fast call (the trampoline's `memmove`), where
   * `TypedArray.set` takes part of an array only as a new `subarray` view. Throws
   * `InvalidArgumentError` for a range outside either array.
   */
  copy(dst: Uint8Array, dstOffset: number, src: Uint8Array, srcOffset: number, n: number): void;

  /**
   * Reads a pointer stored at `p + offset`. Real addresses round-trip; sentinel values
   * beyond 2^53 (such as `(void *)-1`) do not in Bun, whose pointers are JS numbers:
   * read those as u64 through a DataView.
   */
  readPointer(p: NativePointer, offset: number): Pointer;
  /** Stores a pointer at `p + offset`. */
  writePointer(p: NativePointer, offset: number, value: Pointer): void;
  /** Reads a NUL-terminated UTF-8 string at `p + offset` (null for NULL). */
  cstring(p: Pointer, offset?: number): string | null;
  /** Encodes a string as UTF-8 with a terminating NUL (sized in bytes, not characters). */
  cstringBytes(s: string): Uint8Array;

  /** Binds a C function pointer with the given signature. */
  fnPointer<S extends FunctionSpec>(fn: NativePointer, spec: S): BoundFunction<S>;
  /** Prepares repeated calls of a function pointer with fixed arguments. */
  prepareCall<S extends FunctionSpec>(
    fn: NativePointer,
    spec: S,
    args: ArgValues<S["args"]>,
  ): PreparedCall<S>;
}
