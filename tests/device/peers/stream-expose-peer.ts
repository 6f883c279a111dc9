/**
 * Peer for the remote-buffer tests: connects to `<address> <port>`, exposes `<size>` bytes
 * (byte i = i & 0xff) for reading, writes the token on the stream, reports {exposed}, then waits
 * (the test reads its memory and kills this process).
 *
 * Usage: stream-expose-peer.ts <address> <port> <size>
 */

import process from "node:process";
import { connect } from "../../lib.ts";
import { report } from "./spawn.ts";

const [address, port, size] = process.argv.slice(2);
const conn = await connect({ hostname: address, port: Number(port), timeout: 30_000 });
const mem = conn.expose(Number(size), { read: true });
for (let i = 0; i < mem.length; i++) mem.buffer[i] = i & 0xff;
await conn.write(mem.token);
report({ exposed: mem.length });
// until killed (or the test closes the connection)
await conn.read(new Uint8Array(1));
conn.close();
await conn.released;
