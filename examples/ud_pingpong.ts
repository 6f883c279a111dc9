/**
 * ud_pingpong - `ibv_ud_pingpong` over this library: one UD QP each side, SENDs through an
 * address handle (Q_Key 0x11111111), receive buffers with room for the 40-byte GRH; the
 * same flags, TCP address exchange and result lines as the C tool.
 *
 * ```sh
 * deno run --allow-ffi --allow-net jsr:@rdma/verbs/examples/ud_pingpong -g 1           # server
 * bun examples/ud_pingpong.ts -g 1 10.0.2.15                                           # client
 * ```
 *
 * @module
 */

import { AccessFlags, openDevice, QpType, SendFlags } from "../verbs.ts";
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

const SIZE = 1024;
const GRH = 40;
const QKEY = 0x11111111;

const SPEC: ToolSpec = {
  name: "ud_pingpong",
  synopsis: PINGPONG_SYNOPSIS,
  options: pingpongOptions(SIZE, {}, false),
  maxPositionals: 1,
  permissions: PINGPONG_PERMISSIONS,
};

if (import.meta.main) {
  await runTool(SPEC, async ({ values, positionals }) => {
    const s = pingpongSettings(values, positionals, SIZE);
    using ctx = openDevice(s.device);
    const port = ctx.queryPort(s.ibPort);
    if (s.size > port.activeMtuBytes) {
      err(`Requested size larger than port MTU (${port.activeMtuBytes})`);
      return 1;
    }
    const channel = s.events ? ctx.createCompChannel() : undefined;
    const pd = ctx.allocPd();
    const mr = pd.allocBuffer(s.size + GRH, { access: AccessFlags.LOCAL_WRITE });
    mr.buffer.fill(0x7b);
    const cq = ctx.createCq({ cqe: s.rxDepth + 1, channel, pollBatch: 2 });
    const qp = pd.createQp({
      type: QpType.UD,
      sendCq: cq,
      cap: { maxSendWr: 1, maxRecvWr: s.rxDepth, maxSendSge: 1, maxRecvSge: 1 },
    });
    const inline = qp.cap.maxInlineData >= s.size ? SendFlags.INLINE : 0;
    qp.toInit({ port: s.ibPort, qkey: QKEY });

    const recv = qp.prepareRecv({ wrId: RECV_WRID, sg: [{ mr, length: s.size + GRH }] });
    const routs = postRecvs(recv, s.rxDepth);
    if (routs < s.rxDepth) {
      err(`Couldn't post receive (${routs})`);
      return 1;
    }

    const gid = s.gidIndex >= 0 ? gidFromText(ctx.queryGid(s.ibPort, s.gidIndex)) : zeroGid();
    const me: Dest = { lid: port.lid, qpn: qp.qpNum, psn: randomPsn(), gid };
    out(destLine("local", me, ": "));

    const connect = (rem: Dest) => {
      qp.toRtr();
      qp.toRts({ psn: me.psn });
      return pd.createAh({
        port: s.ibPort,
        dlid: rem.lid,
        sl: s.sl,
        grh: hasInterfaceId(rem.gid)
          ? { dgid: rem.gid, sgidIndex: Math.max(0, s.gidIndex), hopLimit: 1 }
          : undefined,
      });
    };
    let ah: ReturnType<typeof connect> | undefined;
    const [rem] = s.server
      ? await clientExchange(s.server, s.tcpPort, [me])
      : await serverExchange(s.tcpPort, [me], ([r]) => void (ah = connect(r)));
    out(destLine("remote", rem));
    if (s.server) ah = connect(rem);

    const send = qp.prepareSend({
      wrId: SEND_WRID,
      sg: [{ mr, offset: GRH, length: s.size }],
      flags: SendFlags.SIGNALED | inline,
      ud: { ah: ah!, remoteQpn: rem.qpn, remoteQkey: QKEY },
    });
    return await pingpongLoop({ cq, send, recv, routs }, s);
  });
}
