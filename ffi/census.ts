/**
 * The census of native objects: how many of each native-backed object are alive in this process,
 * and how much native memory the library holds, read with {@link nativeCensus}.
 *
 * What is counted, and where (each count changes only where the object is made or released, never
 * on a post, a poll or a wait, so the census costs nothing on the hot paths):
 *
 * - every open {@link NativeResource} by its kind name (`Context`, `ProtectionDomain`,
 *   `MemoryRegion`, `CompletionQueue`, `CompletionChannel`, `QueuePair`, `SharedReceiveQueue`,
 *   `AddressHandle`, `MemoryWindow`, `PreparedSend`, `PreparedRecv`, `CmEventChannel`, `CmId`,
 *   `RdmaConn`, `RdmaListener`, ...): counted by the base class's constructor and `close()`;
 * - the poller's `Poller`s and `FdWatch`es (one per watched fd);
 * - the loader's prepared calls (`PreparedCall`: one per prepared function-pointer call, each with
 *   its native argument block in Deno) and bound function pointers (`FnPointer`: one per distinct
 *   function and signature, kept for the life of the process and shared by every object that
 *   calls it);
 * - native memory: every allocation of the loader (`NativeBlock`s, Deno's prepared-call argument
 *   blocks and call interfaces) as `blocks` and `bytes`.
 *
 * The library makes no FFI callbacks (C never calls into JavaScript): there is nothing of that
 * kind to count. Memory that C libraries allocate for themselves (librdmacm's ids, the provider's
 * queues) is behind the objects counted above.
 *
 * @module
 */

/** A snapshot of the live native objects and memory of this process ({@link nativeCensus}). */
export interface NativeCensus {
  /** Live objects by kind, sorted by name; kinds with none alive are left out. */
  readonly objects: Readonly<Record<string, number>>;
  /** Every live object, summed over the kinds. */
  readonly total: number;
  /** Native allocations of the library not yet freed. */
  readonly blocks: number;
  /** Their size in bytes (as allocated: rounded up to the alignment). */
  readonly bytes: number;
}

const live = new Map<string, number>();
const memory = { blocks: 0, bytes: 0 };

/** Counts one object of `kind` made (module-private: the places that make native objects). */
export function countBorn(kind: string): void {
  live.set(kind, (live.get(kind) ?? 0) + 1);
}

/** Counts one object of `kind` released. */
export function countDied(kind: string): void {
  live.set(kind, (live.get(kind) ?? 0) - 1);
}

/** Counts a native allocation of `bytes` (+) or its release (-). */
export function countMemory(blocks: number, bytes: number): void {
  memory.blocks += blocks;
  memory.bytes += bytes;
}

/**
 * The live native objects by kind and the native memory the library holds, right now. Take one
 * before and one after a piece of work: every count back where it was means the work released
 * everything it made (a connection closed and `released`, a context closed, ...). Objects that
 * the library keeps for the life of the process on first use (the shared poller and its
 * watches of librdmacm's device context, the bound function pointers) appear once and stay.
 */
export function nativeCensus(): NativeCensus {
  const objects: Record<string, number> = {};
  let total = 0;
  for (const k of [...live.keys()].sort()) {
    const v = live.get(k)!;
    if (v === 0) continue;
    objects[k] = v;
    total += v;
  }
  return { objects, total, blocks: memory.blocks, bytes: memory.bytes };
}
