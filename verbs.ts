/**
 * @rdma/verbs/verbs - the verbs layer alone: devices, PDs, MRs, CQs, QPs (libibverbs), the poller
 * that awaits completions and events, and the types, enums and errors under them. A program that
 * drives the verbs itself (out-of-band connection setup, perftest-style loops) imports this entry
 * and loads neither the connection manager nor the streams.
 *
 * ```ts
 * import { listDevices } from "jsr:@rdma/verbs/verbs";
 * for (const d of listDevices()) console.log(d.name, d.guid);
 * ```
 *
 * @module
 */

export { configureNative, type LibraryPaths, type RuntimeInfo, runtimeInfo } from "./ffi/native.ts";
export type { FnPointerPath } from "./types/native.ts";
export {
  type CostCounts,
  costCounts,
  COUNTING as COST_COUNTING,
  resetCostCounts,
} from "./ffi/cost.ts";
export { type NativeCensus, nativeCensus } from "./ffi/census.ts";
export type { NativePointer, Pointer } from "./types/ctypes.ts";
export * from "./types/errors.ts";
export type { Bytes } from "./types/bytes.ts";
export { Errno, errnoName } from "./types/errno.ts";
export * from "./types/enums.ts";
export * from "./poller/mod.ts";
export * from "./verbs/mod.ts";
export {
  decodeToken,
  encodeToken,
  REMOTE_TOKEN_SIZE,
  REMOTE_TOKEN_VERSION,
  RemoteMemory,
  TokenAccess,
  type TokenFields,
} from "./verbs/remote-memory.ts";
