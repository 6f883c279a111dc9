/**
 * Peer: a multicast receiver over rdma_cm (the mckey flow). Resolves the
 * group address from `address` on a UDP id, creates a UD QP, posts receives,
 * joins the group, reports `{joined, qkey}`, then reports each of `count`
 * datagrams, leaves the group and reports `{left}`.
 *
 * Usage: cm-mc-recv.ts <address> <group> <count>
 */

import process from "node:process";
import { CmEventChannel } from "../../lib.ts";
import { Endpoint } from "./endpoint.ts";
import { report, text } from "./spawn.ts";

const [address, group, countArg] = process.argv.slice(2);
const count = Number(countArg);
const channel = new CmEventChannel();
const id = channel.createId("UDP");
await id.resolveAddress({ address: group }, { source: { address }, timeout: 20_000 });
const ep = new Endpoint(id);
const joined = await id.joinMulticast({ address: group }, { timeout: 20_000 });
report({ joined: true, qkey: joined.ud!.qkey, qpNum: joined.ud!.qpNum });
for (let i = 0; i < count; i++) {
  const m = await ep.recv(30_000);
  report({ datagram: text(m.bytes), srcQp: m.srcQp });
}
id.leaveMulticast({ address: group });
report({ left: true });
id.close();
ep.close();
channel.close();
report({ done: true });
