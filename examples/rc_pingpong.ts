/**
 * rc_pingpong - `ibv_rc_pingpong` over this library: one RC QP each side, SEND ping-pong,
 * the same flags, TCP address exchange and result lines as the C tool, so either side
 * can be the C program. `-c` checks the received pages, `-N` posts through the `ibv_wr_*` API,
 * `-t` reports receive completion timestamps, `-o`/`-O`/`-P` use on-demand paging and `-j`
 * device memory where the device has them (otherwise the C tool's message and status 1).
 *
 * ```sh
 * deno run --allow-ffi --allow-net jsr:@rdma/verbs/examples/rc_pingpong -g 1         # server
 * bun examples/rc_pingpong.ts -g 1 -e 10.0.2.15                                       # client
 * ```
 *
 * @module
 */

import { QpType } from "../verbs.ts";
import { connectedTool, RC_FEATURE_OPTIONS } from "./_common/connected.ts";

if (import.meta.main) await connectedTool("rc_pingpong", QpType.RC, RC_FEATURE_OPTIONS);
