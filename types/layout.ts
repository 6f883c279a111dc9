/**
 * Struct layouts (size, alignment, field offsets) generated from the installed C headers by
 * `scripts/gen-layouts.ts`, one checked-in table per architecture. Never type an offset by hand:
 * read it from here.
 *
 * @module
 */
import type { X86_64 } from "./layouts/x86_64.ts";
import { RdmaError } from "./errors.ts";

/** Size, alignment and field offsets of one C struct, generated from the installed headers. */
export interface StructLayout {
  /** `sizeof` in bytes. */
  readonly size: number;
  /** `_Alignof` in bytes. */
  readonly align: number;
  /** Fields by name; nested members use dotted paths. */
  readonly fields: Readonly<Record<string, FieldLayout>>;
}

/** Offset and size in bytes of one field; nested fields use dotted paths: "wr.rdma.remote_addr". */
export interface FieldLayout {
  /** `offsetof` in bytes from the start of the struct. */
  readonly offset: number;
  /** `sizeof` the field in bytes (an array's total size). */
  readonly size: number;
}

/** Every struct this library reads or writes, keyed by its C name without "struct ". */
export type LayoutTable = Readonly<Record<string, StructLayout>>;

/** Architectures with a checked-in table. */
export type LayoutArch = "x86_64" | "aarch64";

/** A generated table with its literal numbers widened, so every architecture shares one type. */
export type Widen<T> = T extends number ? number : { readonly [K in keyof T]: Widen<T[K]> };

/** The precise type of every architecture's table: the same structs and fields, any numbers. */
export type Layouts = Widen<typeof X86_64>;

/** Normalizes an architecture name ("x64", "amd64", "arm64", ...) to a table name. */
export function layoutArch(arch: string): LayoutArch {
  switch (arch) {
    case "x86_64":
    case "x64":
    case "amd64":
      return "x86_64";
    case "aarch64":
    case "arm64":
      return "aarch64";
    default:
      throw new RdmaError(
        `no struct layout table for architecture "${arch}" (have x86_64 and aarch64); ` +
          "generate one with scripts/gen-layouts.ts",
      );
  }
}
