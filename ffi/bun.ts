/**
 * The Bun loader: `bun:ffi` `dlopen` for symbols and `CFunction` for function
 * pointers. Pointers are numbers in Bun; they stay opaque outside `ffi/`.
 *
 * @module
 */

import { CFunction, dlopen, FFIType, ptr, read, toArrayBuffer } from "bun:ffi";
import process from "node:process";
import { RdmaError } from "../types/errors.ts";
import type {
  ArgValues,
  BoundFunction,
  BoundLibrary,
  CType,
  FunctionSpec,
  NativePointer,
  Pointer,
  SymbolTable,
} from "../types/ctypes.ts";
import type { Native, PreparedCall } from "../types/native.ts";
import { ArgumentsCall, type Backend, buildNative, withTrampolineFile } from "./build.ts";
import { LIBRARIES, type LibraryPaths } from "./library.ts";
import { LIBC } from "../types/symbols/libc.ts";
import {
  TRAMPOLINE_BLOCK_BYTES,
  TRAMPOLINE_MAX_ARGS,
  TRAMPOLINE_MAX_TRIES,
  TRAMPOLINE_RETRY_SYMBOL,
} from "./trampoline.ts";

const BUN_ARGS: Record<CType, FFIType> = {
  void: FFIType.void,
  bool: FFIType.bool,
  i8: FFIType.i8,
  u8: FFIType.u8,
  i16: FFIType.i16,
  u16: FFIType.u16,
  i32: FFIType.i32,
  u32: FFIType.u32,
  i64: FFIType.i64,
  u64: FFIType.u64,
  isize: FFIType.i64,
  usize: FFIType.u64,
  f32: FFIType.f32,
  f64: FFIType.f64,
  pointer: FFIType.ptr,
  buffer: FFIType.ptr,
};
// 64-bit results come back as numbers when they fit, as in Deno.
const BUN_RESULTS: Record<CType, FFIType> = {
  ...BUN_ARGS,
  i64: FFIType.i64_fast,
  u64: FFIType.u64_fast,
  isize: FFIType.i64_fast,
  usize: FFIType.u64_fast,
};

const asPtr = (p: number | null): Pointer => (p || null) as unknown as Pointer;
const bunPtr = (p: Pointer): number => (p ?? 0) as unknown as number;

function bunDef(spec: FunctionSpec) {
  return { args: spec.args.map((t) => BUN_ARGS[t]), returns: BUN_RESULTS[spec.result] };
}

function fnPointer<S extends FunctionSpec>(fn: NativePointer, spec: S) {
  // Bun returns 0 or null for a NULL pointer result; both become null.
  const f = CFunction({ ptr: bunPtr(fn) as never, ...bunDef(spec) }) as unknown as (
    ...a: unknown[]
  ) => unknown;
  return (spec.result === "pointer" ? (...a: unknown[]) => asPtr(f(...a) as number) : f) as never;
}

/** libc's `dlopen`, `dlsym` and `dlerror`, bound once: they find symbols without compiling. */
interface DynamicLoader {
  /** (Bun passes a typed array's address for a pointer argument, the array held for the call.) */
  dlopen(path: Uint8Array, flags: number): number | null;
  dlsym(handle: number, name: Uint8Array): number | null;
  dlerror(): number | null;
}

let loader: DynamicLoader | undefined;

function dynamicLoader(): DynamicLoader {
  if (loader) return loader;
  let last = "";
  for (const path of LIBRARIES.libc.sonames) {
    try {
      return loader = dlopen(path, {
        dlopen: bunDef(LIBC.dlopen),
        dlsym: bunDef(LIBC.dlsym),
        dlerror: bunDef(LIBC.dlerror),
      }).symbols as unknown as DynamicLoader;
    } catch (e) {
      last = e instanceof Error ? e.message : String(e);
    }
  }
  throw new RdmaError(`cannot open libc for dlopen: ${last}`);
}

const RTLD_NOW = 2;
const encoder = new TextEncoder();

/** `text` as a NUL-terminated C string, passed to a call as the array itself. */
function cText(text: string): Uint8Array {
  return encoder.encode(text + "\0");
}

/**
 * Opens a library for a symbol table. `bun:ffi`'s `dlopen` compiles a caller for every symbol it
 * is given (about 4 KiB of memory and 20 µs on the host each), and a program calls a few dozen of
 * a table's symbols: so libc's `dlopen` opens the library, and each symbol is looked up and bound
 * (`CFunction`, the same caller) at its first use. A symbol the library lacks is `undefined` when
 * optional, and otherwise throws {@link RdmaError} when used, as in Deno's loader.
 */
export function openLibrary<T extends SymbolTable>(path: string, table: T): BoundLibrary<T> {
  const dl = dynamicLoader();
  const handle = dl.dlopen(cText(path), RTLD_NOW);
  if (!handle) {
    const why = dl.dlerror();
    throw new RdmaError(
      why ? backend.cstring(why as unknown as NativePointer, 0) : `dlopen(${path}) failed`,
    );
  }
  const lib = {} as Record<string, unknown>;
  for (const [name, spec] of Object.entries(table)) {
    Object.defineProperty(lib, name, {
      configurable: true,
      enumerable: true,
      get() {
        const at = dl.dlsym(handle, cText(name));
        if (!at && !spec.optional) throw new RdmaError(`${path} has no symbol ${name} (${spec.c})`);
        const value = at ? fnPointer(asPtr(at) as NativePointer, spec) : undefined;
        Object.defineProperty(lib, name, { value, enumerable: true });
        return value;
      },
    });
  }
  return lib as unknown as BoundLibrary<T>;
}

const backend: Backend = {
  runtime: "bun",
  arch: process.arch === "x64" ? "x86_64" : process.arch === "arm64" ? "aarch64" : process.arch,
  env: (name) => process.env[name],
  open: openLibrary,
  address: (p) => BigInt(bunPtr(p)),
  pointer: (a) => asPtr(Number(a)),
  offset: (p, n) => (bunPtr(p) + n) as unknown as NativePointer,
  pointerOf: (v) => ptr(v as never) as unknown as NativePointer,
  arrayBuffer: (p, len) => toArrayBuffer(bunPtr(p) as never, 0, len),
  readPointer: (p, off) => asPtr(read.ptr(bunPtr(p) as never, off) as number),
  cstring(p, off) {
    const start = bunPtr(p) + off;
    let len = 0;
    while (read.u8(start as never, len) !== 0) len++;
    return new TextDecoder().decode(new Uint8Array(toArrayBuffer(start as never, 0, len)));
  },
  // a prepared call only holds its arguments: the CFunction (a compiled trampoline) is made once
  // per function and signature and shared (`native.fnPointer` caches it); an `int` call of
  // integer and pointer arguments also gets a block for the trampoline's retry, where it loads
  functionPointers(native, paths) {
    let retry: RetryFn | null | undefined = paths.trampoline === false ? null : undefined;
    return {
      path: "CFunction",
      fnPointer,
      prepareCall(fn, spec, args) {
        const f = native.fnPointer(fn, spec);
        if (!retryFits(spec)) return new ArgumentsCall(f, args);
        retry ??= loadRetry(native);
        return retry === null
          ? new ArgumentsCall(f, args)
          : new BlockRetryCall(native, retry, fn, spec, f, args);
      },
    };
  },
};

/** The trampoline's `rdma_verbs_retry(block, tries)`. */
type RetryFn = (block: number, tries: number) => number;

/** The trampoline's retry bound, or null where it does not load (then tries are calls). */
function loadRetry(native: Native): RetryFn | null {
  try {
    return withTrampolineFile(native, (path) =>
      dlopen(path, {
        [TRAMPOLINE_RETRY_SYMBOL]: { args: [FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
      }).symbols[TRAMPOLINE_RETRY_SYMBOL] as unknown as RetryFn);
  } catch {
    return null;
  }
}

/** True when the trampoline's retry can make `spec`'s calls: an `int` of integers and pointers. */
function retryFits(spec: FunctionSpec): boolean {
  return spec.result === "i32" && spec.args.length <= TRAMPOLINE_MAX_ARGS &&
    spec.args.every((t) => t !== "f32" && t !== "f64");
}

/**
 * A prepared `int` call whose {@link PreparedCall.retry} loops in the trampoline: the function and
 * its arguments are copied into a native block (8-byte slots: the function, then the arguments) at
 * the first retry, kept up to date from then on and freed with the call. A call that is never
 * retried (a post) has no block.
 */
class BlockRetryCall<S extends FunctionSpec> extends ArgumentsCall<S> {
  override readonly nativeRetry = true;
  readonly #native: Native;
  readonly #retry: RetryFn;
  readonly #fn: NativePointer;
  readonly #spec: S;
  #freed = false;
  #block: NativePointer | null = null;
  #at = 0;
  #view: DataView | null = null;

  constructor(
    native: Native,
    retry: RetryFn,
    fn: NativePointer,
    spec: S,
    f: BoundFunction<S>,
    args: ArgValues<S["args"]>,
  ) {
    super(f, args);
    this.#native = native;
    this.#retry = retry;
    this.#fn = fn;
    this.#spec = spec;
  }

  /** The tries in one call of the trampoline's retry. */
  override retry(tries: number): ReturnType<PreparedCall<S>["call"]> {
    if (this.#freed) throw new RdmaError("prepared call used after free()");
    if (!(tries >= 1 && tries <= TRAMPOLINE_MAX_TRIES)) {
      throw new RdmaError(`retry: tries must be 1..${TRAMPOLINE_MAX_TRIES}, got ${tries}`);
    }
    if (this.#block === null) this.#makeBlock();
    return this.#retry(this.#at, tries) as ReturnType<PreparedCall<S>["call"]>;
  }

  override setArg(index: number, value: ArgValues<S["args"]>[number]): void {
    super.setArg(index, value);
    if (this.#view !== null) this.#write(index, value);
  }

  override free(): void {
    super.free();
    this.#freed = true;
    if (this.#block === null) return;
    this.#native.free(this.#block, TRAMPOLINE_BLOCK_BYTES, 16);
    this.#block = this.#view = null;
  }

  #makeBlock(): void {
    const block = this.#block = this.#native.alloc(TRAMPOLINE_BLOCK_BYTES, 16);
    this.#at = bunPtr(block);
    this.#view = new DataView(this.#native.arrayBuffer(block, TRAMPOLINE_BLOCK_BYTES));
    this.#native.writePointer(block, 0, this.#fn);
    for (let i = 0; i < this.args.length; i++) this.#write(i, this.args[i]);
  }

  /** Writes argument `index` into its slot (a pointer's address, an integer sign-extended). */
  #write(index: number, value: unknown): void {
    const t = this.#spec.args[index];
    const v = t === "pointer" || t === "buffer"
      ? BigInt(ArrayBuffer.isView(value) ? ptr(value as never) : bunPtr(value as Pointer))
      : BigInt(typeof value === "bigint" ? value : Math.trunc(value as number));
    this.#view!.setBigInt64(8 * (1 + index), v, true);
  }
}

/** The CPU architecture, named as the layout tables name it. */
export const arch: string = backend.arch;

/** Creates the Bun implementation of {@link Native}. */
export function createNative(paths: LibraryPaths): Native {
  return buildNative(backend, paths);
}
