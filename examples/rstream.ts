/**
 * rstream - librdmacm's `rstream` over this library's rsocket-compatible streams: a ping-pong
 * of `transfer_count` transfers each way per iteration, timed, with the same flags, the same
 * size sweep and the same output lines as the C tool. Either side can be the C `rstream`.
 *
 * ```sh
 * deno run --allow-ffi --allow-env jsr:@rdma/verbs/examples/rstream -b 10.0.2.15 -T v
 * bun examples/rstream.ts -s 10.0.2.15 -T v
 * ```
 *
 * Without `-S`/`-C`/`-I` it runs the C tool's sweep: a latency test per size on one connection
 * (inline sends of up to `-i` bytes), then a bandwidth test per size on a second one (no
 * inline). `-S all` adds the intermediate sizes. Buffers are `2 × -B` bytes (default 1 MiB)
 * each way, as rsocket doubles `SO_SNDBUF`/`SO_RCVBUF`. As in the C tool, the default is
 * nonblocking (each wait spins on the CQ for up to 1 ms before it sleeps); `-T b`/`-T a` wait
 * through the poller's default strategy.
 *
 * @module
 */

import { out, runTool, type ToolSpec, UsageError } from "./_common/cli.ts";
import {
  Pattern,
  perfLine,
  type StreamConfig,
  streamConfig,
  streamOptions,
  StreamTool,
  TEST_SIZES,
  type TestOptionMatch,
} from "./_common/stream.ts";

// the formatting helpers this module has exported since before _common/stream.ts held them
export { cntStr, HEADER, perfLine, sizeStr, sizeToCount } from "./_common/stream.ts";

const SPEC: ToolSpec = {
  name: "rstream",
  synopsis: ["[-b bind_address] [options]  (server)", "-s server_address [options]  (client)"],
  options: streamOptions("a|async b|blocking n|nonblocking r|resolve v|verify", {
    keepalive: {
      short: "k",
      type: "string",
      arg: "keepalive_time",
      help: "keepalive: probe after this many idle seconds",
    },
  }),
  maxPositionals: 0,
  permissions: "--allow-ffi --allow-env",
  notes: [
    "",
    "Not supported: -T s (plain sockets), -T f (fork), -f gid.",
    "Like the C tool, the default is nonblocking: each wait spins on the CQ for up to 1 ms",
    "before it sleeps; -T b (blocking) and -T a (async) wait through the poller's default",
    "strategy (spin briefly, then sleep until the completion channel fires).",
  ],
};

/** rstream's `-T` values beyond the shared ones: `r` (a no-op), `s` and `f` (not supported). */
function moreTests(is: TestOptionMatch, t: string): boolean {
  if (is("r", "resolve")) return true; // names always resolve through rdma_getaddrinfo
  if (is("s", "socket") || is("f", "fork")) throw new UsageError(`-T ${t} is not supported`);
  return false;
}

class Rstream extends StreamTool {
  readonly buf: Uint8Array;
  readonly pattern = new Pattern();

  constructor(c: StreamConfig) {
    super(c);
    this.buf = new Uint8Array(c.custom ? c.size : TEST_SIZES[TEST_SIZES.length - 1][0]);
  }

  async sendXfer(size: number): Promise<void> {
    if (this.c.verify) this.pattern.format(this.buf, size);
    await this.conn!.write(this.buf.subarray(0, size));
  }

  async recvXfer(size: number): Promise<void> {
    const conn = this.conn!;
    for (let off = 0; off < size;) {
      const n = await conn.read(this.buf.subarray(off, size));
      if (n === null) throw new Error("rrecv: end of stream");
      off += n;
    }
    if (this.c.verify && !this.pattern.verify(this.buf, size)) {
      throw new Error("data verification failed");
    }
  }

  async runTest(name: string, size: number, count: number, iterations: number): Promise<void> {
    const client = this.c.dst !== undefined;
    // sync: 16 bytes each way
    if (client) {
      await this.sendXfer(16);
      await this.recvXfer(16);
    } else {
      await this.recvXfer(16);
      await this.sendXfer(16);
    }
    const start = performance.now();
    for (let i = 0; i < iterations; i++) {
      for (let t = 0; t < count; t++) {
        if (client) await this.sendXfer(size);
        else await this.recvXfer(size);
      }
      for (let t = 0; t < count; t++) {
        if (client) await this.recvXfer(size);
        else await this.sendXfer(size);
      }
    }
    const usec = (performance.now() - start) * 1000;
    out(perfLine(name, size, count, iterations, usec));
  }
}

if (import.meta.main) {
  await runTool(SPEC, ({ values }) => new Rstream(streamConfig(values, moreTests)).run());
}
