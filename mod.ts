/**
 * @rdma/verbs - RDMA (libibverbs and librdmacm) for Deno and Bun.
 *
 * ```ts
 * import { listDevices } from "jsr:@rdma/verbs";
 * for (const d of listDevices()) console.log(d.name, d.guid);
 * ```
 *
 * The guide, from what RDMA is to troubleshooting: [docs/README.md](./docs/README.md).
 *
 * Layers: `stream` (socket-shaped connections, wire-compatible with rsocket), `cm` (the rdma_cm
 * connection manager), `verbs` (devices, PDs, MRs, CQs, QPs, ...), `poller` (completions and
 * events on the event loop), over one type layer and one FFI loader per runtime. This module only
 * re-exports. A program that needs less loads less: `@rdma/verbs/verbs` (the verbs layer alone)
 * and `@rdma/verbs/cm` (verbs and the connection manager) leave the streams out.
 *
 * @module
 */

export * from "./cm.ts";
export * from "./stream/mod.ts";
