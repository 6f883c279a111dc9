/**
 * Peer for the stream tests: one process, several roles, JSON-line reports.
 *
 *   echo <address> <count> [resets]   listen (ephemeral port), report {ready, port}; serve
 *                                      `count` connections one after another: echo every byte
 *                                      until end of stream, closeWrite, close; report {served};
 *                                      up to `resets` connections reset before any byte (a
 *                                      client whose connect failed on its side) are not counted
 *   duplex <address> <port> <writes> <seed>
 *                                      connect; write `writes` chunks of log-uniform random
 *                                      size (1 B – 1 MiB) while reading everything the other
 *                                      side sends; closeWrite after the last chunk; report
 *                                      {sent, sentSum, received, receivedSum} after end of stream
 *   slow <address> <port> <chunk> <ms>
 *                                      connect; read at most `chunk` bytes every `ms`,
 *                                      reporting {read} each time, until end of stream
 *   idle <address> <port>             connect, report {connected}, then neither read nor
 *                                      write (the test kills this process)
 *
 * Usage: stream-peer.ts <role> ...
 */

import process from "node:process";
import { connect, ConnectionResetError, listen, type RdmaConn } from "../../lib.ts";
import { report } from "./spawn.ts";
import { Checksum, RandomStream } from "./stream-data.ts";

const [role, ...args] = process.argv.slice(2);

async function echo(address: string, count: number, resets: number) {
  const listener = listen({ hostname: address, port: 0 });
  report({ ready: true, port: listener.addr.port });
  const buf = new Uint8Array(1 << 16);
  let dropped = 0;
  for (let i = 0; i < count; i++) {
    let step = "accept";
    let bytes = 0;
    let conn: RdmaConn | undefined;
    try {
      conn = await listener.accept({ timeout: 120_000 });
      step = "echo";
      for (let n; (n = await conn.read(buf)) !== null;) {
        bytes += n;
        await conn.write(buf.subarray(0, n));
      }
      step = "closeWrite";
      await conn.closeWrite();
      step = "close";
      await conn[Symbol.asyncDispose]();
      if (count <= 10 || i === count - 1) report({ served: i, bytes });
    } catch (e) {
      // the client failed to connect and tries again (`resets`: stream.test.ts's cycles)
      if (
        step === "echo" && bytes === 0 && e instanceof ConnectionResetError && dropped++ < resets
      ) {
        console.error(`echo: connection ${i + 1} of ${count} reset before any data: not counted`);
        await conn?.[Symbol.asyncDispose]();
        i--;
        continue;
      }
      console.error(`echo: connection ${i + 1} of ${count} failed in ${step}`);
      throw e;
    }
  }
  listener.close();
}

async function duplex(address: string, port: number, writes: number, seed: number) {
  const conn = await connect({ hostname: address, port, timeout: 30_000 });
  report({ connected: true });
  const reading = (async () => {
    const sum = new Checksum();
    const buf = new Uint8Array(1 << 20);
    for (let n; (n = await conn.read(buf)) !== null;) sum.update(buf, n);
    return sum;
  })();
  const src = new RandomStream(seed);
  const sent = new Checksum();
  for (let i = 0; i < writes; i++) {
    const chunk = src.next();
    sent.update(chunk, chunk.length);
    await conn.write(chunk);
  }
  await conn.closeWrite();
  const got = await reading;
  report({ sent: sent.bytes, sentSum: sent.value, received: got.bytes, receivedSum: got.value });
  await conn[Symbol.asyncDispose]();
}

async function slow(address: string, port: number, chunk: number, ms: number) {
  const conn = await connect({ hostname: address, port, timeout: 30_000 });
  report({ connected: true });
  const buf = new Uint8Array(chunk);
  let total = 0;
  for (let n; (n = await conn.read(buf)) !== null;) {
    total += n;
    report({ read: total });
    await new Promise((r) => setTimeout(r, ms));
  }
  report({ done: total });
  await conn[Symbol.asyncDispose]();
}

async function idle(address: string, port: number) {
  const conn = await connect({ hostname: address, port, timeout: 30_000 });
  report({ connected: true, local: conn.localAddr.port });
  await new Promise(() => {}); // until killed
}

switch (role) {
  case "echo":
    await echo(args[0], Number(args[1]), Number(args[2] ?? 0));
    break;
  case "duplex":
    await duplex(args[0], Number(args[1]), Number(args[2]), Number(args[3]));
    break;
  case "slow":
    await slow(args[0], Number(args[1]), Number(args[2]), Number(args[3]));
    break;
  case "idle":
    await idle(args[0], Number(args[1]));
    break;
  default:
    throw new Error(`unknown role ${role}`);
}
process.exit(0);
