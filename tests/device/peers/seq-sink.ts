/**
 * Peer: an RC sink over rdma_cm that checks sequence numbers. Listens on `address`, reports
 * `{ready, port}`, and serves `connections` connections, each as it arrives (a connection that
 * hangs does not hold up the next): it receives 8-byte messages `[seq u32, ~seq u32]`
 * (little-endian), counts those in order, out of order and corrupt, until a message with seq
 * 0xffffffff ends the stream; then it sends back the counts as JSON and reports them as
 * `{served, ...counts}`. A connection that goes away first reports `{served, disconnected}`.
 *
 * Usage: seq-sink.ts <address> [connections]
 */

import process from "node:process";
import { type CmId, cmListen } from "../../lib.ts";
import { Endpoint } from "./endpoint.ts";
import { report } from "./spawn.ts";

const [address, countArg] = process.argv.slice(2);
const connections = Number(countArg ?? 1);
const listener = cmListen({ hostname: address, port: 0, backlog: 8 });
report({ ready: true, port: listener.addr.port });

async function serve(req: CmId, c: number): Promise<void> {
  const ep = new Endpoint(req, { depth: 64, slot: 64 });
  try {
    await req.accept({}, { timeout: 60_000 });
    const gone = req.waitDisconnected().then(() => null);
    let expected = 0, inOrder = 0, outOfOrder = 0, corrupt = 0;
    for (;;) {
      const m = await Promise.race([ep.recv(600_000).catch(() => null), gone]);
      if (m === null) {
        report({ served: c, disconnected: true, inOrder, outOfOrder, corrupt });
        return;
      }
      const v = new DataView(m.bytes.buffer, m.bytes.byteOffset, m.bytes.byteLength);
      const seq = v.getUint32(0, true);
      if (seq === 0xffffffff) break;
      if (((v.getUint32(4, true) ^ seq) >>> 0) !== 0xffffffff) corrupt++;
      else if (seq === expected) inOrder++;
      else outOfOrder++;
      expected = seq + 1;
    }
    const counts = { inOrder, outOfOrder, corrupt };
    await ep.sendUnlessGone(new TextEncoder().encode(JSON.stringify(counts)), gone);
    report({ served: c, ...counts });
    await req.waitDisconnected({ timeout: 120_000 }).catch(() => {});
    await req.disconnect({ timeout: 10_000 });
  } finally {
    ep.close();
  }
}

const tasks: Promise<void>[] = [];
for (let c = 0; c < connections; c++) {
  const req = await listener.accept({ timeout: 600_000 });
  tasks.push(serve(req, c).catch((e) => report({ served: c, error: String(e) })));
}
await Promise.all(tasks);
listener.close();
report({ done: true });
