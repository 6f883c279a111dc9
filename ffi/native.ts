/**
 * Chooses the loader for the running runtime and hands out the one {@link Native}.
 * Importing this module opens no library; the first `native()` call does.
 *
 * @module
 */

import type { Native } from "../types/native.ts";
import { RdmaError } from "../types/errors.ts";
import type { LibraryPaths } from "./library.ts";

export type { LibraryPaths } from "./library.ts";

const loader: { createNative(paths: LibraryPaths): Native } = "Bun" in globalThis
  ? await import("./bun.ts")
  : await import("./deno.ts");

let current: Native | undefined;
let paths: LibraryPaths = {};

/** The runtime services, created on first use. */
export function native(): Native {
  return current ??= loader.createNative(paths);
}

/**
 * Overrides library paths (or disables libffi in Deno) before the first use.
 * Throws once the libraries are open.
 */
export function configureNative(options: LibraryPaths): void {
  if (current) throw new RdmaError("configureNative() must be called before the first native call");
  paths = { ...options };
}
