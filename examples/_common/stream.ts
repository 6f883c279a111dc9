/**
 * What `rstream` and `riostream` share: their options and the settings parsed from them, the
 * size table, the header and result lines, the data pattern of `-T v`, and the test run (one
 * connection for the latency sweep, a second for the bandwidth sweep, or one custom test).
 *
 * @module
 */

import {
  connect,
  DEFAULT_STRATEGY,
  listen,
  type RdmaConn,
  type RdmaListener,
  type Strategy,
  type StreamOptions,
} from "../../mod.ts";
import { intOption, type OptionSpec, out, stringOption, UsageError, type Values } from "./cli.ts";

/**
 * The options both tools have, with `extra` (rstream's `-k`) before `-T`; `tests` is the `-T`
 * help line.
 */
export function streamOptions(
  tests: string,
  extra: Record<string, OptionSpec> = {},
): Record<string, OptionSpec> {
  return {
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
    ...extra,
    test: { short: "T", type: "string", arg: "test_option", multiple: true, help: tests },
  };
}

/** What a connection is opened for: latency (inline sends), bandwidth (none), or both. */
export type Optimization = "mixed" | "latency" | "bandwidth";

/**
 * The C tools' default is nonblocking calls in a loop, i.e. they poll the CQ without pause. The
 * closest here: spin on the CQ for up to a millisecond per wait (without yielding to the event
 * loop), then sleep on the completion channel.
 */
export const NONBLOCKING: { strategy: Strategy; spinMicros: number } = {
  strategy: "adaptive",
  spinMicros: 1000,
};

/** The settings of a run, from the command line. */
export interface StreamConfig {
  /** The server to connect to (`-s`); none: this side listens. */
  dst?: string;
  /** How completions are waited for (`-T n`, the default, or `-T b`/`-T a`). */
  wait: { strategy: Strategy; spinMicros?: number };
  /** The address to bind (`-b`). */
  src?: string;
  /** `-p`. */
  port: number;
  /** `-T v`: format and check the data. */
  verify: boolean;
  /** `-B` (0: the default); buffers are twice this each way. */
  bufferSize: number;
  /** `-i`: the inline size of the latency connection. */
  inlineSize: number;
  /** `-I`, `-C` or a size for `-S`: one custom test instead of the sweep. */
  custom: boolean;
  /** The sizes of the sweep: 0 the main ones, 1 all (`-S all`). */
  sizeOption: number;
  /** `-I`. */
  iterations: number;
  /** `-C`. */
  count: number;
  /** `-S`. */
  size: number;
  /** Keepalive idle time in seconds (0: off), rstream's `-k` (riostream has none: 0). */
  keepalive: number;
}

/** Whether a `-T` value names the option written `one` or, at length, `word`. */
export type TestOptionMatch = (one: string, word: string) => boolean;

/**
 * The settings in `values`, or a {@link UsageError}. `-T v`, `n`, `b` and `a` are known to both
 * tools; `moreTests` takes the others a tool knows (true: taken).
 */
export function streamConfig(
  values: Values,
  moreTests: (is: TestOptionMatch, t: string) => boolean = () => false,
): StreamConfig {
  const c: StreamConfig = {
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
    keepalive: 0,
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
  c.keepalive = intOption(values, "keepalive", 0, 0, 0x7fffffff);
  const tests = values.test === undefined ? [] : ([] as unknown[]).concat(values.test);
  for (const t of tests.map(String)) {
    const o = t.toLowerCase();
    const is = (one: string, word: string) => o === one || (o.length > 1 && o.startsWith(word));
    if (is("v", "verify")) c.verify = true;
    else if (is("n", "nonblock")) c.wait = NONBLOCKING;
    else if (is("b", "block") || is("a", "async")) c.wait = { strategy: DEFAULT_STRATEGY };
    else if (!moreTests(is, t)) throw new UsageError(`unknown test option "${t}"`);
  }
  return c;
}

/** rstream's size table: [size, option] (option 1 only with -S all). */
export const TEST_SIZES: readonly (readonly [number, number])[] = [
  [1 << 6, 0],
  [1 << 7, 1],
  [(1 << 7) + (1 << 6), 1],
  [1 << 8, 1],
  [(1 << 8) + (1 << 7), 1],
  [1 << 9, 1],
  [(1 << 9) + (1 << 8), 1],
  [1 << 10, 1],
  [(1 << 10) + (1 << 9), 1],
  [1 << 11, 1],
  [(1 << 11) + (1 << 10), 1],
  [1 << 12, 0],
  [(1 << 12) + (1 << 11), 1],
  [1 << 13, 1],
  [(1 << 13) + (1 << 12), 1],
  [1 << 14, 1],
  [(1 << 14) + (1 << 13), 1],
  [1 << 15, 1],
  [(1 << 15) + (1 << 14), 1],
  [1 << 16, 0],
  [(1 << 16) + (1 << 15), 1],
  [1 << 17, 1],
  [(1 << 17) + (1 << 16), 1],
  [1 << 18, 1],
  [(1 << 18) + (1 << 17), 1],
  [1 << 19, 1],
  [(1 << 19) + (1 << 18), 1],
  [1 << 20, 0],
  [(1 << 20) + (1 << 19), 1],
  [1 << 21, 1],
  [(1 << 21) + (1 << 20), 1],
  [1 << 22, 1],
  [(1 << 22) + (1 << 21), 1],
];

/** `size_str` of librdmacm's examples: 1.5k, 64k, 1m, ... */
export function sizeStr(size: number): string {
  let base = 1;
  let mag = "";
  if (size >= 2 ** 30) [base, mag] = [2 ** 30, "g"];
  else if (size >= 2 ** 20) [base, mag] = [2 ** 20, "m"];
  else if (size >= 2 ** 10) [base, mag] = [2 ** 10, "k"];
  const whole = Math.floor(size / base);
  const fraction = whole < 10 ? Math.floor(((size % base) * 10) / base) : 0;
  return fraction ? `${whole}.${fraction}${mag}` : `${whole}${mag}`;
}

/** `cnt_str` of librdmacm's examples: 1k, 100k, 1m, ... */
export function cntStr(cnt: number): string {
  if (cnt >= 1e9) return `${Math.floor(cnt / 1e9)}b`;
  if (cnt >= 1e6) return `${Math.floor(cnt / 1e6)}m`;
  if (cnt >= 1e3) return `${Math.floor(cnt / 1e3)}k`;
  return `${cnt}`;
}

/** `size_to_count`: how many transfers a test of this size makes. */
export function sizeToCount(size: number): number {
  if (size >= 1 << 20) return 100;
  if (size >= 1 << 16) return 1000;
  if (size >= 1 << 10) return 10000;
  return 100000;
}

/** The header line. */
export const HEADER: string = "name".padEnd(10) + "bytes".padEnd(8) + "xfers".padEnd(8) +
  "iters".padEnd(8) + "total".padEnd(8) + "time".padStart(8) + " " + "Gb/sec".padStart(10) +
  "usec/xfer".padStart(13);

/** One result line, formatted like `show_perf`. */
export function perfLine(
  name: string,
  size: number,
  count: number,
  iterations: number,
  usec: number,
): string {
  const bytes = iterations * count * size * 2;
  return name.padEnd(10) + sizeStr(size).padEnd(8) + cntStr(count).padEnd(8) +
    cntStr(iterations).padEnd(8) + sizeStr(bytes).padEnd(8) +
    `${(usec / 1e6).toFixed(2).padStart(8)}s` +
    `${((bytes * 8) / (1000 * usec)).toFixed(2).padStart(10)}` +
    `${(usec / iterations / (count * 2)).toFixed(2).padStart(11)}`;
}

/** The byte sequence rstream and riostream write and check (format_buf/verify_buf counters). */
export class Pattern {
  #fmt = 0;
  #ver = 0;
  #total = 0;

  /** Writes the next `size` bytes of the sequence into `buf`. */
  format(buf: Uint8Array, size: number): void {
    let d = this.#fmt;
    for (let i = 0; i < size; i++) buf[i] = d++ & 0xff;
    this.#fmt = d & 0xff;
  }

  /** Checks `size` bytes; prints the C tool's message and returns false at the first bad one. */
  verify(buf: Uint8Array, size: number): boolean {
    let d = this.#ver;
    for (let i = 0; i < size; i++, d++) {
      if (buf[i] !== (d & 0xff)) {
        out(`data verification failed byte ${this.#total + i}`);
        return false;
      }
    }
    this.#ver = d & 0xff;
    this.#total += size;
    return true;
  }
}

/**
 * One run of either tool: the listener (server side), the connection of the test under way, and
 * the C tools' order of tests (`run`). A tool supplies `runTest`, one timed test on `conn`.
 */
export abstract class StreamTool {
  /** The settings. */
  readonly c: StreamConfig;
  /** The connection of the test under way. */
  conn: RdmaConn | null = null;
  /** The server side's listener. */
  listener: RdmaListener | null = null;
  readonly #extra: StreamOptions;

  /** `extra`: stream options of every connection the tool opens (riostream's iomap size). */
  constructor(c: StreamConfig, extra: StreamOptions = {}) {
    this.c = c;
    this.#extra = extra;
  }

  /** The options of a connection opened for `opt`: buffers of `2 × -B`, inline per `opt`. */
  options(opt: Optimization): StreamOptions {
    const half = this.c.bufferSize || 1 << 19;
    const o: StreamOptions = {
      sendBufferSize: half * 2,
      receiveBufferSize: half * 2,
      ...this.#extra,
      ...this.c.wait,
    };
    if (opt === "latency") o.inlineSize = this.c.inlineSize;
    else if (opt === "bandwidth") o.inlineSize = 0;
    return o;
  }

  /** Connects (client) or accepts (server) the connection for `opt`. */
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
    // rstream sets SO_KEEPALIVE and TCP_KEEPIDLE on every connection it makes
    if (this.c.keepalive > 0) this.conn.setKeepAlive(true, this.c.keepalive * 1000);
  }

  /** Closes the connection, if any. */
  async close(): Promise<void> {
    const conn = this.conn;
    this.conn = null;
    if (conn) await conn[Symbol.asyncDispose]();
  }

  /** One test on `conn`: `iterations` rounds of `count` transfers of `size` bytes; prints its line. */
  abstract runTest(name: string, size: number, count: number, iterations: number): Promise<void>;

  /** The header, then the sweep or the custom test; resolves with the exit code. */
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
