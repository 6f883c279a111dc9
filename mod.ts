/**
 * @rdma/verbs — RDMA (libibverbs and librdmacm) for Deno and Bun.
 *
 * ```ts
 * import { listDevices } from "jsr:@rdma/verbs";
 * for (const d of listDevices()) console.log(d.name, d.guid);
 * ```
 *
 * The guide, from what RDMA is to troubleshooting: [docs/README.md](./docs/README.md).
 *
 * Layers: `stream` (socket-shaped connections, wire-compatible with rsocket), `cm` (the rdma_cm
 * connection manager), `verbs` (devices, PDs, MRs, CQs, QPs, …), `poller` (completions and
 * events on the event loop), over one type layer and one FFI loader per runtime. This module only
 * re-exports.
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
export * from "./cm/mod.ts";
export * from "./stream/mod.ts";
