/**
 * rping - `rping` over this library: an RC connection through rdma_cm and, per ping,
 * the client advertises a source buffer `{buf, rkey, size}` (network byte order, 16
 * bytes), the server RDMA-READs it, says "go ahead", the client advertises a sink buffer,
 * the server RDMA-WRITEs the data back and says "go ahead" again. Either side can be
 * the C `rping`.
 *
 * ```sh
 * deno run --allow-ffi --allow-net jsr:@rdma/verbs/examples/rping -s -a 10.0.2.15 -v
 * bun examples/rping.ts -c -a 10.0.2.15 -C 10 -V -v
 * ```
 *
 * @module
 */

import {
  AccessFlags,
  awaitCompletions,
  cmConnect,
  type CmId,
  cmListen,
  type CompletionQueue,
  type MemoryRegion,
  type ProtectionDomain,
  type QueuePair,
  WcOpcode,
  WcStatus,
  WrOpcode,
} from "../cm.ts";
import {
  countOption,
  err,
  intOption,
  out,
  runTool,
  stringOption,
  type ToolSpec,
  UsageError,
} from "./_common/cli.ts";

const SQ_DEPTH = 16;
const BUFSIZE = 64 * 1024;
/** The C tool's minimum: room for the longest "rdma-ping-<int>: " prefix and the NUL. */
const MIN_BUFSIZE = "2147483647".length + 1 + "rdma-ping-%d: ".length + 1;
const INFO_SIZE = 16;

const SPEC: ToolSpec = {
  name: "rping",
  synopsis: [
    "-s [-vV] [-S size] [-C count] [-a addr] [-p port]",
    "-c [-vV] [-S size] [-C count] [-I addr] -a addr [-p port]",
  ],
  options: {
    server: { short: "s", type: "boolean", help: "server side" },
    client: { short: "c", type: "boolean", help: "client side" },
    addr: { short: "a", type: "string", arg: "addr", help: "address (server: bind address)" },
    source: { short: "I", type: "string", arg: "addr", help: "source address to bind to (client)" },
    port: { short: "p", type: "string", arg: "port", help: "port (default 7174)" },
    size: { short: "S", type: "string", arg: "size", help: "ping data size (default 64)" },
    count: {
      short: "C",
      type: "string",
      arg: "count",
      help: "ping count times (default: forever)",
    },
    verbose: {
      short: "v",
      type: "boolean",
      multiple: true,
      help: "display ping data to stdout",
    },
    validate: { short: "V", type: "boolean", multiple: true, help: "validate ping data" },
    debug: { short: "d", type: "boolean", multiple: true, help: "debug printfs" },
  },
  maxPositionals: 0,
  permissions: "--allow-ffi (libibverbs, librdmacm)",
};

interface Settings {
  server: boolean;
  addr: string;
  source?: string;
  port: number;
  size: number;
  count: number;
  verbose: boolean;
  validate: boolean;
  debug: boolean;
}

/** The connection's verbs objects: one CQ (on a channel), QP, and the four buffers. */
class Endpoint {
  readonly cq: CompletionQueue;
  readonly qp: QueuePair;
  readonly recvMr: MemoryRegion;
  readonly sendMr: MemoryRegion;
  readonly rdmaMr: MemoryRegion;
  readonly startMr: MemoryRegion | null;
  readonly #recvView: DataView;
  readonly #sendView: DataView;
  #disconnected = false;
  readonly #abort = new AbortController();

  constructor(id: CmId, pd: ProtectionDomain, s: Settings) {
    const ctx = id.context;
    const channel = ctx.createCompChannel();
    this.cq = ctx.createCq({ cqe: SQ_DEPTH * 2, channel, pollBatch: 1 });
    this.qp = id.createQp(pd, {
      sendCq: this.cq,
      cap: { maxSendWr: SQ_DEPTH, maxRecvWr: 2, maxRecvSge: 1, maxSendSge: 1 },
    });
    const remote = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ | AccessFlags.REMOTE_WRITE;
    this.recvMr = pd.allocBuffer(INFO_SIZE, { access: AccessFlags.LOCAL_WRITE });
    this.sendMr = pd.allocBuffer(INFO_SIZE, { access: 0 });
    this.rdmaMr = pd.allocBuffer(s.size, { access: remote });
    this.startMr = s.server ? null : pd.allocBuffer(s.size, { access: remote });
    this.#recvView = new DataView(this.recvMr.buffer.buffer, this.recvMr.buffer.byteOffset, 16);
    this.#sendView = new DataView(this.sendMr.buffer.buffer, this.sendMr.buffer.byteOffset, 16);
    this.postRecv();
    id.waitDisconnected().then(() => {
      this.#disconnected = true;
      this.#abort.abort();
    }, () => {});
  }

  get disconnected(): boolean {
    return this.#disconnected;
  }

  postRecv(): void {
    this.qp.postRecv({ wrId: 1, sg: [{ mr: this.recvMr }] });
  }

  /** Sends `{buf, rkey, size}` of `mr` in network byte order. */
  advertise(mr: MemoryRegion | null, size: number): void {
    this.#sendView.setBigUint64(0, mr ? mr.addr : 0n, false);
    this.#sendView.setUint32(8, mr ? mr.rkey : 0, false);
    this.#sendView.setUint32(12, mr ? size : 0, false);
    this.qp.postSend({ wrId: 2, opcode: WrOpcode.SEND, sg: [{ mr: this.sendMr }] });
  }

  /** The received advertisement. */
  received(): { addr: bigint; rkey: number; size: number } {
    return {
      addr: this.#recvView.getBigUint64(0, false),
      rkey: this.#recvView.getUint32(8, false),
      size: this.#recvView.getUint32(12, false),
    };
  }

  /**
   * Waits for the next completion of `opcode` (send completions are consumed on the
   * way); a receive is re-posted at once. Returns false when the peer disconnected.
   */
  async expect(opcode: number): Promise<boolean> {
    for (;;) {
      if (this.#disconnected) return false;
      try {
        await awaitCompletions(this.cq, { strategy: "event", max: 1, signal: this.#abort.signal });
      } catch (e) {
        if (this.#disconnected) return false;
        throw e;
      }
      const wc = this.cq.completion(0);
      if (wc.status === WcStatus.WR_FLUSH_ERR) return false;
      if (wc.status !== WcStatus.SUCCESS) {
        throw new Error(`cq completion failed status ${wc.status}`);
      }
      if (wc.opcode === WcOpcode.RECV) {
        if (wc.byteLen !== INFO_SIZE) throw new Error(`Received bogus data, size ${wc.byteLen}`);
        this.postRecv();
      }
      if (wc.opcode === opcode) return true;
    }
  }
}

function cstring(bytes: Uint8Array): string {
  const end = bytes.indexOf(0);
  return new TextDecoder().decode(end < 0 ? bytes : bytes.subarray(0, end));
}

async function runServer(s: Settings): Promise<number> {
  using listener = cmListen({ address: s.addr, port: s.port, backlog: 3 });
  const id = await listener.accept();
  const pd = id.context.allocPd();
  const ep = new Endpoint(id, pd, s);
  await id.accept({});
  const read = ep.qp.prepareSend({
    wrId: 3,
    opcode: WrOpcode.RDMA_READ,
    sg: [{ mr: ep.rdmaMr }],
    remote: { addr: 0, rkey: 0 },
  });
  const write = ep.qp.prepareSend({
    wrId: 4,
    opcode: WrOpcode.RDMA_WRITE,
    sg: [{ mr: ep.rdmaMr }],
    remote: { addr: 0, rkey: 0 },
  });
  try {
    for (;;) {
      if (!(await ep.expect(WcOpcode.RECV))) break; // the client's source advertisement
      const src = ep.received();
      read.setRemoteAddr(0, src.addr);
      read.setRkey(0, src.rkey);
      read.setLength(0, 0, Math.min(src.size, s.size));
      read.post();
      if (!(await ep.expect(WcOpcode.RDMA_READ))) break;
      if (s.verbose) out(`server ping data: ${cstring(ep.rdmaMr.buffer)}`);
      ep.advertise(null, 0); // go ahead
      if (!(await ep.expect(WcOpcode.RECV))) break; // the client's sink advertisement
      const sink = ep.received();
      const len = ep.rdmaMr.buffer.indexOf(0);
      write.setRemoteAddr(0, sink.addr);
      write.setRkey(0, sink.rkey);
      write.setLength(0, 0, len < 0 ? s.size : len + 1);
      write.post();
      if (!(await ep.expect(WcOpcode.RDMA_WRITE))) break;
      ep.advertise(null, 0); // go ahead
    }
  } finally {
    if (ep.disconnected) console.error("server DISCONNECT EVENT...");
    await id.disconnect().catch(() => {});
  }
  return 0;
}

async function runClient(s: Settings): Promise<number> {
  let ep: Endpoint | undefined;
  const { id } = await cmConnect({
    address: s.addr,
    port: s.port,
    source: s.source,
    responderResources: 1,
    initiatorDepth: 1,
    retryCount: 7,
    rnrRetryCount: 7,
    beforeConnect: (id) => {
      ep = new Endpoint(id, id.context.allocPd(), s);
    },
  });
  const e = ep!;
  const start = e.startMr!.buffer, rdma = e.rdmaMr.buffer;
  let first = 65;
  let code = 0;
  for (let ping = 0; !s.count || ping < s.count; ping++) {
    const head = new TextEncoder().encode(`rdma-ping-${ping}: `).subarray(0, s.size);
    start.set(head);
    for (let i = head.length, c = first; i < s.size; i++) {
      start[i] = c;
      if (++c > 122) c = 65;
    }
    if (++first > 122) first = 65;
    start[s.size - 1] = 0;
    e.advertise(e.startMr, s.size);
    if (!(await e.expect(WcOpcode.RECV))) break; // go ahead: the read is done
    e.advertise(e.rdmaMr, s.size);
    if (!(await e.expect(WcOpcode.RECV))) break; // go ahead: the write is done
    if (s.validate && start.some((b, i) => rdma[i] !== b)) {
      err("data mismatch!");
      code = 1;
      break;
    }
    if (s.verbose) out(`ping data: ${cstring(rdma)}`);
  }
  if (e.disconnected) console.error("client DISCONNECT EVENT...");
  await id.disconnect().catch(() => {});
  return code;
}

if (import.meta.main) {
  await runTool(SPEC, async ({ values }) => {
    if (values.server === values.client) {
      throw new UsageError("give exactly one of -s (server) and -c (client)");
    }
    const server = Boolean(values.server);
    const size = intOption(values, "size", 64);
    if (size < MIN_BUFSIZE || size > BUFSIZE - 1) {
      throw new UsageError(`Invalid size ${size} (valid range is ${MIN_BUFSIZE} to ${BUFSIZE})`);
    }
    const addr = stringOption(values, "addr");
    if (!server && !addr) throw new UsageError("the client needs -a addr");
    const s: Settings = {
      server,
      addr: addr ?? "0.0.0.0",
      source: stringOption(values, "source"),
      port: intOption(values, "port", 7174, 0, 65535),
      size,
      count: intOption(values, "count", 0, 0),
      verbose: countOption(values, "verbose") > 0,
      validate: countOption(values, "validate") > 0,
      debug: countOption(values, "debug") > 0,
    };
    return server ? await runServer(s) : await runClient(s);
  });
}
