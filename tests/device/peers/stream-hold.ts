/**
 * Peer for the ref/unref tests of streams: starts one pending operation and lets the process end
 * by itself when nothing keeps it alive (no `process.exit`).
 *
 *   accept-ref | accept-unref <address>
 *                                   listen on an ephemeral port, report {ready, port}, start an
 *                                   accept() (the listener unref'd or not)
 *   read-ref | read-unref <address> <port>
 *                                   connect, report {ready}, start a read() (the connection
 *                                   unref'd or not)
 *
 * An operation that settles is reported ({settled}); with nothing else alive an unref'd one
 * never does, and the process exits with 0.
 */

import process from "node:process";
import { connect, listen } from "../../lib.ts";
import { report } from "./spawn.ts";

const [role, address, port] = process.argv.slice(2);
const settled = (what: string) => () => report({ settled: what });

if (role === "accept-ref" || role === "accept-unref") {
  const listener = listen({ hostname: address, port: 0 });
  if (role === "accept-unref") listener.unref();
  listener.accept().then(settled("accept"), settled("accept failed"));
  report({ ready: true, port: listener.addr.port });
} else if (role === "read-ref" || role === "read-unref") {
  const conn = await connect({ hostname: address, port: Number(port), timeout: 30_000 });
  if (role === "read-unref") conn.unref();
  conn.read(new Uint8Array(64)).then(settled("read"), settled("read failed"));
  report({ ready: true });
} else {
  throw new Error(`unknown role ${role}`);
}
