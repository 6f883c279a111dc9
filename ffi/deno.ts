/**
 * The Deno loader: `Deno.dlopen` for symbols; for function pointers a trampoline built in
 * memory (ffi/trampoline.ts, x86-64), else libffi's `ffi_call`, else `Deno.UnsafeFnPointer`.
 *
 * @module
 */

import type {
  ArgValues,
  BoundFunction,
  BoundLibrary,
  CType,
  FunctionSpec,
  Int64,
  NativePointer,
  Pointer,
  SymbolTable,
} from "../types/ctypes.ts";
import type { Native, PreparedCall } from "../types/native.ts";
import { LIBFFI } from "../types/symbols/libc.ts";
import { FfiPermissionError, RdmaError } from "../types/errors.ts";
import {
  ArgumentsCall,
  type Backend,
  buildNative,
  copyBySet,
  type CopyBytes,
  copyFits,
  copyRangeError,
  retryCalls,
  withTrampolineFile,
} from "./build.ts";
import { candidates, LIBRARIES, type LibraryPaths } from "./library.ts";
import { countBorn, countDied } from "./census.ts";
import {
  TRAMPOLINE_BLOCK_BYTES,
  TRAMPOLINE_COPY_SYMBOL,
  TRAMPOLINE_MAX_ARGS,
  TRAMPOLINE_MAX_TRIES,
  TRAMPOLINE_RETRY_SYMBOL,
  TRAMPOLINE_SYMBOL,
} from "./trampoline.ts";

type DenoResult = Deno.NativeResultType;

const DENO_TYPES: Record<CType, DenoResult> = {
  void: "void",
  bool: "bool",
  i8: "i8",
  u8: "u8",
  i16: "i16",
  u16: "u16",
  i32: "i32",
  u32: "u32",
  i64: "i64",
  u64: "u64",
  isize: "isize",
  usize: "usize",
  f32: "f32",
  f64: "f64",
  pointer: "pointer",
  buffer: "buffer",
};

function denoDef(spec: FunctionSpec): Deno.ForeignFunction {
  return {
    parameters: spec.args.map((t) => DENO_TYPES[t] as Deno.NativeType),
    result: DENO_TYPES[spec.result],
    optional: spec.optional ?? false,
  };
}

const asPtr = (p: Deno.PointerValue): Pointer => p as unknown as Pointer;
const denoPtr = (p: Pointer): Deno.PointerValue => p as unknown as Deno.PointerValue;

// libffi's ffi_type names for our C types.
const FFI_TYPES: Record<CType, string> = {
  void: "ffi_type_void",
  bool: "ffi_type_uint8",
  i8: "ffi_type_sint8",
  u8: "ffi_type_uint8",
  i16: "ffi_type_sint16",
  u16: "ffi_type_uint16",
  i32: "ffi_type_sint32",
  u32: "ffi_type_uint32",
  i64: "ffi_type_sint64",
  u64: "ffi_type_uint64",
  isize: "ffi_type_sint64",
  usize: "ffi_type_uint64",
  f32: "ffi_type_float",
  f64: "ffi_type_double",
  pointer: "ffi_type_pointer",
  buffer: "ffi_type_pointer",
};
// ffi_abi FFI_DEFAULT_ABI: FFI_UNIX64 on x86-64, FFI_SYSV on aarch64 (ffitarget.h).
const FFI_DEFAULT_ABI: Record<string, number> = { x86_64: 2, aarch64: 1 };
const RTLD_NOW = 2;
const CIF_BYTES = 64; // sizeof(ffi_cif) is 32 on x86-64; room for targets' extra fields
const SLOT = 8;

/** Writes one argument into its 8-byte slot (little-endian targets only). */
function writeSlot(view: DataView, at: number, type: CType, value: unknown): void {
  switch (type) {
    case "pointer":
    case "buffer": {
      const v = value === null || typeof value === "number" || typeof value === "bigint"
        ? BigInt(value ?? 0)
        : ArrayBuffer.isView(value)
        ? BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(value)))
        : BigInt(Deno.UnsafePointer.value(value as Deno.PointerValue));
      view.setBigUint64(at, v, true);
      return;
    }
    case "i64":
    case "isize":
      view.setBigInt64(at, BigInt(value as Int64), true);
      return;
    case "u64":
    case "usize":
      view.setBigUint64(at, BigInt(value as Int64), true);
      return;
    case "f32":
      view.setFloat32(at, value as number, true);
      return;
    case "f64":
      view.setFloat64(at, value as number, true);
      return;
    case "bool":
      view.setUint8(at, value ? 1 : 0);
      return;
    default:
      // integers up to 32 bits: libffi reads the low bytes of the slot
      view.setBigInt64(at, BigInt(Math.trunc(value as number)), true);
  }
}

function readResult(view: DataView, type: CType): unknown {
  switch (type) {
    case "void":
      return undefined;
    case "pointer":
    case "buffer":
      return asPtr(Deno.UnsafePointer.create(view.getBigUint64(0, true)));
    case "i64":
    case "isize": {
      const v = view.getBigInt64(0, true);
      return v >= -0x1fffffffffffffn && v <= 0x1fffffffffffffn ? Number(v) : v;
    }
    case "u64":
    case "usize": {
      const v = view.getBigUint64(0, true);
      return v <= 0x1fffffffffffffn ? Number(v) : v;
    }
    case "f32":
      return view.getFloat32(0, true);
    case "f64":
      return view.getFloat64(0, true);
    case "bool":
      return view.getUint8(0) !== 0;
    case "i8":
      return view.getInt8(0);
    case "u8":
      return view.getUint8(0);
    case "i16":
      return view.getInt16(0, true);
    case "u16":
      return view.getUint16(0, true);
    case "i32":
      return view.getInt32(0, true);
    case "u32":
      return view.getUint32(0, true);
  }
}

/** Zero for each argument of `spec`: a prepared call's arguments before its first use. */
function zeros<S extends FunctionSpec>(spec: S): ArgValues<S["args"]> {
  return new Array(spec.args.length).fill(0) as ArgValues<S["args"]>;
}

/**
 * A bound function over one prepared call (counted as the `FnPointer` it backs, kept for the
 * life of the process): sets the arguments, then calls.
 */
function throughPrepared<S extends FunctionSpec>(
  prepared: PreparedCall<S>,
  spec: S,
): BoundFunction<S> {
  const n = spec.args.length;
  return ((...args: unknown[]) => {
    for (let i = 0; i < n; i++) prepared.setArg(i, args[i] as never);
    return prepared.call();
  }) as never;
}

/** The libffi fast path: one `ffi_call` symbol call per function-pointer call. */
function libffiPath(native: Native, path: string): Pick<Native, "fnPointer" | "prepareCall"> {
  const ffi = Deno.dlopen(path, {
    ffi_prep_cif: denoDef(LIBFFI.ffi_prep_cif),
    ffi_call: denoDef(LIBFFI.ffi_call),
  }).symbols;
  const abi = FFI_DEFAULT_ABI[native.arch];
  if (abi === undefined) throw new RdmaError(`libffi ABI unknown for ${native.arch}`);
  const handle = native.libc.dlopen(native.pointerOf(native.cstringBytes(path)), RTLD_NOW);
  if (handle === null) throw new RdmaError(`dlopen(${path}) failed`);
  const typeOf = new Map<string, NativePointer>();
  const ffiType = (t: CType): NativePointer => {
    const name = FFI_TYPES[t];
    let p = typeOf.get(name);
    if (!p) {
      const sym = native.libc.dlsym(handle, native.pointerOf(native.cstringBytes(name)));
      if (sym === null) throw new RdmaError(`libffi lacks ${name}`);
      typeOf.set(name, p = sym);
    }
    return p;
  };
  const cifs = new WeakMap<FunctionSpec, NativePointer>();
  const cifFor = (spec: FunctionSpec): NativePointer => {
    let cif = cifs.get(spec);
    if (cif) return cif;
    const n = spec.args.length;
    // one block: cif, then the atypes array; kept for the life of the process
    cif = native.alloc(CIF_BYTES + Math.max(1, n) * SLOT, 16);
    const atypes = native.offset(cif, CIF_BYTES);
    spec.args.forEach((t, i) => native.writePointer(atypes, i * SLOT, ffiType(t)));
    const status = ffi.ffi_prep_cif(
      denoPtr(cif),
      abi,
      n,
      denoPtr(ffiType(spec.result)),
      denoPtr(atypes),
    );
    if (status !== 0) throw new RdmaError(`ffi_prep_cif failed (${status}) for ${spec.c}`);
    cifs.set(spec, cif);
    return cif;
  };

  const call = ffi.ffi_call;

  /**
   * One prepared call: its argument block (rvalue slot, n value slots, n avalue pointers) and its
   * fields; a class, so a call made per object (a QP's post, a CQ's poll) allocates no closures.
   */
  class LibffiCall<S extends FunctionSpec> implements PreparedCall<S> {
    #block: NativePointer | null;
    readonly #bytes: number;
    readonly #view: DataView;
    readonly #cif: Deno.PointerValue;
    readonly #target: Deno.PointerValue;
    readonly #rvalue: Deno.PointerValue;
    readonly #avalue: Deno.PointerValue;
    readonly #spec: S;
    readonly #counted: boolean;

    /** `counted`: a prepared call of the census (not a bound function pointer's own call). */
    constructor(fn: NativePointer, spec: S, args: ArgValues<S["args"]>, counted: boolean) {
      const n = spec.args.length;
      this.#spec = spec;
      this.#cif = denoPtr(cifFor(spec));
      this.#bytes = SLOT * (1 + 2 * n);
      const block = this.#block = native.alloc(this.#bytes, 16);
      const view = this.#view = new DataView(native.arrayBuffer(block, this.#bytes));
      this.#rvalue = denoPtr(block);
      this.#avalue = denoPtr(native.offset(block, SLOT * (1 + n)));
      const base = native.address(block);
      for (let i = 0; i < n; i++) {
        view.setBigUint64(SLOT * (1 + n + i), base + BigInt(SLOT * (1 + i)), true);
        writeSlot(view, SLOT * (1 + i), spec.args[i], args[i]);
      }
      this.#target = denoPtr(fn);
      this.#counted = counted;
      if (counted) countBorn("PreparedCall");
    }

    /**
     * Calls, then reads the result (the inline verbs' `int` inline, the rest by type). V8 makes an
     * FFI call through its fast path only from TurboFan code; Maglev inlines functions of up to
     * 100 bytes of bytecode into its own code, where the same call takes the slow path (host:
     * ~120 ns against ~30). At 154 bytes this method is not inlined by Maglev (its callers call
     * this method's own optimized code) and still is by TurboFan (up to 460): tests/ffi.test.ts
     * holds the size between the two.
     */
    call(): ReturnType<PreparedCall<S>["call"]> {
      if (this.#block === null) throw new RdmaError("prepared call used after free()");
      call(this.#cif, this.#target, this.#rvalue, this.#avalue);
      const view = this.#view;
      switch (this.#spec.result) {
        case "i32":
          return view.getInt32(0, true) as ReturnType<PreparedCall<S>["call"]>;
        case "u32":
          return view.getUint32(0, true) as ReturnType<PreparedCall<S>["call"]>;
        case "void":
          return undefined as ReturnType<PreparedCall<S>["call"]>;
        default:
          return readResult(view, this.#spec.result) as ReturnType<PreparedCall<S>["call"]>;
      }
    }

    readonly nativeRetry = false;

    retry(tries: number): ReturnType<PreparedCall<S>["call"]> {
      return retryCalls(this, tries);
    }

    setArg(index: number, value: ArgValues<S["args"]>[number]): void {
      if (this.#block === null) throw new RdmaError("prepared call used after free()");
      writeSlot(this.#view, SLOT * (1 + index), this.#spec.args[index], value);
    }

    free(): void {
      if (this.#block === null) return;
      native.free(this.#block, this.#bytes, 16);
      this.#block = null;
      if (this.#counted) countDied("PreparedCall");
    }
  }

  function prepareCall<S extends FunctionSpec>(
    fn: NativePointer,
    spec: S,
    args: ArgValues<S["args"]>,
  ): PreparedCall<S> {
    return new LibffiCall(fn, spec, args, true);
  }

  return {
    prepareCall,
    fnPointer<S extends FunctionSpec>(fn: NativePointer, spec: S) {
      return throughPrepared(new LibffiCall(fn, spec, zeros(spec), false), spec);
    },
  };
}

/** Result types the trampoline is bound for (every prepared call of the verbs' hot paths). */
const TRAMPOLINE_RESULTS = ["i32", "u32", "void", "pointer"] as const;
type TrampolineResult = typeof TRAMPOLINE_RESULTS[number];

/**
 * 8- and 16-bit results (the extended CQ's `read_sl`, `read_dlid_path_bits`, `read_cvlan`) go
 * through the `u32` binding and are masked: the ABI leaves the register's upper bits to the
 * callee. A class of their own ({@link MaskedCall}), so the hot calls' `call()` stays as small.
 */
const NARROW_RESULTS: Readonly<Record<string, number>> = { u8: 0xff, u16: 0xffff };

/** True when `spec` can go through the trampoline: integer or pointer arguments only. */
function trampolineFits(spec: FunctionSpec): boolean {
  return spec.args.length <= TRAMPOLINE_MAX_ARGS &&
    spec.args.every((t) => t !== "f32" && t !== "f64") &&
    ((TRAMPOLINE_RESULTS as readonly CType[]).includes(spec.result) ||
      spec.result in NARROW_RESULTS);
}

/**
 * Loads the trampoline (ffi/trampoline.ts) from an anonymous file (`memfd_create`, so nothing is
 * written to disk and the fd is closed once the loader has mapped it) and binds it once per
 * result type; throws where that is not possible (another architecture, no `memfd_create`,
 * an ffi permission limited to some paths, a system that forbids executable anonymous files).
 */
function loadTrampoline(native: Native): TrampolineSymbols {
  let symbols = trampolines.get(native);
  if (symbols === undefined) trampolines.set(native, symbols = bindTrampoline(native));
  return symbols;
}

/** The trampoline's symbols bound by each {@link Native} (one load serves calls and copies). */
const trampolines = new WeakMap<Native, TrampolineSymbols>();

/** The call symbol bound once per result type, and the copy. */
type TrampolineSymbols = ReturnType<typeof bindTrampoline>;

function bindTrampoline(native: Native) {
  return withTrampolineFile(native, (path) => {
    // where --allow-ffi names some paths only, ask nobody: libffi instead
    if (Deno.permissions.querySync({ name: "ffi", path }).state !== "granted") {
      throw new RdmaError("no ffi permission for the trampoline");
    }
    const name = TRAMPOLINE_SYMBOL, parameters = ["pointer"] as const;
    return Deno.dlopen(
      path,
      {
        i32: { name, parameters, result: "i32" },
        u32: { name, parameters, result: "u32" },
        void: { name, parameters, result: "void" },
        pointer: { name, parameters, result: "pointer" },
        // dst, dstOffset, src, srcOffset, n, memmove
        copy: {
          name: TRAMPOLINE_COPY_SYMBOL,
          parameters: ["buffer", "u32", "buffer", "u32", "u32", "pointer"],
          result: "void",
        },
        // block, tries
        retry: { name: TRAMPOLINE_RETRY_SYMBOL, parameters: ["pointer", "u32"], result: "i32" },
      } as const,
    ).symbols;
  });
}

/**
 * The trampoline path: a function pointer and its arguments sit in one native block, and a call
 * is one fast call of the trampoline with the block's address. Signatures it does not take
 * (floating point, more than six arguments, other result types) go to `fallback`.
 */
function trampolinePath(
  native: Native,
  fallback: () => Pick<Native, "fnPointer" | "prepareCall">,
): Pick<Native, "fnPointer" | "prepareCall"> {
  const { i32: callI32, u32: callU32, void: callVoid, pointer: callPointer, retry } =
    loadTrampoline(native);

  /**
   * One prepared call: its block (the function, then one 8-byte slot per argument). The view
   * that writes an argument is made by the first {@link TrampolineCall.setArg}: most prepared
   * calls never change one, and a view with its buffer is about 180 bytes of heap.
   */
  class TrampolineCall<S extends FunctionSpec> implements PreparedCall<S> {
    #block: NativePointer | null;
    readonly #arg: Deno.PointerValue;
    #view: DataView | null = null;
    readonly #spec: S;
    readonly #result: TrampolineResult;
    readonly #counted: boolean;

    /** `counted`: a prepared call of the census (not a bound function pointer's own call). */
    constructor(fn: NativePointer, spec: S, args: ArgValues<S["args"]>, counted: boolean) {
      const block = this.#block = native.alloc(TRAMPOLINE_BLOCK_BYTES, 16);
      this.#arg = denoPtr(block);
      this.#spec = spec;
      this.#result = spec.result as TrampolineResult;
      native.writePointer(block, 0, fn);
      const view = new DataView(native.arrayBuffer(block, TRAMPOLINE_BLOCK_BYTES));
      for (let i = 0; i < spec.args.length; i++) {
        writeSlot(view, SLOT * (1 + i), spec.args[i], args[i]);
      }
      this.#counted = counted;
      if (counted) countBorn("PreparedCall");
    }

    /**
     * One fast call of the trampoline bound for the result type. Like `LibffiCall.call`, this
     * method must stay above Maglev's inlining limit (100 bytes of bytecode; an FFI call inlined
     * into Maglev code takes V8's slow path) and below TurboFan's (460): tests/ffi.test.ts holds
     * its size.
     */
    call(): ReturnType<PreparedCall<S>["call"]> {
      const block = this.#arg;
      if (this.#block === null) throw new RdmaError("prepared call used after free()");
      switch (this.#result) {
        case "i32":
          return callI32(block) as ReturnType<PreparedCall<S>["call"]>;
        case "u32":
          return callU32(block) as ReturnType<PreparedCall<S>["call"]>;
        case "void":
          callVoid(block);
          return undefined as ReturnType<PreparedCall<S>["call"]>;
        default:
          return asPtr(callPointer(block)) as ReturnType<PreparedCall<S>["call"]>;
      }
    }

    /** True for an `i32` result: its tries loop in the trampoline. */
    get nativeRetry(): boolean {
      return this.#result === "i32";
    }

    /**
     * The tries in one fast call of the trampoline's retry (an `i32` result; other results try
     * by calls). Like {@link TrampolineCall.call}, above Maglev's inlining limit and below
     * TurboFan's (tests/ffi.test.ts holds its size): the tries' count is checked here, as the
     * native loop takes 0 for 2^32.
     */
    retry(tries: number): ReturnType<PreparedCall<S>["call"]> {
      const block = this.#arg;
      if (this.#block === null) throw new RdmaError("prepared call used after free()");
      if (!(tries >= 1 && tries <= TRAMPOLINE_MAX_TRIES)) {
        throw new RdmaError(`retry: tries must be 1..${TRAMPOLINE_MAX_TRIES}, got ${tries}`);
      }
      if (this.#result === "i32") return retry(block, tries) as ReturnType<PreparedCall<S>["call"]>;
      return retryCalls(this, tries);
    }

    setArg(index: number, value: ArgValues<S["args"]>[number]): void {
      const block = this.#block;
      if (block === null) throw new RdmaError("prepared call used after free()");
      this.#view ??= new DataView(native.arrayBuffer(block, TRAMPOLINE_BLOCK_BYTES));
      writeSlot(this.#view, SLOT * (1 + index), this.#spec.args[index], value);
    }

    free(): void {
      if (this.#block === null) return;
      native.free(this.#block, TRAMPOLINE_BLOCK_BYTES, 16);
      this.#block = this.#view = null;
      if (this.#counted) countDied("PreparedCall");
    }
  }

  /** A prepared call of a narrow result: the `u32` call, masked. */
  class MaskedCall<S extends FunctionSpec> implements PreparedCall<S> {
    readonly #inner: TrampolineCall<FunctionSpec>;
    readonly #mask: number;

    constructor(fn: NativePointer, spec: S, args: ArgValues<S["args"]>, counted: boolean) {
      const wide = { ...spec, result: "u32" } as FunctionSpec;
      this.#inner = new TrampolineCall(fn, wide, args as ArgValues<FunctionSpec["args"]>, counted);
      this.#mask = NARROW_RESULTS[spec.result];
    }

    call(): ReturnType<PreparedCall<S>["call"]> {
      return ((this.#inner.call() as number) & this.#mask) as ReturnType<PreparedCall<S>["call"]>;
    }

    readonly nativeRetry = false;

    retry(tries: number): ReturnType<PreparedCall<S>["call"]> {
      return retryCalls(this, tries);
    }

    setArg(index: number, value: ArgValues<S["args"]>[number]): void {
      this.#inner.setArg(index, value as ArgValues<FunctionSpec["args"]>[number]);
    }

    free(): void {
      this.#inner.free();
    }
  }

  const make = <S extends FunctionSpec>(
    fn: NativePointer,
    spec: S,
    args: ArgValues<S["args"]>,
    counted: boolean,
  ): PreparedCall<S> =>
    spec.result in NARROW_RESULTS
      ? new MaskedCall(fn, spec, args, counted)
      : new TrampolineCall(fn, spec, args, counted);

  return {
    prepareCall<S extends FunctionSpec>(
      fn: NativePointer,
      spec: S,
      args: ArgValues<S["args"]>,
    ): PreparedCall<S> {
      return trampolineFits(spec)
        ? make(fn, spec, args, true)
        : fallback().prepareCall(fn, spec, args);
    },
    fnPointer<S extends FunctionSpec>(fn: NativePointer, spec: S) {
      return trampolineFits(spec)
        ? throughPrepared(make(fn, spec, zeros(spec), false), spec)
        : fallback().fnPointer(fn, spec);
    },
  };
}

/**
 * {@link Native.copy} through the trampoline: one fast call with both typed arrays, their
 * offsets and libc's `memmove` (32-bit integer parameters: V8 calls a function with 64-bit ones
 * through its slow path, 0.17 µs against 0.02 on the host). The returned function must stay above
 * Maglev's inlining limit, as the prepared calls' `call()` (tests/ffi.test.ts holds its size).
 */
function trampolineCopy(native: Native): CopyBytes {
  const { copy } = loadTrampoline(native);
  const move = native.libc.dlsym(null, native.pointerOf(native.cstringBytes("memmove")));
  if (move === null) throw new RdmaError("memmove not found");
  const memmove = denoPtr(move);
  return function copyBytes(dst, dstOffset, src, srcOffset, n) {
    if (!copyFits(dst, dstOffset, src, srcOffset, n)) {
      throw copyRangeError(dst, dstOffset, src, srcOffset, n);
    }
    // 32-bit offsets (V8's fast call takes no 64-bit integer); beyond them, TypedArray.set
    if (dstOffset + n > 0xffffffff || srcOffset + n > 0xffffffff) {
      copyBySet(dst, dstOffset, src, srcOffset, n);
    } else {
      copy(dst, dstOffset, src, srcOffset, n, memmove);
    }
  };
}

/**
 * Calls `fn` through `Deno.UnsafeFnPointer` (libffi, per call): nothing is compiled when it is
 * made. 64-bit results that fit a double arrive as numbers, as a bound symbol's do.
 */
function throughAddress<S extends FunctionSpec>(fn: NativePointer, spec: S): BoundFunction<S> {
  const f = new Deno.UnsafeFnPointer(
    denoPtr(fn) as Deno.PointerObject<never>,
    denoDef(spec) as never,
  );
  return ((...args: unknown[]) => {
    const r = (f.call as (...a: unknown[]) => unknown)(...args);
    if (spec.result === "pointer") return asPtr(r as Deno.PointerValue);
    return typeof r === "bigint" && r >= -0x1fffffffffffffn && r <= 0x1fffffffffffffn
      ? Number(r)
      : r;
  }) as never;
}

/** The fallback: `Deno.UnsafeFnPointer` (about a microsecond per call). */
function unsafeFnPointerPath(native: Native): Pick<Native, "fnPointer" | "prepareCall"> {
  return {
    fnPointer: throughAddress,
    // bound once per function and signature (`native.fnPointer` caches it)
    prepareCall: (fn, spec, args) => new ArgumentsCall(native.fnPointer(fn, spec), args),
  };
}

/**
 * Calls of a cold symbol through its address before it is bound. Binding compiles a fast-call
 * stub (2-6 ms each in the emulated guest, about 0.1 ms on the host), as much as a few hundred
 * calls through the address cost (libffi: 14-28 µs each in the guest, about a microsecond on the
 * host); a symbol called once per connection is bound by the 16th connection, one called once on
 * the way to a listening id never (bench/results/2026-11-30-cold-symbols.md).
 */
const CALLS_BEFORE_BINDING = 16;

/**
 * Opens a library for a symbol table. One `dlopen` finds every symbol's address (a pointer static
 * is the address; nothing is compiled). A hot symbol (called per message, wake-up or clock read)
 * is bound on its first use; any other is called through its address until its
 * {@link CALLS_BEFORE_BINDING}th call and bound then, so a symbol called once (most of the
 * set-up on the way to a listening id) costs no stub.
 */
export function openLibrary<T extends SymbolTable>(path: string, table: T): BoundLibrary<T> {
  const statics: Record<string, Deno.ForeignStatic> = {};
  for (const name of Object.keys(table)) statics[name] = { type: "pointer", optional: true };
  const found = Deno.dlopen(path, statics).symbols as Record<string, Deno.PointerValue>;
  const lib = {} as Record<string, unknown>;
  const define = (name: string, value: unknown) =>
    Object.defineProperty(lib, name, { value, enumerable: true });
  for (const [name, spec] of Object.entries(table)) {
    const at = found[name];
    const bind = () => Deno.dlopen(path, { [name]: denoDef(spec) }).symbols[name];
    if (at === null) {
      if (spec.optional) define(name, undefined);
      else {
        Object.defineProperty(lib, name, {
          enumerable: true,
          get() {
            throw new RdmaError(`${path} has no symbol ${name} (${spec.c})`);
          },
        });
      }
    } else if (spec.hot) {
      Object.defineProperty(lib, name, {
        configurable: true,
        enumerable: true,
        get: () => define(name, bind())[name],
      });
    } else {
      // the libffi caller is made at the first call: most of a table is never called
      let slow: ((...a: unknown[]) => unknown) | undefined;
      let calls = 0;
      let fast: ((...a: unknown[]) => unknown) | undefined;
      // a caller that kept this function is forwarded once the symbol is bound (`apply` with
      // `arguments` makes no array of them)
      const cold = function (this: unknown) {
        if (fast === undefined && ++calls >= CALLS_BEFORE_BINDING) {
          fast = bind() as (...a: unknown[]) => unknown;
          define(name, fast);
        }
        const f = fast ??
          (slow ??= throughAddress(asPtr(at) as NativePointer, spec) as (
            ...a: unknown[]
          ) => unknown);
        return f.apply(undefined, arguments as unknown as unknown[]);
      };
      Object.defineProperty(lib, name, {
        configurable: true,
        enumerable: true,
        writable: true,
        value: cold,
      });
    }
  }
  return lib as unknown as BoundLibrary<T>;
}

function env(name: string): string | undefined {
  try {
    if (Deno.permissions.querySync({ name: "env", variable: name }).state !== "granted") {
      return undefined;
    }
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

const backend: Backend = {
  runtime: "deno",
  arch: Deno.build.arch,
  env,
  open: openLibrary,
  address: (p) => BigInt(Deno.UnsafePointer.value(denoPtr(p))),
  pointer: (a) => asPtr(Deno.UnsafePointer.create(BigInt(a))),
  offset: (p, n) => asPtr(Deno.UnsafePointer.offset(denoPtr(p)!, n)) as NativePointer,
  pointerOf: (v) => asPtr(Deno.UnsafePointer.of(v as BufferSource)) as NativePointer,
  arrayBuffer: (p, len) => Deno.UnsafePointerView.getArrayBuffer(denoPtr(p)!, len),
  readPointer: (p, off) => asPtr(new Deno.UnsafePointerView(denoPtr(p)!).getPointer(off)),
  cstring: (p, off) => Deno.UnsafePointerView.getCString(denoPtr(p)!, off),
  viewFreeCopy(native: Native, paths: LibraryPaths) {
    if (paths.trampoline === false) return null;
    try {
      return trampolineCopy(native);
    } catch {
      return null; // no trampoline here (see loadTrampoline): TypedArray.set
    }
  },
  functionPointers(native: Native, paths: LibraryPaths) {
    const general = (): ReturnType<Backend["functionPointers"]> => {
      if (paths.libffi !== false) {
        for (const path of candidates(LIBRARIES.libffi, paths.libffi, env)) {
          try {
            return { path: "libffi", ...libffiPath(native, path) };
          } catch {
            // try the next candidate, then fall back
          }
        }
      }
      return { path: "UnsafeFnPointer", ...unsafeFnPointerPath(native) };
    };
    if (paths.trampoline !== false) {
      // libffi (or the fallback) is set up only when a signature the trampoline does not take
      // is called
      let other: ReturnType<Backend["functionPointers"]> | undefined;
      try {
        return { path: "trampoline", ...trampolinePath(native, () => other ??= general()) };
      } catch {
        // no trampoline here: the general path for every call
      }
    }
    return general();
  },
};

/** The CPU architecture, named as the layout tables name it. */
export const arch: string = backend.arch;

/** Creates the Deno implementation of {@link Native}. */
export function createNative(paths: LibraryPaths): Native {
  // without the permission every dlopen fails; say so instead of "could not load libc"
  let ffi = Deno.permissions.querySync({ name: "ffi" }).state;
  if (ffi === "prompt") ffi = Deno.permissions.requestSync({ name: "ffi" }).state;
  if (ffi !== "granted") throw new FfiPermissionError();
  return buildNative(backend, paths);
}
