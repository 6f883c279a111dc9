/**
 * What a stream takes: its options and their defaults ({@link StreamOptions}, the sizes checked
 * by {@link streamSizes}), its address shape and the options of its operations.
 *
 * @module
 */

import { InvalidArgumentError } from "../types/errors.ts";
import { describe } from "../types/check.ts";
import { checkSpinMicros, DEFAULT_STRATEGY, type Strategy } from "../poller/completions.ts";
import { Poller } from "../poller/poller.ts";
import type { WaitOptions } from "../poller/wait.ts";
import { iomapEntries, RSOCKET_DEFAULTS } from "./protocol.ts";
import type { StreamSizes } from "./_transport.ts";

/** The options every stream takes: sizes (rsocket's defaults) and how completions are awaited. */
export interface StreamOptions {
  /** Send ring bytes (default 128 KiB, rsocket's `wmem_default`). */
  sendBufferSize?: number;
  /** Receive ring bytes, even (default 128 KiB, rsocket's `mem_default`). */
  receiveBufferSize?: number;
  /** Send queue depth (default 384; clamped to 16..min(device, 65534)). */
  sendQueueDepth?: number;
  /** Receive queue depth and initial credits (default 384; same clamp). */
  receiveQueueDepth?: number;
  /** Writes up to this many bytes go inline (default 64; the QP may grant more). */
  inlineSize?: number;
  /**
   * How a blocked read or write waits (default `"adaptive"`: spin for a learnt budget, then
   * wait for the completion channel; `"event"`: wait at once; `"busy"`: poll in slices between
   * event-loop turns, never sleep).
   */
  strategy?: Strategy;
  /** A fixed spin budget (adaptive) or slice (busy) in µs, 0..10,000 (default: learnt). */
  spinMicros?: number;
  /** The poller to wait through (default: the shared one). */
  poller?: Poller;
  /**
   * How long `close()` lets in-flight data and rsocket's DISCONNECT reach the peer, and waits
   * for the connection manager's disconnect, before releasing everything (ms, default 3000).
   */
  lingerMs?: number;
  /**
   * Entries of this side's iomap table: how many buffers the peer may map with `iomap()` for
   * its `iowrite()`s (rsocket's `RDMA_IOMAPSIZE`; exact up to 128, then rounded down to a
   * multiple of 256, at most 32512). Each costs 24 bytes of registered memory. Default
   * {@link IOMAP_SIZE_DEFAULT} (rsocket's own default is 0; `riostream` sets 1).
   */
  iomapSize?: number;
  /**
   * RDMA READs in flight each way, asked for at connect (responder resources and initiator
   * depth; clamped to the device; the accepting side takes the request's, clamped to its
   * device and to its own value). Default {@link READ_DEPTH_DEFAULT}; 0 asks for none, like
   * rsocket (a peer then cannot `read()` this side's exposed memory, and iWARP keeps the 1 its
   * connection setup needs).
   */
  readDepth?: number;
  /**
   * One-sided operations of `remote()` buffers in flight (RDMA READs and WRITEs; send WRs
   * added to the QP beyond the stream's own). Default {@link REMOTE_QUEUE_DEPTH_DEFAULT}; 0
   * leaves the QP exactly as rsocket sizes it (no `remote()` operations).
   */
  remoteQueueDepth?: number;
}

/** The iomap table entries a stream offers when not told (see `StreamOptions.iomapSize`). */
export const IOMAP_SIZE_DEFAULT = 4;
/** RDMA READs in flight each way when not told (see `StreamOptions.readDepth`). */
export const READ_DEPTH_DEFAULT = 4;
/** One-sided operations in flight when not told (see `StreamOptions.remoteQueueDepth`). */
export const REMOTE_QUEUE_DEPTH_DEFAULT = 16;

/** Options of {@link RdmaConn.write} and {@link RdmaConn.closeWrite}. */
export type IoOptions = WaitOptions;

/** Options of {@link RdmaConn.read}. */
export interface ReadOptions extends WaitOptions {
  /**
   * Wait until at least this many bytes are in the buffer (1..its length; rsocket's
   * `MSG_WAITALL` when it is the whole buffer). At the end of the stream fewer are returned.
   */
  min?: number;
}

/** Options of {@link connect}. */
export interface ConnectOptions extends StreamOptions, WaitOptions {
  /** Host name or numeric address (names resolve through `rdma_getaddrinfo`). */
  hostname: string;
  /** Port. */
  port: number;
  /** Local address to connect from (default: the one the route picks). */
  source?: string;
}

/** How long `close()` lingers when not told (ms; see `StreamOptions.lingerMs`). */
export const LINGER_MS_DEFAULT = 3000;

/**
 * The resolved sizes of `options`, each checked, and its waiting options checked (a bad option
 * is `InvalidArgumentError` before anything is connected).
 */
export function streamSizes(o: StreamOptions = {}): StreamSizes {
  const strategy = o.strategy ?? DEFAULT_STRATEGY;
  if (strategy !== "adaptive" && strategy !== "event" && strategy !== "busy") {
    throw new InvalidArgumentError(
      `unknown strategy ${describe(strategy)} (busy, event or adaptive)`,
    );
  }
  checkSpinMicros(o.spinMicros);
  if (o.poller !== undefined && !(o.poller instanceof Poller)) {
    throw new InvalidArgumentError("poller must be a Poller");
  }
  const linger = o.lingerMs ?? LINGER_MS_DEFAULT;
  if (!(Number.isFinite(linger) && linger >= 0)) {
    throw new InvalidArgumentError(`lingerMs must be a number >= 0, got ${describe(linger)}`);
  }
  const d = RSOCKET_DEFAULTS;
  const iomap = o.iomapSize ?? IOMAP_SIZE_DEFAULT;
  if (!Number.isInteger(iomap) || iomap < 0) {
    throw new InvalidArgumentError(`iomapSize must be an integer >= 0, got ${describe(iomap)}`);
  }
  const extra = o.remoteQueueDepth ?? REMOTE_QUEUE_DEPTH_DEFAULT;
  if (!Number.isInteger(extra) || extra < 0 || extra > 4096) {
    throw new InvalidArgumentError(
      `remoteQueueDepth must be an integer 0..4096, got ${describe(extra)}`,
    );
  }
  readDepthOf(o);
  return {
    iomapSize: iomapEntries(iomap),
    extraSendWrs: extra,
    sendBufferSize: o.sendBufferSize ?? d.sendBufferSize,
    receiveBufferSize: o.receiveBufferSize ?? d.receiveBufferSize,
    sendQueueDepth: o.sendQueueDepth ?? d.sendQueueDepth,
    receiveQueueDepth: o.receiveQueueDepth ?? d.receiveQueueDepth,
    inlineSize: o.inlineSize ?? d.inlineSize,
  };
}

/** The checked `readDepth` of `options`. */
export function readDepthOf(o: StreamOptions): number {
  const depth = o.readDepth ?? READ_DEPTH_DEFAULT;
  if (!Number.isInteger(depth) || depth < 0 || depth > 255) {
    throw new InvalidArgumentError(`readDepth must be an integer 0..255, got ${describe(depth)}`);
  }
  return depth;
}

/**
 * The most a stream's learnt spin budget grows to from the answers it catches, in microseconds
 * (see `SpinBudget`: a probe, and the few misses after a probe's late catch, spin up to 5 times
 * it), and the most its conversation floor (four of the process's least recent wake-ups) spins.
 * Larger than a CQ wait's (`AUTO_SPIN_MAX_MICROS`): a stream waits for its peer's answer, and a
 * wake-up through the event loop costs more than most round trips; a peer that answers late
 * shrinks the budget within a few waits.
 */
export const STREAM_SPIN_MAX_MICROS = 1000;

/** The keepalive period when none is given: TCP's default `tcp_keepalive_time`, 2 hours. */
export const KEEPALIVE_DEFAULT_MS = 7_200_000;

/**
 * Keepalive periods in a row with sends outstanding and none completing after which a
 * connection with keepalive on gives up on its peer (TCP's `tcp_keepalive_probes` idea). The
 * queue pair's own retries usually fail first; soft-RoCE retries a retry count of 7 (what
 * rsocket and `connect()` use) without end, so only this rule ends such a connection.
 */
export const KEEPALIVE_PROBES = 5;

/** What a connection runs with, after the device's clamps and grants (`conn.info`). */
export interface ConnInfo {
  /** Send ring bytes. */
  readonly sendBufferSize: number;
  /** Receive ring bytes. */
  readonly receiveBufferSize: number;
  /** Send queue depth of the stream's messages. */
  readonly sendQueueDepth: number;
  /** Receive queue depth (and initial credits). */
  readonly receiveQueueDepth: number;
  /** Writes up to this many bytes go inline. */
  readonly inlineSize: number;
  /** `"iwarp"` when messages go as SENDs (iWARP), else `"ib"` (RDMA WRITE WITH IMMEDIATE). */
  readonly transport: "ib" | "iwarp";
  /** Entries of this side's iomap table. */
  readonly iomapSize: number;
  /** Entries of the peer's iomap table. */
  readonly remoteIomapSize: number;
  /** RDMA READs in flight each way that the connection granted. */
  readonly readDepth: number;
  /** Send WRs for one-sided operations beyond the stream's own. */
  readonly remoteQueueDepth: number;
}
