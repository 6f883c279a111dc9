/**
 * Builds a {@link Native} from the few primitives a runtime backend supplies;
 * everything here is runtime-neutral.
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
  SymbolTable,
} from "../types/ctypes.ts";
import type { FnPointerPath, Native, PreparedCall } from "../types/native.ts";
import { IBVERBS } from "../types/symbols/ibverbs.ts";
import { RDMACM } from "../types/symbols/rdmacm.ts";
import { LIBC } from "../types/symbols/libc.ts";
import { InvalidArgumentError, LibraryNotFoundError, RdmaError } from "../types/errors.ts";
import { candidates, LIBRARIES, type LibraryInfo, type LibraryPaths } from "./library.ts";
import { describe } from "../types/check.ts";
import { costs, costSlot, countCallAt, countedLibrary, COUNTING, timedCall } from "./cost.ts";
import { countBorn, countDied, countMemory } from "./census.ts";
import { trampolineImage } from "./trampoline.ts";

/** What a runtime backend must provide. */
export interface Backend {
  readonly runtime: "deno" | "bun";
  readonly arch: string;
  /** Reads an environment variable, or undefined (also when not permitted). */
  env(name: string): string | undefined;
  /** Opens a library and binds a table; throws with the loader's message on failure. */
  open<T extends SymbolTable>(path: string, table: T): BoundLibrary<T>;
  address(p: Pointer): bigint;
  pointer(address: Int64): Pointer;
  offset(p: NativePointer, bytes: number): NativePointer;
  pointerOf(view: ArrayBufferView): NativePointer;
  arrayBuffer(p: NativePointer, byteLength: number): ArrayBuffer;
  readPointer(p: NativePointer, offset: number): Pointer;
  cstring(p: NativePointer, offset: number): string;
  /**
   * A copy between typed arrays that makes no view, with the ranges already checked (Deno: the
   * trampoline's), or null where there is none; asked once, at the first {@link Native.copy}.
   */
  viewFreeCopy?(native: Native, paths: LibraryPaths): CopyBytes | null;
  /** Binds function-pointer calling once libc is available; returns the path used. */
  functionPointers(
    native: Native,
    paths: LibraryPaths,
  ): Pick<Native, "fnPointer" | "prepareCall"> & { path: FnPointerPath };
}

function openWithHint<T extends SymbolTable>(
  backend: Backend,
  info: LibraryInfo,
  explicit: string | undefined,
  table: T,
): BoundLibrary<T> {
  const tried = candidates(info, explicit, (n) => backend.env(n));
  let last = "";
  for (const path of tried) {
    try {
      return backend.open(path, table);
    } catch (e) {
      last = e instanceof Error ? e.message : String(e);
    }
  }
  throw new LibraryNotFoundError(info.sonames[0], tried, info.install, last);
}

const encoder = new TextEncoder();

/** {@link Native.copy}'s signature. */
export type CopyBytes = Native["copy"];

/** True when `[at, at + n)` lies inside an array of `length` bytes (integers only). */
function rangeFits(at: number, n: number, length: number): boolean {
  return Number.isInteger(at) && Number.isInteger(n) && at >= 0 && n >= 0 && at + n <= length;
}

/** True when a {@link CopyBytes} call's two ranges lie inside their arrays. */
export function copyFits(
  dst: Uint8Array,
  dstOffset: number,
  src: Uint8Array,
  srcOffset: number,
  n: number,
): boolean {
  return rangeFits(dstOffset, n, dst.length) && rangeFits(srcOffset, n, src.length);
}

/** The error for a copy whose range does not fit (one message for every {@link CopyBytes}). */
export function copyRangeError(
  dst: Uint8Array,
  dstOffset: number,
  src: Uint8Array,
  srcOffset: number,
  n: number,
): InvalidArgumentError {
  return new InvalidArgumentError(
    `copy: ${describe(n)} bytes from offset ${describe(srcOffset)} of ${src.length} to offset ` +
      `${describe(dstOffset)} of ${dst.length} do not fit`,
  );
}

/** {@link Native.copy} with `TypedArray.set` (a `subarray` view when part of `src` is copied). */
export function copyBySet(
  dst: Uint8Array,
  dstOffset: number,
  src: Uint8Array,
  srcOffset: number,
  n: number,
): void {
  if (!copyFits(dst, dstOffset, src, srcOffset, n)) {
    throw copyRangeError(dst, dstOffset, src, srcOffset, n);
  }
  dst.set(
    srcOffset === 0 && n === src.length ? src : src.subarray(srcOffset, srcOffset + n),
    dstOffset,
  );
}

/** Assembles the Native object; libraries open lazily on first use. */
export function buildNative(backend: Backend, paths: LibraryPaths): Native {
  let ibverbs: BoundLibrary<typeof IBVERBS> | undefined;
  let rdmacm: BoundLibrary<typeof RDMACM> | undefined;
  // with cost counting on (ffi/cost.ts) every library is bound through a counting copy
  const open = COUNTING
    ? <T extends SymbolTable>(info: LibraryInfo, explicit: string | undefined, table: T) =>
      countedLibrary(openWithHint(backend, info, explicit, table))
    : <T extends SymbolTable>(info: LibraryInfo, explicit: string | undefined, table: T) =>
      openWithHint(backend, info, explicit, table);
  const libc = open(LIBRARIES.libc, undefined, LIBC);
  const errnoAt = libc.__errno_location();
  if (errnoAt === null) throw new RdmaError("__errno_location returned NULL");
  // errno lives in thread-local storage of the JS thread; FFI calls made from
  // this thread write it there, so one cached view reads it.
  const errnoView = new Int32Array(backend.arrayBuffer(errnoAt, 4));
  // what alloc takes for (size, align): the census (ffi/census.ts) counts it at alloc and free
  const allocated = (size: number, align: number) =>
    Math.max(align, Math.ceil(size / align) * align);

  const native: Native = {
    runtime: backend.runtime,
    arch: backend.arch,
    get ibverbs() {
      return ibverbs ??= open(LIBRARIES.libibverbs, paths.libibverbs, IBVERBS);
    },
    get rdmacm() {
      return rdmacm ??= open(LIBRARIES.librdmacm, paths.librdmacm, RDMACM);
    },
    libc,
    errno: () => errnoView[0],
    setErrno(value) {
      errnoView[0] = value;
    },
    address: backend.address,
    pointer: backend.pointer,
    offset: backend.offset,
    pointerOf: backend.pointerOf,
    arrayBuffer: backend.arrayBuffer,
    // the backend's view-free copy is looked for at the first copy (Deno loads the trampoline)
    copy(dst, dstOffset, src, srcOffset, n) {
      const c = backend.viewFreeCopy?.(native, paths) ?? copyBySet;
      native.copy = COUNTING && c !== copyBySet ? timedCall(c, "memmove") as CopyBytes : c;
      native.copy(dst, dstOffset, src, srcOffset, n);
    },
    readPointer: backend.readPointer,
    writePointer(p, offset, value) {
      new DataView(backend.arrayBuffer(p, offset + 8)).setBigUint64(
        offset,
        backend.address(value),
        true,
      );
    },
    cstring: (p, offset = 0) => p === null ? null : backend.cstring(p, offset),
    cstringBytes(s) {
      const bytes = encoder.encode(s);
      const out = new Uint8Array(bytes.length + 1);
      out.set(bytes);
      return out;
    },
    alloc(size, align = 64) {
      if (!Number.isInteger(size) || size < 0) {
        throw new InvalidArgumentError(
          `alloc: size must be a non-negative integer, got ${describe(size)}`,
        );
      }
      const rounded = allocated(size, align);
      const p = libc.aligned_alloc(align, rounded);
      if (p === null) {
        throw new RdmaError(`aligned_alloc(${align}, ${rounded}) failed: out of memory`);
      }
      libc.memset(p, 0, rounded);
      countMemory(1, rounded);
      return p;
    },
    free(p, size, align = 64) {
      if (p === null) return;
      const rounded = allocated(size, align);
      countMemory(-1, -rounded);
      libc.free(p);
    },
    get fnPointerPath() {
      return fnPointers().path;
    },
    fnPointer: boundOnce(backend, (fn, spec) => fnPointers().fnPointer(fn, spec)),
    prepareCall: (fn, spec, args) => prepare(fn, spec, args),
  };
  // Function-pointer calling (Deno: the trampoline loaded, or libffi opened) is set up by the
  // first binding or prepared call, so a program pays for it only when it calls an inline verb: a
  // listening rdma_cm id needs none.
  let fp: ReturnType<Backend["functionPointers"]> | undefined;
  let prepare: Native["prepareCall"] = (fn, spec, args) => {
    const p = fnPointers().prepareCall;
    prepare = COUNTING ? countedPrepareCall(p) : p;
    return prepare(fn, spec, args);
  };
  function fnPointers(): ReturnType<Backend["functionPointers"]> {
    return fp ??= backend.functionPointers(native, paths);
  }
  return native;
}

/**
 * A prepared call over a bound function pointer (Bun's `CFunction`, Deno's `UnsafeFnPointer`
 * fallback): the arguments kept in an array, counted in the census until `free()`. `call` is a
 * closure of fixed arity made once (no spread, no allocation per call): reading the function and
 * the arguments from private fields and switching on their count measured up to twice as slow per
 * call in Bun.
 */
export class ArgumentsCall<S extends FunctionSpec> implements PreparedCall<S> {
  /** Calls the function with the current arguments. */
  readonly call: () => ReturnType<PreparedCall<S>["call"]>;
  /** The current arguments (the call's closure reads the same array). */
  protected readonly args: unknown[];
  #live = true;

  /** Prepares calls of `f` with `args` (changed later with {@link ArgumentsCall.setArg}). */
  constructor(f: BoundFunction<S>, args: ArgValues<S["args"]>) {
    const g = f as unknown as (...a: unknown[]) => ReturnType<PreparedCall<S>["call"]>;
    const a = this.args = [...args];
    this.call = a.length === 3
      ? () => g(a[0], a[1], a[2])
      : a.length === 2
      ? () => g(a[0], a[1])
      : a.length === 1
      ? () => g(a[0])
      : () => g(...a);
    countBorn("PreparedCall");
  }

  /** False: each try of {@link ArgumentsCall.retry} is one call. */
  readonly nativeRetry: boolean = false;

  /** Calls until the result is not 0, at most `tries` times (each try one call). */
  retry(tries: number): ReturnType<PreparedCall<S>["call"]> {
    return retryCalls(this, tries);
  }

  /** Replaces argument `index`. */
  setArg(index: number, value: ArgValues<S["args"]>[number]): void {
    this.args[index] = value;
  }

  /** Counts the call out of the census (idempotent); there is no native state to free. */
  free(): void {
    if (this.#live) countDied("PreparedCall");
    this.#live = false;
  }
}

const MFD_CLOEXEC = 1;

/**
 * Writes the trampoline (ffi/trampoline.ts) into an anonymous file (`memfd_create`, so nothing is
 * written to disk) and hands its path to `load`, which opens it; the fd is closed once `load`
 * returns (the loader keeps its mapping). Throws where that is not possible (another
 * architecture, no `memfd_create`).
 */
export function withTrampolineFile<T>(native: Native, load: (path: string) => T): T {
  const image = trampolineImage(native.arch);
  if (image === null) throw new RdmaError(`no trampoline for ${native.arch}`);
  const fd = native.libc.memfd_create(
    native.pointerOf(native.cstringBytes("rdma-verbs-call")),
    MFD_CLOEXEC,
  );
  if (fd < 0) throw new RdmaError("memfd_create failed");
  try {
    if (Number(native.libc.write(fd, native.pointerOf(image), image.length)) !== image.length) {
      throw new RdmaError("writing the trampoline failed");
    }
    return load(`/proc/self/fd/${fd}`);
  } finally {
    native.libc.close(fd);
  }
}

/**
 * {@link PreparedCall.retry} where the tries cannot loop in native code: one call per try.
 */
export function retryCalls<S extends FunctionSpec>(
  p: PreparedCall<S>,
  tries: number,
): ReturnType<PreparedCall<S>["call"]> {
  let r = p.call();
  while (r === 0 && --tries > 0) r = p.call();
  return r;
}

/**
 * Binds each function pointer once per signature and hands the same binding to every later
 * caller (a provider's `post_send` is the same function for every QP of the device): binding
 * costs a compiled trampoline in Bun and an argument block in Deno, which per object would grow
 * with every object made. Each binding is counted in the census as an `FnPointer`.
 */
function boundOnce(backend: Backend, bind: Native["fnPointer"]): Native["fnPointer"] {
  const bound = new Map<FunctionSpec, Map<bigint, unknown>>();
  return <S extends FunctionSpec>(fn: NativePointer, spec: S) => {
    let bySpec = bound.get(spec);
    if (bySpec === undefined) bound.set(spec, bySpec = new Map());
    const key = backend.address(fn);
    let f = bySpec.get(key);
    if (f === undefined) {
      bySpec.set(key, f = bind(fn, spec));
      countBorn("FnPointer");
    }
    return f as BoundFunction<S>;
  };
}

/** The name a function-pointer spec is counted under: the member name in its C prototype. */
function opName(spec: FunctionSpec): string {
  return /\(\*\s*(\w+)\)/.exec(spec.c)?.[1] ?? /(\w+)\s*\(/.exec(spec.c)?.[1] ?? spec.c;
}

/** Prepared calls that count each call under the op's name (and `poll_cq` results of 0). */
function countedPrepareCall(prepare: Native["prepareCall"]): Native["prepareCall"] {
  return (fn, spec, args) => {
    const p = prepare(fn, spec, args);
    const name = opName(spec);
    const slot = costSlot(name);
    const polls = name === "poll_cq";
    const call = p.call;
    p.call = () => {
      const t = performance.now();
      const r = call.call(p);
      countCallAt(slot, performance.now() - t);
      if (polls && r === 0) costs.emptyPolls++;
      return r;
    };
    // a retry in native code is one FFI call; elsewhere each try is a `call` (counted above)
    const retry = p.retry;
    if (p.nativeRetry) {
      p.retry = (tries) => {
        const t = performance.now();
        const r = retry.call(p, tries);
        countCallAt(slot, performance.now() - t);
        if (polls && r === 0) costs.emptyPolls++;
        return r;
      };
    }
    return p;
  };
}
