/**
 * What the three pingpong tools share: their options, the settings parsed from them,
 * and the two result lines.
 *
 * @module
 */

import {
  awaitCompletions,
  bytesToMtu,
  type CompletionQueue,
  type Context,
  LinkLayer,
  type PreparedRecv,
  type QueuePair,
} from "../../verbs.ts";
import {
  err,
  intOption,
  type OptionSpec,
  out,
  stringOption,
  UsageError,
  type Values,
} from "./cli.ts";
import { type Dest, destLine, PINGPONG_TCP_PORT, randomPsn } from "./exchange.ts";
import { type GidBytes, gidFromText, hasInterfaceId, zeroGid } from "./gid.ts";

/** wr_id of receives. */
export const RECV_WRID = 1;
/** wr_id of sends. */
export const SEND_WRID = 2;

/** The options every pingpong tool has (`mtu` only where the C tool has it). */
export function pingpongOptions(
  defaultSize: number,
  extra: Record<string, OptionSpec> = {},
  withMtu = true,
): Record<string, OptionSpec> {
  const o: Record<string, OptionSpec> = {
    port: {
      short: "p",
      type: "string",
      arg: "port",
      help: `listen on/connect to port <port> (default ${PINGPONG_TCP_PORT})`,
    },
    "ib-dev": {
      short: "d",
      type: "string",
      arg: "dev",
      help: "use IB device <dev> (default first device found)",
    },
    "ib-port": {
      short: "i",
      type: "string",
      arg: "port",
      help: "use port <port> of IB device (default 1)",
    },
    size: {
      short: "s",
      type: "string",
      arg: "size",
      help: `size of message to exchange (default ${defaultSize})`,
    },
  };
  if (withMtu) {
    o.mtu = { short: "m", type: "string", arg: "size", help: "path MTU (default 1024)" };
  }
  Object.assign(o, extra);
  Object.assign(
    o,
    {
      "rx-depth": {
        short: "r",
        type: "string",
        arg: "dep",
        help: "number of receives to post at a time (default 500)",
      },
      iters: {
        short: "n",
        type: "string",
        arg: "iters",
        help: "number of exchanges (default 1000)",
      },
      sl: { short: "l", type: "string", arg: "sl", help: "service level value" },
      events: { short: "e", type: "boolean", help: "sleep on CQ events (default poll)" },
      "gid-idx": { short: "g", type: "string", arg: "gid index", help: "local port gid index" },
    } satisfies Record<string, OptionSpec>,
  );
  return o;
}

/** Settings common to the pingpong tools. */
export interface PingpongSettings {
  /** TCP port of the address exchange. */
  readonly tcpPort: number;
  /** Device name, or undefined for the first device. */
  readonly device: string | undefined;
  /** Port of the device. */
  readonly ibPort: number;
  /** Message size in bytes. */
  readonly size: number;
  /** Path MTU in bytes. */
  readonly mtu: number;
  /** Receives kept posted. */
  readonly rxDepth: number;
  /** Number of exchanges. */
  readonly iters: number;
  /** Service level. */
  readonly sl: number;
  /** Wait on completion events instead of polling. */
  readonly events: boolean;
  /** GID index, or -1 for none (IB with LIDs). */
  readonly gidIndex: number;
  /** The server's host name; undefined when this side is the server. */
  readonly server: string | undefined;
}

/** Reads the common settings from parsed options. */
export function pingpongSettings(
  values: Values,
  positionals: readonly string[],
  defaultSize: number,
): PingpongSettings {
  const mtu = intOption(values, "mtu", 1024);
  if (![256, 512, 1024, 2048, 4096].includes(mtu)) {
    throw new UsageError(`--mtu: ${mtu} is not one of 256, 512, 1024, 2048, 4096`);
  }
  return {
    tcpPort: intOption(values, "port", PINGPONG_TCP_PORT, 0, 65535),
    device: stringOption(values, "ib-dev"),
    ibPort: intOption(values, "ib-port", 1, 1, 255),
    size: intOption(values, "size", defaultSize, 1, 0x7fffffff),
    mtu,
    rxDepth: intOption(values, "rx-depth", 500, 1, 0x7fffffff),
    iters: intOption(values, "iters", 1000, 1, 0x7fffffff),
    sl: intOption(values, "sl", 0, 0, 15),
    events: Boolean(values.events),
    gidIndex: intOption(values, "gid-idx", -1, -1, 0xffff),
    server: positionals[0],
  };
}

/**
 * The two result lines, computed like the C tools (elapsed microseconds as a C
 * `float`, bytes = size × iters × 2).
 */
export function resultLines(size: number, iters: number, elapsedMs: number): [string, string] {
  const usec = Math.fround(Math.round(elapsedMs * 1000));
  const bytes = size * iters * 2;
  return [
    `${bytes} bytes in ${(usec / 1e6).toFixed(2)} seconds = ${
      (bytes * 8 / usec).toFixed(2)
    } Mbit/sec`,
    `${iters} iters in ${(usec / 1e6).toFixed(2)} seconds = ${(usec / iters).toFixed(2)} usec/iter`,
  ];
}

/** The usage lines of a pingpong tool. */
export const PINGPONG_SYNOPSIS: readonly string[] = [
  "            start a server and wait for connection",
  "<host>      connect to server at <host>",
];

/** The permissions a pingpong tool needs under Deno. */
export const PINGPONG_PERMISSIONS =
  "--allow-ffi (libibverbs) --allow-net (the TCP address exchange); --allow-env=RDMA_VERBS_LIBIBVERBS only to pick the library by path";

/** Posts the prepared receive up to `n` times; returns how many were posted. */
export function postRecvs(recv: PreparedRecv, n: number): number {
  let i = 0;
  try {
    for (; i < n; i++) recv.post();
  } catch {
    // like the C tool: stop at the first failure and report the count
  }
  return i;
}

/** Polls until at least one completion arrives (up to `max`); returns how many. */
export function busyPoll(cq: CompletionQueue, max: number): number {
  let ne = cq.poll(max);
  while (ne < 1) ne = cq.poll(max);
  return ne;
}

/**
 * A waiter for at least one completion: a busy poll (like the C tools), or with `-e` the
 * poller's event path (arm, drain, wait on the completion channel).
 */
export function completionWaiter(
  cq: CompletionQueue,
  events: boolean,
  max: number,
): () => number | Promise<number> {
  if (!events) return () => busyPoll(cq, max);
  const options = { strategy: "event", max } as const;
  return () => awaitCompletions(cq, options);
}

/**
 * pp_connect_ctx: brings an RC or UC QP from INIT to RTS toward `rem`, with a GRH when `gid` (the
 * remote GID) has an interface id, and `psn` as our send PSN.
 */
export function connectQp(
  qp: QueuePair,
  rem: Dest,
  gid: GidBytes,
  s: PingpongSettings,
  psn: number,
): void {
  qp.toRtr(
    { qpNum: rem.qpn, psn: rem.psn, lid: rem.lid, gid: hasInterfaceId(gid) ? gid : undefined },
    {
      port: s.ibPort,
      pathMtu: bytesToMtu(s.mtu),
      sl: s.sl,
      sgidIndex: Math.max(0, s.gidIndex),
    },
  );
  qp.toRts({ psn });
}

/**
 * The start of a connected pingpong side: posts `rxDepth` receives, then makes and prints the
 * address records of `qpNums` (LID, QP number, a random PSN, the GID of `-g`). Prints the C
 * tools' failure line and returns null when the receives or the LID are missing.
 */
export function startSide(
  ctx: Context,
  recv: PreparedRecv,
  s: PingpongSettings,
  qpNums: readonly number[],
): { routs: number; mine: Dest[] } | null {
  const routs = postRecvs(recv, s.rxDepth);
  if (routs < s.rxDepth) {
    err(`Couldn't post receive (${routs})`);
    return null;
  }
  const port = ctx.queryPort(s.ibPort);
  if (port.linkLayer !== LinkLayer.ETHERNET && !port.lid) {
    err("Couldn't get local LID");
    return null;
  }
  const gid = s.gidIndex >= 0 ? gidFromText(ctx.queryGid(s.ibPort, s.gidIndex)) : zeroGid();
  const mine = qpNums.map((qpn) => ({ lid: port.lid, qpn, psn: randomPsn(), gid }));
  for (const d of mine) out(destLine("local", d));
  return { routs, mine };
}
