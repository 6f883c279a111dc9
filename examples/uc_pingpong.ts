/**
 * uc_pingpong - `ibv_uc_pingpong` over this library: one UC (unreliable connected) QP each side,
 * SEND ping-pong, the same flags, TCP address exchange and result lines as the C tool, so either
 * side can be the C program. `-c` checks the received pages.
 *
 * ```sh
 * deno run --allow-ffi --allow-net jsr:@rdma/verbs/examples/uc_pingpong -g 1         # server
 * bun examples/uc_pingpong.ts -g 1 10.0.2.15                                          # client
 * ```
 *
 * @module
 */

import { QpType } from "../verbs.ts";
import { CHK_OPTION, connectedTool } from "./_common/connected.ts";

if (import.meta.main) await connectedTool("uc_pingpong", QpType.UC, CHK_OPTION);
