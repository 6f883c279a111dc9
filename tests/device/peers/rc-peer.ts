/**
 * Peer: one RC QP in another process, connected to the test's QP and kept alive until the test
 * kills the process. Reports `{qpNum}`, then posts receives and answers nothing.
 *
 * Usage: rc-peer.ts <device> <port> <gidIndex> <remoteQpNum>
 */

import process from "node:process";
import { openDevice, QpType } from "../../lib.ts";
import { report } from "./spawn.ts";

const [device, portArg, gidArg, remoteArg] = process.argv.slice(2);
const port = Number(portArg);
const gidIndex = Number(gidArg);
const ctx = openDevice(device);
const pd = ctx.allocPd();
const cq = ctx.createCq({ cqe: 256 });
const qp = pd.createQp({ type: QpType.RC, sendCq: cq, cap: { maxRecvWr: 128 } });
const mr = pd.allocBuffer(4096 * 128);
const gid = ctx.queryGid(port, gidIndex);
qp.activate({ qpNum: Number(remoteArg), psn: 0, gid }, {
  port,
  sgidIndex: gidIndex,
  pathMtu: ctx.queryPort(port).activeMtu,
});
for (let i = 0; i < 128; i++) {
  qp.postRecv({ wrId: i, sg: [{ mr, offset: 4096 * i, length: 4096 }] });
}
report({ qpNum: qp.qpNum });
// keep receiving until killed: re-post what completes
setInterval(() => {
  const n = cq.poll();
  for (let i = 0; i < n; i++) {
    const s = cq.completion(i).wrIdNumber % 128;
    qp.postRecv({ wrId: s, sg: [{ mr, offset: 4096 * s, length: 4096 }] });
  }
}, 1);
