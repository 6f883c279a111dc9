/**
 * The out-of-band TCP exchange of the libibverbs pingpong tools (default port 18515).
 *
 * Each side's address is one fixed-size text record `LLLL:QQQQQQ:PPPPPP:<32 hex GID>`
 * plus a NUL (52 bytes): LID, QP number and PSN in hex. The client connects, sends its
 * records, reads the server's, and sends `done` (with its NUL). The server accepts one
 * connection, reads the client's records, connects its QPs, then sends its own records
 * and waits for `done`.
 *
 * @module
 */

import net from "node:net";
import { type GidBytes, gidFromWire, gidToInet6, gidToWire } from "./gid.ts";
import { Wire } from "./wire.ts";

/** The default TCP port of the pingpong tools. */
export const PINGPONG_TCP_PORT = 18515;

/** One record's size on the wire: the text and its NUL. */
export const DEST_RECORD_SIZE = "0000:000000:000000:00000000000000000000000000000000".length + 1;

/** One side's address. */
export interface Dest {
  /** LID (0 on RoCE). */
  lid: number;
  /** QP number. */
  qpn: number;
  /** Initial packet sequence number (24 bits). */
  psn: number;
  /** GID, 16 bytes (all zero when no GID index was given). */
  gid: GidBytes;
}

function hex(v: number, width: number): string {
  return (v >>> 0).toString(16).padStart(width, "0");
}

/** Encodes a record (52 bytes, NUL-terminated). */
export function encodeDest(d: Dest): Uint8Array {
  const text = `${hex(d.lid, 4)}:${hex(d.qpn, 6)}:${hex(d.psn, 6)}:${gidToWire(d.gid)}`;
  const out = new Uint8Array(DEST_RECORD_SIZE);
  out.set(new TextEncoder().encode(text).subarray(0, DEST_RECORD_SIZE - 1));
  return out;
}

/** Decodes a record; fields that do not parse become 0 like `sscanf` leaves them. */
export function decodeDest(bytes: Uint8Array): Dest {
  const end = bytes.indexOf(0);
  const text = new TextDecoder().decode(end < 0 ? bytes : bytes.subarray(0, end));
  const [lid, qpn, psn, gid] = text.split(":");
  const num = (s: string | undefined) => {
    const v = parseInt(s ?? "", 16);
    return Number.isNaN(v) ? 0 : v;
  };
  return { lid: num(lid), qpn: num(qpn), psn: num(psn), gid: gidFromWire(gid ?? "") };
}

/**
 * The `  local address:  LID 0x..., QPN 0x..., PSN 0x..., GID ...` line. `sep` is the text
 * between the PSN and `GID` (`, `; ud_pingpong's local line has `: `).
 */
export function destLine(label: "local" | "remote", d: Dest, sep = ", "): string {
  const pad = label === "local" ? "  local address:  " : "  remote address: ";
  return `${pad}LID 0x${hex(d.lid, 4)}, QPN 0x${hex(d.qpn, 6)}, PSN 0x${hex(d.psn, 6)}${sep}GID ${
    gidToInet6(d.gid)
  }`;
}

/** A random 24-bit PSN. */
export function randomPsn(): number {
  return Math.floor(Math.random() * 0x1000000);
}

function encodeAll(mine: readonly Dest[], count: number): Uint8Array {
  const out = new Uint8Array(DEST_RECORD_SIZE * count);
  const zero: Dest = { lid: 0, qpn: 0, psn: 0, gid: new Uint8Array(16) };
  for (let i = 0; i < count; i++) out.set(encodeDest(mine[i] ?? zero), i * DEST_RECORD_SIZE);
  return out;
}

async function readAll(wire: Wire, count: number): Promise<Dest[]> {
  const out: Dest[] = [];
  for (let i = 0; i < count; i++) out.push(decodeDest(await wire.read(DEST_RECORD_SIZE)));
  return out;
}

const DONE = new Uint8Array([0x64, 0x6f, 0x6e, 0x65, 0]); // "done" and its NUL

/**
 * Client side: connects to `host:port`, sends `count` records (missing ones as zeros,
 * like srq_pingpong's fixed table), reads the server's `count` records, sends `done`.
 */
export async function clientExchange(
  host: string,
  port: number,
  mine: readonly Dest[],
  count = mine.length,
): Promise<Dest[]> {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const s = net.connect({ host, port });
    s.once("connect", () => resolve(s));
    s.once("error", (e) => reject(new Error(`Couldn't connect to ${host}:${port}: ${e.message}`)));
  });
  const wire = new Wire(socket);
  try {
    await wire.write(encodeAll(mine, count));
    const remote = await readAll(wire, count);
    await wire.write(DONE);
    return remote;
  } finally {
    wire.close();
  }
}

/**
 * Server side: listens on `port`, accepts one connection, reads `count` records, calls
 * `connect(remote)` (bring the QPs to RTS before answering, as the C server does),
 * sends its own records and waits for the client's `done`.
 */
export async function serverExchange(
  port: number,
  mine: readonly Dest[],
  connect: (remote: Dest[]) => void | Promise<void>,
  count = mine.length,
): Promise<Dest[]> {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const server = net.createServer();
    server.once("error", (e) => reject(new Error(`Couldn't listen to port ${port}: ${e.message}`)));
    server.once("connection", (s) => {
      server.close();
      resolve(s);
    });
    server.listen({ port });
  });
  const wire = new Wire(socket);
  try {
    const remote = await readAll(wire, count);
    await connect(remote);
    await wire.write(encodeAll(mine, count));
    await wire.read(DONE.length, true);
    return remote;
  } finally {
    wire.close();
  }
}
