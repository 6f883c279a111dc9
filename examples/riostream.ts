/**
 * riostream — librdmacm's `riostream` over this library's rsocket-compatible streams: the
 * rstream ping-pong done with rsocket's iomap. Each side maps its buffer for the peer
 * (`conn.iomap()`, rsocket's `riomap`) and sends `transfer_count` transfers per iteration by
 * direct RDMA WRITEs into the peer's buffer (`conn.iowrite()`, `riowrite`); the last byte of the
 * last transfer is a marker the receiver polls for in its own memory (no message, no receive, no
 * CPU on the receiving side). Same flags, size sweep and output lines as the C tool; either side
 * can be the C `riostream`.
 *
 * ```sh
 * deno run --allow-ffi --allow-env jsr:@rdma/verbs/examples/riostream -b 10.0.2.15 -T v
 * bun examples/riostream.ts -s 10.0.2.15 -T v
 * ```
 *
 * Without `-S`/`-C`/`-I` it runs the C tool's sweep: a latency test per size on one connection
 * (inline writes of up to `-i` bytes), then a bandwidth test per size on a second one (no
 * inline). `-S all` adds the intermediate sizes. Both sides offer an iomap table of one entry
 * (`RDMA_IOMAPSIZE` 1, as the C tool sets). Buffers are `2 × -B` bytes (default 1 MiB) each way.
 * As in the C tool the default is nonblocking (each wait spins on the CQ for up to 1 ms before
 * it sleeps); `-T b`/`-T a` wait through the poller's default strategy. Waiting for the marker
 * byte is a busy poll of memory in every mode, as in the C tool.
 *
 * @module
 */

import {
  connect,
  DEFAULT_STRATEGY,
  type IoMapping,
  listen,
  type RdmaConn,
  type RdmaListener,
  type Strategy,
  type StreamOptions,
} from "../mod.ts";
import { setImmediate } from "node:timers";
import {
  intOption,
  out,
  runTool,
  stringOption,
  type ToolSpec,
  UsageError,
  type Values,
} from "./_common/cli.ts";
import { HEADER, Pattern, perfLine, sizeStr, sizeToCount, TEST_SIZES } from "./rstream.ts";

const SPEC: ToolSpec = {
  name: "riostream",
  synopsis: ["[-b bind_address] [options]  (server)", "-s server_address [options]  (client)"],
  options: {
    server: { short: "s", type: "string", arg: "server_address", help: "connect to this server" },
    bind: { short: "b", type: "string", arg: "bind_address", help: "local address to bind" },
    format: {
      short: "f",
      type: "string",
      arg: "address_format",
      help: "name, ip, ipv6 (gid is not supported)",
    },
    buffer: { short: "B", type: "string", arg: "buffer_size", help: "socket buffer size" },
    inline: { short: "i", type: "string", arg: "inline_size", help: "inline size (default 64)" },
    iterations: { short: "I", type: "string", arg: "iterations", help: "iterations" },
    count: { short: "C", type: "string", arg: "transfer_count", help: "transfers per iteration" },
    size: { short: "S", type: "string", arg: "transfer_size|all", help: "transfer size, or all" },
    port: { short: "p", type: "string", arg: "port_number", help: "port (default 7471)" },
    test: {
      short: "T",
      type: "string",
      arg: "test_option",
      multiple: true,
      help: "a|async b|blocking n|nonblocking v|verify",
    },
  },
  maxPositionals: 0,
  permissions: "--allow-ffi --allow-env",
  notes: [
    "",
    "Not supported: -f gid.",
    "Like the C tool, the default is nonblocking: each wait spins on the CQ for up to 1 ms",
    "before it sleeps; -T b (blocking) and -T a (async) wait through the poller's default",
    "strategy. The receiver polls its own memory for the last byte of each round in every mode.",
  ],
};

type Optimization = "mixed" | "latency" | "bandwidth";

/** The C tool's default: nonblocking calls in a loop; here, spin on the CQ up to 1 ms per wait. */
const NONBLOCKING = { strategy: "adaptive" as Strategy, spinMicros: 1000 };

interface Config {
  dst?: string;
  wait: { strategy: Strategy; spinMicros?: number };
  src?: string;
  port: number;
  verify: boolean;
  bufferSize: number;
  inlineSize: number;
  custom: boolean;
  sizeOption: number;
  iterations: number;
  count: number;
  size: number;
}

function config(values: Values): Config {
  const c: Config = {
    dst: stringOption(values, "server"),
    wait: NONBLOCKING,
    src: stringOption(values, "bind"),
    port: intOption(values, "port", 7471, 0, 65535),
    verify: false,
    bufferSize: intOption(values, "buffer", 0, 0, 1 << 30),
    inlineSize: intOption(values, "inline", 64, 0, 0xfffe),
    custom: false,
    sizeOption: 0,
    iterations: 1,
    count: 1000,
    size: 1000,
  };
  if (values.iterations !== undefined) {
    c.custom = true;
    c.iterations = intOption(values, "iterations", 1, 1);
  }
  if (values.count !== undefined) {
    c.custom = true;
    c.count = intOption(values, "count", 1000, 1);
  }
  const size = stringOption(values, "size");
  if (size !== undefined) {
    if (size.toLowerCase().startsWith("all")) c.sizeOption = 1;
    else {
      c.custom = true;
      c.size = intOption(values, "size", 1000, 1, 1 << 30);
    }
  }
  const fmt = stringOption(values, "format");
  if (fmt !== undefined && fmt.toLowerCase().startsWith("gid")) {
    throw new UsageError("-f gid (AF_IB addresses) is not supported");
  }
  const tests = values.test === undefined ? [] : ([] as unknown[]).concat(values.test);
  for (const t of tests.map(String)) {
    const o = t.toLowerCase();
    const is = (one: string, word: string) => o === one || (o.length > 1 && o.startsWith(word));
    if (is("v", "verify")) c.verify = true;
    else if (is("n", "nonblock")) c.wait = NONBLOCKING;
    else if (is("b", "block") || is("a", "async")) c.wait = { strategy: DEFAULT_STRATEGY };
    else throw new UsageError(`unknown test option "${t}"`);
  }
  return c;
}

/** Resolves on the next event-loop turn. */
const nextTurn = () => new Promise<void>((r) => setImmediate(r));

class Riostream {
  readonly c: Config;
  readonly pattern = new Pattern();
  readonly scratch = new Uint8Array(16);
  conn: RdmaConn | null = null;
  listener: RdmaListener | null = null;

  constructor(c: Config) {
    this.c = c;
  }

  options(opt: Optimization): StreamOptions {
    const half = this.c.bufferSize || 1 << 19;
    const o: StreamOptions = {
      sendBufferSize: half * 2,
      receiveBufferSize: half * 2,
      iomapSize: 1, // RDMA_IOMAPSIZE, as riostream sets it
      ...this.c.wait,
    };
    if (opt === "latency") o.inlineSize = this.c.inlineSize;
    else if (opt === "bandwidth") o.inlineSize = 0;
    return o;
  }

  async open(opt: Optimization): Promise<void> {
    if (this.c.dst) {
      this.conn = await connect({
        hostname: this.c.dst,
        port: this.c.port,
        source: this.c.src,
        ...this.options(opt),
      });
    } else {
      this.conn = await this.listener!.accept(this.options(opt));
    }
  }

  async close(): Promise<void> {
    const conn = this.conn;
    this.conn = null;
    if (conn) await conn[Symbol.asyncDispose]();
  }

  /** `send_msg`/`recv_msg` of 16 bytes each way (sends the queued iomap entry first). */
  async sync(): Promise<void> {
    const conn = this.conn!;
    const send = () => conn.write(this.scratch);
    const recv = async () => {
      if ((await conn.read(this.scratch, { min: 16 })) === null) {
        throw new Error("rrecv: end of stream");
      }
    };
    if (this.c.dst) {
      await send();
      await recv();
    } else {
      await recv();
      await send();
    }
  }

  /** `send_xfer`: the whole buffer to offset 0 of the peer's mapping. */
  async sendXfer(buf: Uint8Array): Promise<void> {
    await this.conn!.iowrite(buf, 0);
  }

  /** `recv_xfer`: waits until the peer's write put `marker` into the last byte, then verifies. */
  async recvXfer(buf: Uint8Array, marker: number): Promise<void> {
    const last = buf.length - 1;
    // the peer's RDMA WRITE lands without this process: poll the byte (Atomics.load keeps the
    // load in the loop), as the C tool does; the event loop gets a turn every 50 ms, so that a
    // connection that ended is noticed (a turn costs far more than a round trip here)
    let next = performance.now() + 50;
    for (let n = 0; Atomics.load(buf, last) !== marker; n++) {
      if ((n & 4095) === 0 && performance.now() > next) {
        if (this.conn!.closed) throw new Error("the connection closed");
        await nextTurn();
        next = performance.now() + 50;
      }
    }
    if (this.c.verify && !this.pattern.verify(buf, buf.length - 1)) {
      throw new Error("data verification failed");
    }
  }

  async runTest(name: string, size: number, count: number, iterations: number): Promise<void> {
    const conn = this.conn!;
    const client = this.c.dst !== undefined;
    // riomap(buf, transfer_size, PROT_WRITE, 0, 0): the peer writes into it from offset 0
    const map: IoMapping = conn.iomap(size, { offset: 0 });
    const buf = map.buffer;
    buf[size - 1] = 0xff; // the poll byte starts at -1
    try {
      await this.sync();
      let marker = 0;
      const start = performance.now();
      for (let i = 0; i < iterations; i++) {
        if (client) {
          for (let t = 0; t < count - 1; t++) await this.sendXfer(buf);
          buf[size - 1] = marker++ & 0xff;
          if (this.c.verify) this.pattern.format(buf, size - 1);
          await this.sendXfer(buf);
          await this.recvXfer(buf, marker++ & 0xff);
        } else {
          await this.recvXfer(buf, marker++ & 0xff);
          for (let t = 0; t < count - 1; t++) await this.sendXfer(buf);
          buf[size - 1] = marker++ & 0xff;
          if (this.c.verify) this.pattern.format(buf, size - 1);
          await this.sendXfer(buf);
        }
      }
      const usec = (performance.now() - start) * 1000;
      out(perfLine(name, size, count, iterations, usec));
    } finally {
      if (!conn.closed) conn.iounmap(map);
    }
  }

  async run(): Promise<number> {
    const c = this.c;
    if (!c.dst) {
      this.listener = listen({ hostname: c.src ?? "0.0.0.0", port: c.port, backlog: 1 });
    }
    out(HEADER);
    try {
      if (!c.custom) {
        await this.open("latency");
        for (const [size, option] of TEST_SIZES) {
          if (option > c.sizeOption) continue;
          await this.runTest(`${sizeStr(size).slice(0, 4)}_lat`, size, 1, sizeToCount(size));
        }
        await this.close();
        await this.open("bandwidth");
        for (const [size, option] of TEST_SIZES) {
          if (option > c.sizeOption) continue;
          await this.runTest(`${sizeStr(size).slice(0, 4)}_bw`, size, sizeToCount(size), 1);
        }
      } else {
        await this.open("mixed");
        await this.runTest("custom", c.size, c.count, c.iterations);
      }
      return 0;
    } finally {
      await this.close();
      this.listener?.close();
    }
  }
}

if (import.meta.main) {
  await runTool(SPEC, ({ values }) => new Riostream(config(values)).run());
}
