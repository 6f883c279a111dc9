/**
 * srq_pingpong - `ibv_srq_pingpong` over this library: several RC QPs (default 16) that
 * share one receive queue and one CQ; the same flags, TCP address exchange (a table of
 * 256 addresses) and result lines as the C tool.
 *
 * ```sh
 * deno run --allow-ffi --allow-net jsr:@rdma/verbs/examples/srq_pingpong -g 1          # server
 * bun examples/srq_pingpong.ts -g 1 -q 4 10.0.2.15                                     # client
 * ```
 *
 * @module
 */

import { AccessFlags, openDevice, QpType, type QueuePair, SendFlags } from "../verbs.ts";
import { err, intOption, out, runTool, type ToolSpec } from "./_common/cli.ts";
import { clientExchange, type Dest, destLine, serverExchange } from "./_common/exchange.ts";
import {
  completionWaiter,
  connectQp,
  PINGPONG_PERMISSIONS,
  PINGPONG_SYNOPSIS,
  pingpongOptions,
  pingpongSettings,
  postRecvs,
  RECV_WRID,
  resultLines,
  SEND_WRID,
  startSide,
} from "./_common/pingpong.ts";

const SIZE = 4096;
/** The size of the address table both sides exchange, whatever `--num-qp` is. */
const MAX_QP = 256;

const SPEC: ToolSpec = {
  name: "srq_pingpong",
  synopsis: PINGPONG_SYNOPSIS,
  options: pingpongOptions(SIZE, {
    "num-qp": {
      short: "q",
      type: "string",
      arg: "num",
      help: "number of QPs to use (default 16)",
    },
  }),
  maxPositionals: 1,
  permissions: PINGPONG_PERMISSIONS,
};

if (import.meta.main) {
  await runTool(SPEC, async ({ values, positionals }) => {
    const s = pingpongSettings(values, positionals, SIZE);
    const numQp = intOption(values, "num-qp", 16, 1, MAX_QP);
    if (numQp > s.rxDepth) {
      err(
        `rx_depth ${s.rxDepth} is too small for ${numQp} QPs -- must have at least one receive per QP.`,
      );
      return 1;
    }
    const numWc = numQp + s.rxDepth;
    using ctx = openDevice(s.device);
    const channel = s.events ? ctx.createCompChannel() : undefined;
    const pd = ctx.allocPd();
    const mr = pd.allocBuffer(s.size, { access: AccessFlags.LOCAL_WRITE });
    const cq = ctx.createCq({ cqe: s.rxDepth + numQp, channel, pollBatch: numWc });
    const srq = pd.createSrq({ maxWr: s.rxDepth, maxSge: 1 });
    const qps: QueuePair[] = [];
    let inline = 0;
    for (let i = 0; i < numQp; i++) {
      const qp = pd.createQp({
        type: QpType.RC,
        sendCq: cq,
        srq,
        cap: { maxSendWr: 1, maxSendSge: 1 },
      });
      if (qp.cap.maxInlineData >= s.size) inline = SendFlags.INLINE;
      qps.push(qp);
    }
    for (const qp of qps) qp.toInit({ port: s.ibPort });
    const index = new Map(qps.map((qp, i) => [qp.qpNum, i]));

    const recv = srq.prepareRecv({ wrId: RECV_WRID, sg: [{ mr, length: s.size }] });
    const started = startSide(ctx, recv, s, qps.map((qp) => qp.qpNum));
    if (!started) return 1;
    let routs = started.routs;
    const mine = started.mine;

    const connect = (rem: Dest[]) =>
      qps.forEach((qp, i) => connectQp(qp, rem[i], rem[0].gid, s, mine[i].psn));
    const rem = s.server
      ? await clientExchange(s.server, s.tcpPort, mine, MAX_QP)
      : await serverExchange(s.tcpPort, mine, connect, MAX_QP);
    for (let i = 0; i < numQp; i++) out(destLine("remote", rem[i]));
    if (s.server) connect(rem);

    const sends = qps.map((qp) =>
      qp.prepareSend({
        wrId: SEND_WRID,
        sg: [{ mr, length: s.size }],
        flags: SendFlags.SIGNALED | inline,
      })
    );
    const pending = new Int32Array(numQp).fill(RECV_WRID);
    if (s.server) {
      for (let i = 0; i < numQp; i++) {
        sends[i].post();
        pending[i] = SEND_WRID | RECV_WRID;
      }
    }
    const wait = completionWaiter(cq, s.events, numWc);
    const start = performance.now();
    let rcnt = 0, scnt = 0;
    while (rcnt < s.iters || scnt < s.iters) {
      let ne = wait();
      if (typeof ne !== "number") ne = await ne;
      for (let i = 0; i < ne; i++) {
        const wc = cq.completion(i);
        const id = wc.wrIdNumber;
        if (wc.status !== 0) {
          err(`Failed status ${wc.statusName} (${wc.status}) for wr_id ${id}`);
          return 1;
        }
        const q = index.get(wc.qpNum);
        if (q === undefined) {
          err(`Couldn't find QPN ${wc.qpNum.toString(16).padStart(6, "0")}`);
          return 1;
        }
        if (id === SEND_WRID) scnt++;
        else if (id === RECV_WRID) {
          if (--routs <= numQp) {
            routs += postRecvs(recv, s.rxDepth - routs);
            if (routs < s.rxDepth) {
              err(`Couldn't post receive (${routs})`);
              return 1;
            }
          }
          rcnt++;
        } else {
          err(`Completion for unknown wr_id ${id}`);
          return 1;
        }
        pending[q] &= ~id;
        if (scnt < s.iters && !pending[q]) {
          sends[q].post();
          pending[q] = RECV_WRID | SEND_WRID;
        }
      }
    }
    const elapsed = performance.now() - start;
    for (const line of resultLines(s.size, s.iters, elapsed)) out(line);
    return 0;
  });
}
