/**
 * Every checked-in layout table, for tools and tests that compare architectures. The library
 * itself loads only the table of the machine it runs on (`ffi/native.ts`).
 *
 * @module
 */
import { X86_64 } from "./x86_64.ts";
import { AARCH64 } from "./aarch64.ts";
import { layoutArch, type Layouts, type Widen } from "../layout.ts";

/** The checked-in tables by architecture (both have exactly the same structs and fields). */
export const LAYOUTS: { readonly x86_64: Layouts; readonly aarch64: Layouts } = {
  x86_64: X86_64,
  aarch64: AARCH64 satisfies Layouts,
};

// The aarch64 table must not have structs or fields that x86_64 lacks either.
const _sameShape: Widen<typeof AARCH64> = X86_64;

/** The layout table for an architecture name: "x86_64"/"x64"/"amd64" or "aarch64"/"arm64". */
export function layoutFor(arch: string): Layouts {
  return LAYOUTS[layoutArch(arch)];
}
