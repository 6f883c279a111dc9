/**
 * Which native libraries this package opens, where it looks for them, and what
 * to tell the user when one is missing. Runtime-neutral.
 *
 * @module
 */

/** Paths that override the default sonames (e.g. a private rdma-core build). */
export interface LibraryPaths {
  /** Path or soname of libibverbs (default `libibverbs.so.1`, env `RDMA_VERBS_LIBIBVERBS`). */
  libibverbs?: string;
  /** Path or soname of librdmacm (default `librdmacm.so.1`, env `RDMA_VERBS_LIBRDMACM`). */
  librdmacm?: string;
  /** Path or soname of libffi for Deno's fast function-pointer calls (default `libffi.so.8`, env `RDMA_VERBS_LIBFFI`); `false` forces the `UnsafeFnPointer` path. */
  libffi?: string | false;
  /** Deno on x86-64: `false` calls function pointers through libffi instead of the trampoline built in memory (the default; ffi/trampoline.ts). */
  trampoline?: boolean;
}

/** One library we open: its default sonames, override variable and install hint. */
export interface LibraryInfo {
  readonly sonames: readonly string[];
  readonly env: string;
  readonly install: string;
}

/** The libraries, by the key used in {@link LibraryPaths}. */
export const LIBRARIES = {
  libibverbs: {
    sonames: ["libibverbs.so.1"],
    env: "RDMA_VERBS_LIBIBVERBS",
    install:
      "Install rdma-core's verbs library and providers: Debian/Ubuntu `apt install libibverbs1 ibverbs-providers`, Fedora/RHEL `dnf install libibverbs`, or set RDMA_VERBS_LIBIBVERBS to its path.",
  },
  librdmacm: {
    sonames: ["librdmacm.so.1"],
    env: "RDMA_VERBS_LIBRDMACM",
    install:
      "Install rdma-core's connection manager library: Debian/Ubuntu `apt install librdmacm1`, Fedora/RHEL `dnf install librdmacm`, or set RDMA_VERBS_LIBRDMACM to its path.",
  },
  libffi: {
    sonames: ["libffi.so.8", "libffi.so.7"],
    env: "RDMA_VERBS_LIBFFI",
    install:
      "Install libffi: Debian/Ubuntu `apt install libffi8`, Fedora/RHEL `dnf install libffi`.",
  },
  libc: {
    sonames: ["libc.so.6"],
    env: "RDMA_VERBS_LIBC",
    install: "This library needs glibc (libc.so.6).",
  },
} as const satisfies Record<string, LibraryInfo>;

/** The candidate paths for a library: explicit option, environment, default sonames. */
export function candidates(
  info: LibraryInfo,
  explicit: string | undefined,
  env: (name: string) => string | undefined,
): string[] {
  if (explicit) return [explicit];
  const fromEnv = env(info.env);
  return fromEnv ? [fromEnv] : [...info.sonames];
}
