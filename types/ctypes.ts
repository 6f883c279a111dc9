/**
 * The C type vocabulary shared by both runtimes. Symbol tables are written in
 * these names; each loader in `ffi/` maps them to its own runtime's FFI types.
 *
 * @module
 */

/** A C type as it crosses the FFI boundary. `buffer` is a JS typed array passed as a pointer. */
export type CType =
  | "void"
  | "bool"
  | "i8"
  | "u8"
  | "i16"
  | "u16"
  | "i32"
  | "u32"
  | "i64"
  | "u64"
  | "isize"
  | "usize"
  | "f32"
  | "f64"
  | "pointer"
  | "buffer";

/** One C function: its argument and result types, and the C prototype it was written from. */
export interface FunctionSpec {
  /** Argument types, in order. */
  readonly args: readonly CType[];
  /** Result type. */
  readonly result: CType;
  /** The C prototype, for readers and error messages. */
  readonly c: string;
  /** True when older library versions may lack the symbol; the bound function is then `undefined`. */
  readonly optional?: boolean;
  /**
   * True when the library calls it per message, wake-up or clock read. A loader may bind only
   * these for its fastest call where binding costs (Deno compiles a stub per symbol) and call the
   * others, which run per object or per connection, through their addresses.
   */
  readonly hot?: boolean;
}

/** One library's functions by symbol name. */
export type SymbolTable = Readonly<Record<string, FunctionSpec>>;

/** A non-NULL native address, opaque to everything outside `ffi/`. */
export type NativePointer = { readonly __nativePointerBrand: never };

/** A native address; `null` is the C NULL pointer. */
export type Pointer = NativePointer | null;

/** 64-bit integers arrive as `number` when they fit and may be given either way. */
export type Int64 = number | bigint;

/** The JS type accepted for an argument of C type `T`. */
export type ArgValue<T extends CType> = T extends "pointer" ? Pointer
  : T extends "buffer" ? ArrayBufferView | null
  : T extends "i64" | "u64" | "isize" | "usize" ? Int64
  : T extends "bool" ? boolean
  : T extends "void" ? never
  : number;

/** The JS type returned for a result of C type `T`. */
export type ResultValue<T extends CType> = T extends "void" ? void
  : T extends "pointer" | "buffer" ? Pointer
  : T extends "i64" | "u64" | "isize" | "usize" ? Int64
  : T extends "bool" ? boolean
  : number;

/** The argument list of a function spec, as JS values. */
export type ArgValues<A extends readonly CType[]> = {
  -readonly [K in keyof A]: ArgValue<A[K]>;
};

/** A callable bound to one C function. */
export type BoundFunction<S extends FunctionSpec> = (
  ...args: ArgValues<S["args"]>
) => ResultValue<S["result"]>;

/** A loaded library: one callable per symbol; optional symbols may be missing. */
export type BoundLibrary<T extends SymbolTable> = {
  readonly [K in keyof T]: T[K]["optional"] extends true ? BoundFunction<T[K]> | undefined
    : BoundFunction<T[K]>;
};
