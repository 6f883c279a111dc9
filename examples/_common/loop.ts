/**
 * The ping-pong completion loop of rc_pingpong and ud_pingpong: the server sends the
 * first message; each side re-posts a send once its last send and a receive have
 * completed, tops up receives when they run low, and prints the result lines.
 *
 * @module
 */

import type { CompletionQueue, PreparedRecv } from "../../verbs.ts";
import { err, out } from "./cli.ts";
import {
  completionWaiter,
  type PingpongSettings,
  postRecvs,
  RECV_WRID,
  resultLines,
  SEND_WRID,
} from "./pingpong.ts";

/** What the loop needs from a tool that has connected its QP. */
export interface LoopSetup {
  cq: CompletionQueue;
  /** The prepared send (classic or extended). */
  send: { post(): void };
  recv: PreparedRecv;
  /** Receives posted so far. */
  routs: number;
  /** Called with the index of each successful receive completion of the last poll (`-t`). */
  onRecv?: (index: number) => void;
}

/**
 * Runs the loop with the tool's settings (the client, given the server's name, sends first;
 * `-e` waits through the completion channel); returns the exit code (non-zero after printing
 * what failed).
 */
export async function pingpongLoop(o: LoopSetup, s: PingpongSettings): Promise<number> {
  const { cq, send, recv } = o;
  const { rxDepth, iters } = s;
  let routs = o.routs;
  let pending = RECV_WRID;
  if (s.server) {
    send.post();
    pending |= SEND_WRID;
  }
  const wait = completionWaiter(cq, s.events, 2);
  const start = performance.now();
  let rcnt = 0, scnt = 0;
  while (rcnt < iters || scnt < iters) {
    let ne = wait();
    if (typeof ne !== "number") ne = await ne;
    for (let i = 0; i < ne; i++) {
      const wc = cq.completion(i);
      const id = wc.wrIdNumber;
      if (wc.status !== 0) {
        err(`Failed status ${wc.statusName} (${wc.status}) for wr_id ${id}`);
        return 1;
      }
      if (id === SEND_WRID) scnt++;
      else if (id === RECV_WRID) {
        if (--routs <= 1) {
          routs += postRecvs(recv, rxDepth - routs);
          if (routs < rxDepth) {
            err(`Couldn't post receive (${routs})`);
            return 1;
          }
        }
        rcnt++;
        o.onRecv?.(i);
      } else {
        err(`Completion for unknown wr_id ${id}`);
        return 1;
      }
      pending &= ~id;
      if (scnt < iters && !pending) {
        send.post();
        pending = RECV_WRID | SEND_WRID;
      }
    }
  }
  const elapsed = performance.now() - start;
  for (const line of resultLines(s.size, iters, elapsed)) out(line);
  return 0;
}
