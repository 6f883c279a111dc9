/**
 * rc_pingpong — `ibv_rc_pingpong` over this library: one RC QP each side, SEND ping-pong,
 * the same flags, TCP address exchange and result lines as the C tool, so either side
 * can be the C program.
 *
 * ```sh
 * deno run --allow-ffi --allow-net jsr:@rdma/verbs/examples/rc_pingpong -g 1         # server
 * bun examples/rc_pingpong.ts -g 1 -e 10.0.2.15                                       # client
 * ```
 *
 * @module
 */

import { AccessFlags, bytesToMtu, LinkLayer, openDevice, QpType, SendFlags } from "../mod.ts";
import { err, out, runTool, type ToolSpec } from "./_common/cli.ts";
import {
  clientExchange,
  type Dest,
  destLine,
  randomPsn,
  serverExchange,
} from "./_common/exchange.ts";
import { gidFromText, hasInterfaceId, zeroGid } from "./_common/gid.ts";
import { pingpongLoop } from "./_common/loop.ts";
import {
  PINGPONG_PERMISSIONS,
  PINGPONG_SYNOPSIS,
  pingpongOptions,
  pingpongSettings,
  postRecvs,
  RECV_WRID,
  SEND_WRID,
} from "./_common/pingpong.ts";

const SIZE = 4096;

const SPEC: ToolSpec = {
  name: "rc_pingpong",
  synopsis: PINGPONG_SYNOPSIS,
  options: pingpongOptions(SIZE),
  maxPositionals: 1,
  permissions: PINGPONG_PERMISSIONS,
};

if (import.meta.main) {
  await runTool(SPEC, async ({ values, positionals }) => {
    const s = pingpongSettings(values, positionals, SIZE);
    using ctx = openDevice(s.device);
    const channel = s.events ? ctx.createCompChannel() : undefined;
    const pd = ctx.allocPd();
    const mr = pd.allocBuffer(s.size, { access: AccessFlags.LOCAL_WRITE });
    mr.buffer.fill(0x7b);
    const cq = ctx.createCq({ cqe: s.rxDepth + 1, channel, pollBatch: 2 });
    const qp = pd.createQp({
      type: QpType.RC,
      sendCq: cq,
      cap: { maxSendWr: 1, maxRecvWr: s.rxDepth, maxSendSge: 1, maxRecvSge: 1 },
    });
    const inline = qp.cap.maxInlineData >= s.size ? SendFlags.INLINE : 0;
    qp.toInit({ port: s.ibPort });

    const recv = qp.prepareRecv({ wrId: RECV_WRID, sg: [{ mr, length: s.size }] });
    const send = qp.prepareSend({
      wrId: SEND_WRID,
      sg: [{ mr, length: s.size }],
      flags: SendFlags.SIGNALED | inline,
    });
    const routs = postRecvs(recv, s.rxDepth);
    if (routs < s.rxDepth) {
      err(`Couldn't post receive (${routs})`);
      return 1;
    }

    const port = ctx.queryPort(s.ibPort);
    if (port.linkLayer !== LinkLayer.ETHERNET && !port.lid) {
      err("Couldn't get local LID");
      return 1;
    }
    const gid = s.gidIndex >= 0 ? gidFromText(ctx.queryGid(s.ibPort, s.gidIndex)) : zeroGid();
    const me: Dest = { lid: port.lid, qpn: qp.qpNum, psn: randomPsn(), gid };
    out(destLine("local", me));

    const connect = (rem: Dest) => {
      qp.toRtr(
        {
          qpNum: rem.qpn,
          psn: rem.psn,
          lid: rem.lid,
          gid: hasInterfaceId(rem.gid) ? rem.gid : undefined,
        },
        {
          port: s.ibPort,
          pathMtu: bytesToMtu(s.mtu),
          sl: s.sl,
          sgidIndex: Math.max(0, s.gidIndex),
        },
      );
      qp.toRts({ psn: me.psn });
    };
    const [rem] = s.server
      ? await clientExchange(s.server, s.tcpPort, [me])
      : await serverExchange(s.tcpPort, [me], ([r]) => connect(r));
    out(destLine("remote", rem));
    if (s.server) connect(rem);

    return await pingpongLoop({
      cq,
      send,
      recv,
      routs,
      rxDepth: s.rxDepth,
      iters: s.iters,
      size: s.size,
      sendsFirst: Boolean(s.server),
      events: s.events,
    });
  });
}
