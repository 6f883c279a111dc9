/**
 * uc_pingpong — `ibv_uc_pingpong` over this library: one UC (unreliable connected) QP each side,
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

import { QpType } from "../mod.ts";
import { runTool, type ToolSpec } from "./_common/cli.ts";
import { CHK_OPTION, runConnected } from "./_common/connected.ts";
import {
  PINGPONG_PERMISSIONS,
  PINGPONG_SYNOPSIS,
  pingpongOptions,
  pingpongSettings,
} from "./_common/pingpong.ts";

const SIZE = 4096;

const SPEC: ToolSpec = {
  name: "uc_pingpong",
  synopsis: PINGPONG_SYNOPSIS,
  options: { ...pingpongOptions(SIZE), ...CHK_OPTION },
  maxPositionals: 1,
  permissions: PINGPONG_PERMISSIONS,
};

if (import.meta.main) {
  await runTool(
    SPEC,
    ({ values, positionals }) =>
      runConnected(QpType.UC, pingpongSettings(values, positionals, SIZE), values),
  );
}
