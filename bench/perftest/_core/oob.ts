/**
 * perftest's out-of-band exchange, on the wire, in both of its forms:
 *
 * - "Ethernet" (the default): one TCP connection to the server's port (18515). Every
 *   exchange is symmetric: the client writes its bytes and then reads the server's; the
 *   server reads first and then writes. A QP's address ("handshake") is one text record,
 *   `LID:OUT_READS:QPN:PSN:RKEY:VADDR:` in hex (4, 4, 6, 6, 8 and 16 digits), then, when a
 *   GID is in use, the 16 GID bytes as `%02x:` each, then `SRQN:` (8 digits) and a NUL:
 *   108 bytes (59 bytes without a GID: no GID part and no trailing colon). The run ends
 *   with a last handshake after which both sides write `done` and its NUL.
 * - "rdma_cm" (-R): the same exchanges as SENDs over a separate RC connection made with
 *   rdma_cm on the same port; a handshake is the 56-byte `struct pingpong_dest` with its
 *   integers in big-endian order (lid, out_reads, qpn, psn, rkey, 4 bytes of padding, vaddr,
 *   gid, srqn, gid_index); other exchanges are the raw bytes. Every message is one SEND into
 *   the peer's single posted 56-byte receive, which it re-posts after reading.
 *
 * On top of either: the version exchange (16 bytes of text, e.g. `6.06`; perftest refuses
 * peers older than 5.70), the system data (page size and cache line size, 4 bytes each,
 * big-endian; both sides take the larger), the path MTU (the `enum ibv_mtu` value as text
 * in 2 bytes; both take the smaller) and the bandwidth report (size, iterations, peak,
 * average, message rate: 8 bytes each, big-endian, doubles as IEEE-754).
 *
 * @module
 */

import net from "node:net";
import { Wire } from "../../../examples/_common/wire.ts";
import {
  AccessFlags,
  type CmId,
  type CompletionQueue,
  type CompletionWaitOptions,
  type MemoryRegion,
  type Mtu,
  type PreparedRecv,
  type PreparedSend,
  WcStatus,
  WrOpcode,
} from "../../../mod.ts";
import {
  cmAccept,
  cmClose,
  cmConnect,
  cmContext,
  cmCreateQp,
  cmListen,
  cmStopListening,
} from "./bringup.ts";

/** What one side tells the other about one QP (`struct pingpong_dest`). */
export interface Dest {
  lid: number;
  outReads: number;
  qpn: number;
  psn: number;
  rkey: number;
  /** Remote buffer address (below 2^53 on every Linux ABI). */
  vaddr: number;
  /** 16 bytes, network order. */
  gid: Uint8Array;
  srqn: number;
}

/** The protocol revision these tools speak (the version string of Debian's perftest 4.5). */
export const VERSION = "6.06";
/** perftest refuses peers older than this. */
export const MIN_PEER_VERSION = 5.70;
/** A TCP handshake record with a GID, and without. */
export const DEST_TEXT_SIZE = 108;
export const DEST_TEXT_SIZE_NO_GID = 59;
/** `sizeof(struct pingpong_dest)`: the rdma_cm handshake and receive buffer size. */
export const DEST_BINARY_SIZE = 56;

/** One side of the exchange. */
export interface OobChannel {
  /** "Ethernet" or "rdma_cm", as perftest names it in its banner. */
  readonly method: "Ethernet" | "rdma_cm";
  /** Sends `mine` and receives `size` bytes (the client writes first, the server reads first). */
  xchg(mine: Uint8Array, size: number): Promise<Uint8Array>;
  /** Exchanges one QP address. */
  handshake(mine: Dest): Promise<Dest>;
  /** Ends the exchange; with `done`, TCP first writes perftest's `done`. */
  close(done: boolean): Promise<void>;
}

function hex(v: number, width: number): string {
  return Math.trunc(v).toString(16).padStart(width, "0");
}

/** Encodes a TCP handshake record (with or without the GID part), NUL-terminated. */
export function encodeDestText(d: Dest, withGid: boolean): Uint8Array {
  let t = `${hex(d.lid, 4)}:${hex(d.outReads, 4)}:${hex(d.qpn >>> 0, 6)}:${hex(d.psn, 6)}:` +
    `${hex(d.rkey >>> 0, 8)}:${hex(d.vaddr, 16)}`;
  if (withGid) {
    t += ":";
    for (const b of d.gid) t += `${hex(b, 2)}:`;
    t += `${hex(d.srqn >>> 0, 8)}:`;
  } else t += `:${hex(d.srqn >>> 0, 8)}`;
  const out = new Uint8Array(withGid ? DEST_TEXT_SIZE : DEST_TEXT_SIZE_NO_GID);
  out.set(new TextEncoder().encode(t).subarray(0, out.length - 1));
  return out;
}

/** Decodes a TCP handshake record; throws when it does not parse. */
export function decodeDestText(bytes: Uint8Array): Dest {
  const end = bytes.indexOf(0);
  const text = new TextDecoder().decode(end < 0 ? bytes : bytes.subarray(0, end));
  const f = text.split(":");
  const withGid = f.length >= 23;
  if (f.length < 7) throw new Error(`Couldn't parse line <${text}>`);
  const n = (s: string | undefined) => {
    const v = parseInt(s ?? "", 16);
    if (Number.isNaN(v)) throw new Error(`Couldn't parse line <${text}>`);
    return v;
  };
  const gid = new Uint8Array(16);
  if (withGid) { for (let i = 0; i < 16; i++) gid[i] = n(f[6 + i]); }
  return {
    lid: n(f[0]),
    outReads: n(f[1]),
    qpn: n(f[2]),
    psn: n(f[3]),
    rkey: n(f[4]),
    vaddr: n(f[5]),
    gid,
    srqn: n(f[withGid ? 22 : 6]),
  };
}

/** Encodes the rdma_cm handshake: `struct pingpong_dest`, big-endian integers. */
export function encodeDestBinary(d: Dest, gidIndex: number): Uint8Array {
  const out = new Uint8Array(DEST_BINARY_SIZE);
  const v = new DataView(out.buffer);
  v.setInt32(0, d.lid);
  v.setInt32(4, d.outReads);
  v.setInt32(8, d.qpn);
  v.setInt32(12, d.psn);
  v.setUint32(16, d.rkey >>> 0);
  v.setBigUint64(24, BigInt(d.vaddr));
  out.set(d.gid, 32);
  v.setUint32(48, d.srqn >>> 0);
  v.setInt32(52, gidIndex);
  return out;
}

/** Decodes the rdma_cm handshake. */
export function decodeDestBinary(bytes: Uint8Array): Dest {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return {
    lid: v.getInt32(0),
    outReads: v.getInt32(4),
    qpn: v.getInt32(8),
    psn: v.getInt32(12),
    rkey: v.getUint32(16),
    vaddr: Number(v.getBigUint64(24)),
    gid: bytes.slice(32, 48),
    srqn: v.getUint32(48),
  };
}

const DONE = new Uint8Array([0x64, 0x6f, 0x6e, 0x65, 0]); // "done" and its NUL

/** perftest's "Ethernet" exchange over TCP. */
export class TcpChannel implements OobChannel {
  readonly method = "Ethernet" as const;
  readonly #wire: Wire;
  readonly #client: boolean;
  readonly #withGid: boolean;

  private constructor(wire: Wire, client: boolean, withGid: boolean) {
    this.#wire = wire;
    this.#client = client;
    this.#withGid = withGid;
  }

  /** Server: listens on `port` (every IPv4 address) and takes one connection. */
  static async accept(port: number, withGid: boolean): Promise<TcpChannel> {
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const server = net.createServer();
      server.once(
        "error",
        (e) => reject(new Error(`Couldn't listen to port ${port}: ${e.message}`)),
      );
      server.once("connection", (s) => {
        server.close();
        resolve(s);
      });
      server.listen({ port, host: "0.0.0.0" });
    });
    return new TcpChannel(new Wire(socket), false, withGid);
  }

  /**
   * Client: connects to `host:port`. A refused connection is retried for `patienceMs`
   * (perftest gives up at once; a server in a JS runtime may still be starting).
   */
  static async connect(
    host: string,
    port: number,
    withGid: boolean,
    patienceMs: number,
  ): Promise<TcpChannel> {
    const deadline = performance.now() + patienceMs;
    for (;;) {
      try {
        const socket = await new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect({ host, port, family: 4 });
          s.once("connect", () => resolve(s));
          s.once("error", reject);
        });
        return new TcpChannel(new Wire(socket), true, withGid);
      } catch (e) {
        if (performance.now() > deadline) {
          throw new Error(`Couldn't connect to ${host}:${port}: ${(e as Error).message}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  async xchg(mine: Uint8Array, size: number): Promise<Uint8Array> {
    if (this.#client) {
      await this.#wire.write(mine);
      return await this.#wire.read(size);
    }
    const theirs = await this.#wire.read(size);
    await this.#wire.write(mine);
    return theirs;
  }

  async handshake(mine: Dest): Promise<Dest> {
    const bytes = encodeDestText(mine, this.#withGid);
    return decodeDestText(await this.xchg(bytes, bytes.length));
  }

  async close(done: boolean): Promise<void> {
    try {
      if (done) await this.#wire.write(DONE);
    } finally {
      this.#wire.close();
    }
  }
}

const SYNC_WRID = 5;
const MSG_BUF = 64;

/** The verbs objects of the rdma_cm exchange. */
interface ChannelParts {
  sendCq: CompletionQueue;
  recvCq: CompletionQueue;
  mr: MemoryRegion;
  send: PreparedSend;
  recv: PreparedRecv;
}

/** Creates the channel's PD, CQs, QP and buffers on the id and posts the one receive. */
function setupChannel(id: CmId): ChannelParts {
  const ctx = cmContext(id);
  const pd = ctx.allocPd();
  const channel = ctx.createCompChannel();
  const sendCq = ctx.createCq({ cqe: 4, channel, pollBatch: 1 });
  const recvCq = ctx.createCq({ cqe: 4, channel, pollBatch: 1 });
  const qp = cmCreateQp(id, pd, {
    sendCq,
    recvCq,
    cap: { maxSendWr: 2, maxRecvWr: 2, maxSendSge: 1, maxRecvSge: 1 },
  });
  const mr = pd.allocBuffer(2 * MSG_BUF, { access: AccessFlags.LOCAL_WRITE });
  const send = qp.prepareSend({
    wrId: SYNC_WRID,
    opcode: WrOpcode.SEND,
    sg: [{ mr, offset: 0, length: DEST_BINARY_SIZE }],
  });
  const recv = qp.prepareRecv({
    wrId: SYNC_WRID,
    sg: [{ mr, offset: MSG_BUF, length: DEST_BINARY_SIZE }],
  });
  recv.post();
  return { sendCq, recvCq, mr, send, recv };
}

/**
 * perftest's "rdma_cm" exchange (-R): SENDs over an RC connection of its own, on the same
 * port as the test QPs. The server takes the first connection request; the client retries
 * while the server is not listening yet.
 */
export class CmChannel implements OobChannel {
  readonly method = "rdma_cm" as const;
  readonly #id: CmId;
  readonly #client: boolean;
  readonly #gidIndex: number;
  readonly #sendCq: CompletionQueue;
  readonly #recvCq: CompletionQueue;
  readonly #mr: MemoryRegion;
  readonly #send: PreparedSend;
  readonly #recv: PreparedRecv;
  readonly #wait: CompletionWaitOptions = { strategy: "event", max: 1 };

  private constructor(
    id: CmId,
    client: boolean,
    gidIndex: number,
    parts: ChannelParts,
  ) {
    this.#id = id;
    this.#client = client;
    this.#gidIndex = gidIndex;
    this.#sendCq = parts.sendCq;
    this.#recvCq = parts.recvCq;
    this.#mr = parts.mr;
    this.#send = parts.send;
    this.#recv = parts.recv;
  }

  /** Server side: listens on `port`, accepts one connection, stops listening. */
  static async accept(port: number, gidIndex: number): Promise<CmChannel> {
    const listener = cmListen(port);
    let parts: ChannelParts | undefined;
    try {
      const id = await cmAccept(listener, (id) => (parts = setupChannel(id)), {
        retryCount: 7,
        rnrRetryCount: 7,
      });
      return new CmChannel(id, false, gidIndex, parts!);
    } finally {
      cmStopListening(listener);
    }
  }

  /** Client side: connects to `host:port` (retrying while nobody listens). */
  static async connect(
    host: string,
    port: number,
    gidIndex: number,
    patienceMs: number,
  ): Promise<CmChannel> {
    let parts: ChannelParts | undefined;
    const id = await cmConnect(host, port, (id) => (parts = setupChannel(id)), {
      retryCount: 7,
      rnrRetryCount: 7,
    }, patienceMs);
    return new CmChannel(id, true, gidIndex, parts!);
  }

  async #write(bytes: Uint8Array): Promise<void> {
    if (bytes.length > DEST_BINARY_SIZE) throw new Error("an rdma_cm message is at most 56 bytes");
    this.#mr.buffer.set(bytes, 0);
    this.#send.setLength(0, 0, bytes.length);
    this.#send.post();
    await this.#sendCq.wait(this.#wait);
    const wc = this.#sendCq.completion(0);
    if (wc.status !== WcStatus.SUCCESS) throw new Error(`rdma_cm exchange: send ${wc.statusName}`);
  }

  async #read(size: number): Promise<Uint8Array> {
    await this.#recvCq.wait(this.#wait);
    const wc = this.#recvCq.completion(0);
    if (wc.status !== WcStatus.SUCCESS) {
      throw new Error(`rdma_cm exchange: receive ${wc.statusName}`);
    }
    const out = this.#mr.buffer.slice(MSG_BUF, MSG_BUF + size);
    this.#recv.post();
    return out;
  }

  async xchg(mine: Uint8Array, size: number): Promise<Uint8Array> {
    if (this.#client) {
      await this.#write(mine);
      return await this.#read(size);
    }
    const theirs = await this.#read(size);
    await this.#write(mine);
    return theirs;
  }

  async handshake(mine: Dest): Promise<Dest> {
    return decodeDestBinary(
      await this.xchg(encodeDestBinary(mine, this.#gidIndex), DEST_BINARY_SIZE),
    );
  }

  async close(_done: boolean): Promise<void> {
    await cmClose(this.#id, false);
  }
}

/** The 16-byte version text. */
function versionBytes(): Uint8Array {
  const out = new Uint8Array(16);
  out.set(new TextEncoder().encode(VERSION));
  return out;
}

function cString(bytes: Uint8Array): string {
  const end = bytes.indexOf(0);
  return new TextDecoder().decode(end < 0 ? bytes : bytes.subarray(0, end));
}

/** Exchanges versions; throws when the peer is older than perftest accepts. Returns its text. */
export async function exchangeVersions(ch: OobChannel): Promise<string> {
  const theirs = cString(await ch.xchg(versionBytes(), 16));
  if (!(parseFloat(theirs) >= MIN_PEER_VERSION)) {
    throw new Error(
      `the peer's version "${theirs}" is older than ${MIN_PEER_VERSION}, which this exchange needs`,
    );
  }
  return theirs;
}

function be32(v: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setInt32(0, v);
  return out;
}

/** Exchanges page and cache line sizes; returns the larger of each. */
export async function exchangeSysData(
  ch: OobChannel,
  cycleBuffer: number,
  cacheLine: number,
): Promise<{ cycleBuffer: number; cacheLine: number }> {
  const c = new DataView((await ch.xchg(be32(cycleBuffer), 4)).buffer).getInt32(0);
  const l = new DataView((await ch.xchg(be32(cacheLine), 4)).buffer).getInt32(0);
  return { cycleBuffer: Math.max(c, cycleBuffer), cacheLine: Math.max(l, cacheLine) };
}

/** Exchanges the path MTU (`enum ibv_mtu`); returns the smaller valid one. */
export async function exchangeMtu(ch: OobChannel, mtu: Mtu): Promise<Mtu> {
  const mine = new Uint8Array(2);
  mine[0] = 0x30 + mtu;
  const theirs = parseInt(cString(await ch.xchg(mine, 2)), 10);
  return theirs >= 1 && theirs <= 5 && mtu > theirs ? theirs as Mtu : mtu;
}

/** A bandwidth result as perftest exchanges it. */
export interface BwReport {
  size: number;
  iters: number;
  bwPeak: number;
  bwAvg: number;
  msgRate: number;
}

/** Exchanges bandwidth reports (each field in its own exchange); returns the peer's. */
export async function exchangeBwReport(ch: OobChannel, mine: BwReport): Promise<BwReport> {
  const u64 = async (v: number) => {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(Math.trunc(v)));
    return Number(new DataView((await ch.xchg(b, 8)).buffer).getBigUint64(0));
  };
  const f64 = async (v: number) => {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, v);
    return new DataView((await ch.xchg(b, 8)).buffer).getFloat64(0);
  };
  return {
    size: await u64(mine.size),
    iters: await u64(mine.iters),
    bwPeak: await f64(mine.bwPeak),
    bwAvg: await f64(mine.bwAvg),
    msgRate: await f64(mine.msgRate),
  };
}
