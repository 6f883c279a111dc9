/**
 * Peer: an RC echo server over rdma_cm. Listens on `address` (ephemeral
 * port), reports `{ready, port}`, and serves `count` connections (all at once
 * when `concurrent`): creates the QP on the incoming id with this library's
 * PD/CQ, posts receives, accepts with private data "welcome:<n>", answers each
 * message "ping…" with "pong…" (a pong whose completion the client's disconnect
 * overtakes is not waited for, and counted), and when the client disconnects
 * reports `{served}` and tears its side down; at the end `{done, unconfirmed}`.
 *
 * Usage: cm-rc-server.ts <address> <count> [concurrent]
 */

import process from "node:process";
import { ClosedError, type CmId, cmListen, WcStatus, WorkCompletionError } from "../../lib.ts";
import { Endpoint } from "./endpoint.ts";
import { report, text } from "./spawn.ts";

const [address, countArg, mode] = process.argv.slice(2);
const count = Number(countArg);
const listener = cmListen({ address, port: 0, backlog: 32 });
report({ ready: true, port: listener.addr.port });

let unconfirmed = 0;

async function serve(req: CmId, n: number): Promise<void> {
  const ep = new Endpoint(req);
  try {
    const ev = await req.accept(
      {
        privateData: new TextEncoder().encode(`welcome:${n}`),
        responderResources: 1,
        initiatorDepth: 1,
      },
      { timeout: 20_000 },
    );
    report({ accepted: n, request: text(req.request!.privateData), established: ev?.name });
    let messages = 0;
    const disconnected = req.waitDisconnected().then(() => null);
    for (;;) {
      // The peer's disconnect ends the pending receive: on iWARP the QP is flushed
      // (WR_FLUSH_ERR) even before DISCONNECTED arrives; a closed CQ ends it too.
      const r = ep.recv(60_000).catch((e) => {
        if (e instanceof WorkCompletionError && e.status === WcStatus.WR_FLUSH_ERR) return null;
        if (e instanceof ClosedError) return null;
        throw e;
      });
      const got = await Promise.race([r, disconnected]);
      if (got === null) break;
      const msg = text(got.bytes);
      messages++;
      const pong = new TextEncoder().encode(msg.replace("ping", "pong"));
      if (!(await ep.sendUnlessGone(pong, disconnected))) {
        unconfirmed++;
        break;
      }
    }
    await req.disconnect();
    report({ served: n, messages, qpClosed: ep.qp.closed });
  } finally {
    ep.close();
  }
}

const tasks: Promise<void>[] = [];
for (let i = 0; i < count; i++) {
  const req = await listener.accept({ timeout: 60_000 });
  const t = serve(req, i);
  if (mode === "concurrent") tasks.push(t);
  else await t;
}
await Promise.all(tasks);
listener.close();
// pongs whose completion the client's disconnect overtook (their ACK lost or late)
report({ done: true, unconfirmed });
