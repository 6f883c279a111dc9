/**
 * write_lat — perftest's `ib_write_lat` over @rdma/verbs, in Deno and Bun. Same flags, same exchange
 * on the wire (either side can be the C tool), same result table; see README.md.
 *
 * ```sh
 * deno run --allow-ffi --allow-net bench/perftest/write_lat.ts -d rxe0 -x 1           # server
 * bun bench/perftest/write_lat.ts -d rxe0 -x 1 10.0.2.15                              # client
 * ```
 *
 * @module
 */

import { perftest } from "./_core/main.ts";

if (import.meta.main) await perftest({ name: "write_lat", verb: "write", test: "lat" });
