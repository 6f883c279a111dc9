/**
 * @rdma/verbs/cm - the verbs layer and the rdma_cm connection manager (librdmacm): everything of
 * `@rdma/verbs` except the socket-shaped streams. A program that connects through rdma_cm and
 * posts its own work requests imports this entry and does not load the streams.
 *
 * ```ts
 * import { cmListen } from "jsr:@rdma/verbs/cm";
 * const listener = cmListen({ hostname: "0.0.0.0", port: 7471 });
 * listener.close();
 * ```
 *
 * @module
 */

export * from "./verbs.ts";
export * from "./cm/mod.ts";
