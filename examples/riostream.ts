/**
 * riostream - librdmacm's `riostream` over this library's rsocket-compatible streams: the
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

import type { IoMapping } from "../mod.ts";
import { out, runTool, type ToolSpec } from "./_common/cli.ts";
import {
  Pattern,
  perfLine,
  type StreamConfig,
  streamConfig,
  streamOptions,
  StreamTool,
} from "./_common/stream.ts";

const SPEC: ToolSpec = {
  name: "riostream",
  synopsis: ["[-b bind_address] [options]  (server)", "-s server_address [options]  (client)"],
  options: streamOptions("a|async b|blocking n|nonblocking v|verify"),
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

/** Resolves on the next event-loop turn. */
const nextTurn = () => new Promise<void>((r) => setImmediate(r));

class Riostream extends StreamTool {
  readonly pattern = new Pattern();
  readonly scratch = new Uint8Array(16);

  constructor(c: StreamConfig) {
    super(c, { iomapSize: 1 }); // RDMA_IOMAPSIZE, as riostream sets it
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
}

if (import.meta.main) {
  await runTool(SPEC, ({ values }) => new Riostream(streamConfig(values)).run());
}
