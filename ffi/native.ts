/**
 * Chooses the loader for the running runtime and hands out the one {@link Native}.
 * Importing this module opens no library; the first `native()` call does.
 *
 * @module
 */

import type { FnPointerPath, Native } from "../types/native.ts";
import { layoutArch, type Layouts } from "../types/layout.ts";
import { RdmaError } from "../types/errors.ts";
import type { LibraryPaths } from "./library.ts";

export type { LibraryPaths } from "./library.ts";

const loader: { readonly arch: string; createNative(paths: LibraryPaths): Native } =
  "Bun" in globalThis ? await import("./bun.ts") : await import("./deno.ts");

let current: Native | undefined;
let paths: LibraryPaths = {};

/** What this process runs on, as the library sees it. */
export interface RuntimeInfo {
  /** The JavaScript runtime. */
  readonly runtime: "deno" | "bun";
  /** CPU architecture (`x86_64`, `aarch64`). */
  readonly arch: string;
  /** How the inline verbs' function pointers are called (`trampoline` is Deno's fast path on x86-64, `libffi` elsewhere). */
  readonly fnPointerPath: FnPointerPath;
}

/** The runtime, architecture and function-pointer path in use (opens the libraries). */
export function runtimeInfo(): RuntimeInfo {
  const n = native();
  return { runtime: n.runtime, arch: n.arch, fnPointerPath: n.fnPointerPath };
}

/** The runtime services, created on first use. */
export function native(): Native {
  return current ??= loader.createNative(paths);
}

/**
 * Overrides library paths (or Deno's choice of function-pointer path) before the first use.
 * Throws once the libraries are open.
 */
export function configureNative(options: LibraryPaths): void {
  if (current) throw new RdmaError("configureNative() must be called before the first native call");
  paths = { ...options };
}

// Only this machine's table is evaluated. Deno's loader still reads the other one, as it reads the
// target of every dynamic import named by a literal (bench/results/2026-11-28-connection-alloc.md);
// the literal keeps both in the package's module graph for JSR and `deno cache`.
const layoutTable: Layouts = layoutArch(loader.arch) === "aarch64"
  ? (await import("../types/layouts/aarch64.ts")).AARCH64
  : (await import("../types/layouts/x86_64.ts")).X86_64;

/** The generated struct layouts of this machine's architecture. */
export function layouts(): Layouts {
  return layoutTable;
}
