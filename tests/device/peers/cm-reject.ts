/**
 * Peer: listens on `address` (ephemeral port), reports `{ready, port}`, and for
 * each of `count` connection requests reports the request's private data and
 * parameters, then rejects it with private data "reject:<request text>" (or,
 * with `fill N`, N bytes of 0x5a).
 *
 * Usage: cm-reject.ts <address> <count> [fill N]
 */

import process from "node:process";
import { cmListen } from "../../lib.ts";
import { report, text } from "./spawn.ts";

const [address, countArg, opt, fillArg] = process.argv.slice(2);
const count = Number(countArg);
const listener = cmListen({ address, port: 0 });
report({ ready: true, port: listener.addr.port });
for (let i = 0; i < count; i++) {
  const req = await listener.accept({ timeout: 30_000 });
  const pd = req.request!.privateData;
  report({
    request: text(pd),
    length: pd?.length ?? 0,
    bytes: pd ? [...pd] : [],
    initiatorDepth: req.request!.conn?.initiatorDepth,
    responderResources: req.request!.conn?.responderResources,
    qpNum: req.request!.conn?.qpNum,
    peer: req.peerAddress,
    local: req.localAddress,
  });
  const data = opt === "fill"
    ? new Uint8Array(Number(fillArg)).fill(0x5a)
    : new TextEncoder().encode(`reject:${text(pd)}`);
  req.reject(data);
}
listener.close();
report({ done: true });
