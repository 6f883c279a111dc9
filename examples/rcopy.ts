/**
 * rcopy - librdmacm's `rcopy` over this library's rsocket-compatible streams: copies a file to
 * a server. Either side can be the C `rcopy`.
 *
 * ```sh
 * deno run --allow-ffi --allow-env --allow-read --allow-write jsr:@rdma/verbs/examples/rcopy
 * bun examples/rcopy.ts ./big.bin 10.0.2.15:/tmp/big.bin
 * ```
 *
 * The messages are the C tool's: a 16-byte header `{version u8 (0), command u8, len u16,
 * data u32, id u64}` in the host's byte order (little-endian here, as the C tool sends it),
 * OPEN (1) with the mode in `data` and the NUL-padded path (padded to 8 bytes), WRITE (3) with
 * the size as a u64 and then the bytes, CLOSE (2); each answered by a header with `command |
 * 0x80` and the status (an errno, 0 for success) in `data`. The server serves one client after
 * another until it is stopped.
 *
 * @module
 */

import { closeSync, fstatSync, openSync, readSync, writeSync } from "node:fs";
import process from "node:process";
import { connect, listen, type RdmaConn } from "../mod.ts";
import { err, intOption, out, runTool, type ToolSpec, UsageError } from "./_common/cli.ts";

const SPEC: ToolSpec = {
  name: "rcopy",
  synopsis: [
    "[-p port_number]  (starts the server)",
    "source server[:destination] [-p port_number]",
  ],
  options: {
    port: { short: "p", type: "string", arg: "port_number", help: "port (default 7427)" },
  },
  maxPositionals: 2,
  permissions: "--allow-ffi --allow-env --allow-read --allow-write",
  notes: [
    "",
    "source: file name and path; server: name or address; destination: file name and path",
    "(default: the source's).",
  ],
};

const CMD_OPEN = 1;
const CMD_CLOSE = 2;
const CMD_WRITE = 3;
const CMD_RESP = 0x80;
const HDR = 16;
const EINVAL = 22;
const EBUSY = 16;

/** Progress text without a newline (the C tool prints and flushes). */
const write = (s: string) => {
  process.stdout.write(s);
};

interface Header {
  version: number;
  command: number;
  len: number;
  data: number;
  id: bigint;
}

function encodeHeader(h: Header, extra = 0): Uint8Array {
  const b = new Uint8Array(HDR + extra);
  const v = new DataView(b.buffer);
  v.setUint8(0, h.version);
  v.setUint8(1, h.command);
  v.setUint16(2, h.len, true);
  v.setUint32(4, h.data >>> 0, true);
  v.setBigUint64(8, h.id, true);
  return b;
}

/** Reads exactly `len` bytes; null at end of stream. */
async function recvAll(conn: RdmaConn, buf: Uint8Array): Promise<Uint8Array | null> {
  for (let off = 0; off < buf.length;) {
    const n = await conn.read(buf.subarray(off));
    if (n === null) return null;
    off += n;
  }
  return buf;
}

async function recvHeader(conn: RdmaConn): Promise<Header | null> {
  const b = await recvAll(conn, new Uint8Array(HDR));
  if (!b) return null;
  const v = new DataView(b.buffer);
  const h = {
    version: v.getUint8(0),
    command: v.getUint8(1),
    len: v.getUint16(2, true),
    data: v.getUint32(4, true),
    id: v.getBigUint64(8, true),
  };
  if (h.version || h.len < HDR) {
    out(`invalid version ${h.version} or length ${h.len}`);
    return null;
  }
  return h;
}

async function sendResponse(conn: RdmaConn, h: Header, status: number): Promise<void> {
  await conn.write(
    encodeHeader({ version: 0, command: h.command | CMD_RESP, len: HDR, data: status, id: h.id }),
  );
}

async function getResponse(conn: RdmaConn, cmd: number): Promise<number> {
  const h = await recvHeader(conn);
  if (!h) return -1;
  if (h.len !== HDR || h.command !== (cmd | CMD_RESP)) {
    out(
      `invalid length ${h.len} or bad command response ${h.command.toString(16)}:${
        (cmd | CMD_RESP).toString(16)
      }`,
    );
    return -1;
  }
  return h.data;
}

function errnoOf(e: unknown): number {
  const code = (e as { errno?: number }).errno;
  return typeof code === "number" ? Math.abs(code) : EINVAL;
}

async function serve(conn: RdmaConn): Promise<void> {
  let fd = -1;
  try {
    for (;;) {
      const h = await recvHeader(conn);
      if (!h) return;
      if (h.command === CMD_OPEN) {
        write("opening: ");
        let status = 0;
        const path = await recvAll(conn, new Uint8Array(h.len - HDR));
        if (!path) return;
        const end = path.indexOf(0);
        const name = new TextDecoder().decode(end >= 0 ? path.subarray(0, end) : path);
        write(`${name}, `);
        if (fd >= 0) {
          out("cannot open another file");
          status = EBUSY;
        } else {
          try {
            fd = openSync(name, "w+", h.data & 0o7777);
          } catch (e) {
            out("unable to open destination file");
            status = errnoOf(e);
          }
        }
        await sendResponse(conn, h, status);
        if (status) return;
      } else if (h.command === CMD_CLOSE) {
        write("closing...");
        await sendResponse(conn, h, 0);
        if (fd >= 0) closeSync(fd);
        fd = -1;
        out("done");
      } else if (h.command === CMD_WRITE) {
        write("transferring");
        let status = 0;
        if (fd < 0) {
          out("...file not opened");
          status = EINVAL;
        } else if (h.len !== HDR + 8) {
          out(`...invalid message length ${h.len}`);
          status = EINVAL;
        } else {
          const sz = await recvAll(conn, new Uint8Array(8));
          if (!sz) return;
          const bytes = Number(new DataView(sz.buffer).getBigUint64(0, true));
          write(`...${bytes} bytes...`);
          const chunk = new Uint8Array(Math.min(bytes, 1 << 20) || 1);
          let left = bytes;
          while (left > 0) {
            const n = await conn.read(chunk.subarray(0, Math.min(left, chunk.length)));
            if (n === null) {
              out("...error receiving data");
              status = EINVAL;
              break;
            }
            writeSync(fd, chunk, 0, n);
            left -= n;
          }
        }
        await sendResponse(conn, h, status);
        if (status) return;
      } else {
        await sendResponse(conn, h, EINVAL);
        return;
      }
    }
  } finally {
    if (fd >= 0) closeSync(fd);
  }
}

async function server(port: number): Promise<number> {
  const listener = listen({ port, backlog: 1 });
  for (;;) {
    write("waiting for connection...");
    const conn = await listener.accept();
    out(`client: ${conn.remoteAddr.hostname}`);
    try {
      await serve(conn);
    } catch (e) {
      err(`rcopy: ${(e as Error).message}`);
    } finally {
      await conn[Symbol.asyncDispose]();
    }
  }
}

async function client(source: string, target: string, port: number): Promise<number> {
  const colon = target.indexOf(":");
  const host = colon >= 0 ? target.slice(0, colon) : target;
  const dest = colon >= 0 ? target.slice(colon + 1) : source;
  const conn = await connect({ hostname: host, port });
  let ret = 0;
  let fd = -1;
  let start = 0;
  let end = 0;
  let bytes = 0;
  try {
    write("opening...");
    fd = openSync(source, "r");
    const st = fstatSync(fd);
    bytes = st.size;
    const name = new TextEncoder().encode(dest);
    const pathLen = (name.length + 8) & ~7;
    const open = encodeHeader(
      { version: 0, command: CMD_OPEN, len: HDR + pathLen, data: st.mode, id: 0n },
      pathLen,
    );
    open.set(name, HDR);
    await conn.write(open);
    ret = await getResponse(conn, CMD_OPEN);
    if (ret) return ret;
    write("transferring");
    const msg = encodeHeader({ version: 0, command: CMD_WRITE, len: HDR + 8, data: 0, id: 0n }, 8);
    new DataView(msg.buffer).setBigUint64(HDR, BigInt(bytes), true);
    await conn.write(msg);
    write("...");
    start = performance.now();
    const chunk = new Uint8Array(Math.min(bytes, 1 << 20) || 1);
    for (let off = 0; off < bytes;) {
      const n = readSync(fd, chunk, 0, Math.min(chunk.length, bytes - off), off);
      if (n <= 0) throw new Error(`short read of ${source}`);
      await conn.write(chunk.subarray(0, n));
      off += n;
    }
    ret = await getResponse(conn, CMD_WRITE);
    end = performance.now();
    write("closing...");
    await conn.write(encodeHeader({ version: 0, command: CMD_CLOSE, len: HDR, data: 0, id: 0n }));
    const closed = await getResponse(conn, CMD_CLOSE);
    if (!closed) out("done");
    if (!ret) ret = closed;
  } finally {
    if (fd >= 0) closeSync(fd);
    await conn[Symbol.asyncDispose]();
  }
  if (!ret) {
    const usec = (end - start) * 1000;
    out(
      `${bytes} bytes in ${(usec / 1e6).toFixed(2)} seconds = ${
        ((bytes * 8) / (1000 * usec)).toFixed(2)
      } Gb/sec`,
    );
  }
  return ret ? 1 : 0;
}

if (import.meta.main) {
  await runTool(SPEC, ({ values, positionals }) => {
    const port = intOption(values, "port", 7427, 1, 65535);
    if (positionals.length === 0) return server(port);
    if (positionals.length !== 2) {
      throw new UsageError("a client needs: source server[:destination]");
    }
    return client(positionals[0], positionals[1], port);
  });
}
