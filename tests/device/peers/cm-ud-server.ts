/**
 * Peer: a UD server over rdma_cm (the udaddy flow). Listens in the UDP port
 * space, reports `{ready, port}`; for one request creates a UD QP on the new
 * id, posts receives, accepts (SIDR reply with private data "ud-welcome"),
 * then for `count` datagrams reports each and answers it "echo:<text>" through
 * an AH made from the receive completion. Reports `{done}`.
 *
 * Usage: cm-ud-server.ts <address> <count>
 */

import process from "node:process";
import { cmListen, RDMA_UDP_QKEY } from "../../lib.ts";
import { Endpoint } from "./endpoint.ts";
import { report, text } from "./spawn.ts";

const [address, countArg] = process.argv.slice(2);
const count = Number(countArg);
const listener = cmListen({ address, port: 0, portSpace: "UDP" });
report({ ready: true, port: listener.addr.port });
const req = await listener.accept({ timeout: 30_000 });
const ep = new Endpoint(req, { replyAh: true });
await req.accept({ privateData: new TextEncoder().encode("ud-welcome") });
report({ accepted: true, request: text(req.request!.privateData), qpNum: ep.qp.qpNum });
for (let i = 0; i < count; i++) {
  const m = await ep.recv(30_000);
  report({ datagram: text(m.bytes), srcQp: m.srcQp });
  await ep.send(new TextEncoder().encode(`echo:${text(m.bytes)}`), {
    ah: m.ah!,
    remoteQpn: m.srcQp,
    remoteQkey: RDMA_UDP_QKEY,
  });
  m.ah!.close();
}
req.close();
ep.close();
listener.close();
report({ done: true });
