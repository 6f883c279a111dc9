/**
 * What the rdma_cm tools share: the C tools' return statuses, their `perror` and failure-event
 * lines, and the resources of one connection (PD, CQs, QP, message buffer).
 *
 * @module
 */

import {
  AccessFlags,
  type AddrInfoHints,
  awaitCompletions,
  CmEventError,
  CmEventType,
  type CmId,
  type CompletionQueue,
  Errno,
  errnoName,
  getAddrInfo,
  type MemoryRegion,
  NativeError,
  PortSpace,
  type ProtectionDomain,
  QpType,
  type QueuePair,
  RdmaError,
  type SocketAddress,
  WcStatus,
} from "../../cm.ts";
import { intOption, type OptionSpec, out, UsageError, type Values } from "./cli.ts";

/** A failure the C tool reports as a return status (after printing its own line). */
export class Status extends Error {
  /**
   * Creates the failure with the C tool's return value; `error` is the library error behind it
   * (a later `perror` prints its errno again, as C's does).
   */
  constructor(readonly status: number, readonly error?: unknown) {
    super(`status ${status}`);
  }
}

/** glibc's `strerror` texts of the errnos the tools meet. */
const ERRNO_TEXT: Readonly<Record<string, string>> = {
  EPERM: "Operation not permitted",
  ENOENT: "No such file or directory",
  EINTR: "Interrupted system call",
  EIO: "Input/output error",
  EAGAIN: "Resource temporarily unavailable",
  ENOMEM: "Cannot allocate memory",
  EACCES: "Permission denied",
  EBUSY: "Device or resource busy",
  EEXIST: "File exists",
  ENODEV: "No such device",
  EINVAL: "Invalid argument",
  ENOSPC: "No space left on device",
  ENOSYS: "Function not implemented",
  ENODATA: "No data available",
  EPROTONOSUPPORT: "Protocol not supported",
  EOPNOTSUPP: "Operation not supported",
  EAFNOSUPPORT: "Address family not supported by protocol",
  EADDRINUSE: "Address already in use",
  EADDRNOTAVAIL: "Cannot assign requested address",
  ENETDOWN: "Network is down",
  ENETUNREACH: "Network is unreachable",
  ECONNABORTED: "Software caused connection abort",
  ECONNRESET: "Connection reset by peer",
  ENOTCONN: "Transport endpoint is not connected",
  ETIMEDOUT: "Connection timed out",
  ECONNREFUSED: "Connection refused",
  EHOSTUNREACH: "No route to host",
};

/** `strerror(errno)` as glibc words it. */
export function errnoText(errno: number): string {
  return ERRNO_TEXT[errnoName(errno)] ?? `Unknown error ${errno}`;
}

/**
 * The errno a C tool sees for a library error: the call's errno, and for a failure event what
 * librdmacm's synchronous calls set (REJECTED: ECONNREFUSED; otherwise the status).
 */
export function errnoOf(e: unknown): number {
  if (typeof e === "number") return e;
  if (e instanceof NativeError) return e.errno;
  if (e instanceof CmEventError) {
    if (e.event === CmEventType.REJECTED) return Errno.ECONNREFUSED;
    return Math.abs(e.status) || Errno.EIO;
  }
  if (e instanceof RdmaError) return Errno.EINVAL;
  throw e;
}

/**
 * `perror(what)`: `what: <strerror>` on stdout's neighbour stderr; `e` is a library error or an
 * errno; rethrows anything else.
 */
export function perror(what: string, e: unknown): void {
  console.error(`${what}: ${errnoText(errnoOf(e))}`);
}

/**
 * The errno C holds after `perror` printed `e`'s: the same, except that glibc's `strerror` sets
 * EINVAL for a number it has no text for (a kernel-internal errno such as 524).
 */
export function errnoAfterPerror(e: unknown): number {
  const errno = errnoOf(e);
  return ERRNO_TEXT[errnoName(errno)] === undefined ? Errno.EINVAL : errno;
}

/**
 * The C tools' line for a failure event, `<tool>: event: <NAME>, error: <status>` (cmtime has
 * no tool prefix: pass ""); returns the status. Anything but a failure event is rethrown.
 */
export function eventStatus(tool: string, e: unknown): number {
  if (e instanceof Status) return e.status;
  if (!(e instanceof CmEventError)) throw e;
  out(`${tool ? `${tool}: ` : ""}event: ${e.eventName}, error: ${e.status}`);
  return e.status;
}

/** Waits for `count` completions on `cq`; an error status fails with the completion's status. */
export async function pollOk(cq: CompletionQueue, count: number): Promise<void> {
  for (let done = 0; done < count;) {
    const n = await awaitCompletions(cq, { max: 8 });
    for (let i = 0; i < n; i++) {
      const wc = cq.completion(i);
      if (wc.status !== WcStatus.SUCCESS) {
        throw new Error(`completion with status ${wc.statusName} (${wc.status})`);
      }
    }
    done += n;
  }
}

/** The verbs objects of one connection of the cmatose family of tools. */
export class CmNode {
  /** The connection's id (replaced when it migrates to another channel). */
  id: CmId;
  /** Its PD. */
  readonly pd: ProtectionDomain;
  /** Send CQ. */
  readonly sendCq: CompletionQueue;
  /** Receive CQ (the send CQ when `shared`). */
  readonly recvCq: CompletionQueue;
  /** The QP on the id. */
  readonly qp: QueuePair;
  /** The message buffer (`size` bytes plus `headroom`), or null when no messages are sent. */
  readonly mr: MemoryRegion | null;

  /**
   * Creates the PD, CQs (with completion channels, `cqe` entries), QP (`depth` WRs each way,
   * RC or UD from the id) and buffer of one connection, as the C tools' `init_node`.
   */
  constructor(
    id: CmId,
    o: {
      cqe: number;
      depth: number;
      size: number;
      headroom?: number;
      shared?: boolean;
      sqSigAll?: boolean;
    },
  ) {
    const ctx = id.context;
    this.id = id;
    this.pd = ctx.allocPd();
    const cq = () => ctx.createCq({ cqe: o.cqe, channel: ctx.createCompChannel() });
    this.sendCq = cq();
    this.recvCq = o.shared ? this.sendCq : cq();
    this.qp = id.createQp(this.pd, {
      sendCq: this.sendCq,
      recvCq: this.recvCq,
      type: id.isUd ? QpType.UD : QpType.RC,
      cap: { maxSendWr: o.depth, maxRecvWr: o.depth, maxSendSge: 1, maxRecvSge: 1 },
      sqSigAll: o.sqSigAll,
    });
    this.mr = o.size
      ? this.pd.allocBuffer(o.size + (o.headroom ?? 0), { access: AccessFlags.LOCAL_WRITE })
      : null;
  }

  /** Waits for `count` successful completions on `cq`. */
  poll(cq: CompletionQueue, count: number): Promise<void> {
    return pollOk(cq, count);
  }

  /** Destroys the QP and id, then the CQs (and their channels), the buffer and the PD. */
  close(): void {
    this.id.close();
    this.mr?.close();
    for (const cq of new Set([this.sendCq, this.recvCq])) {
      const channel = cq.channel;
      cq.close();
      channel?.close();
    }
    this.pd.close();
  }
}

/**
 * The `-f address_format` option of the cmatose family (`name`, `ip`, `ipv6` or `gid`) as
 * `rdma_getaddrinfo` hints: `ip` numeric, `gid` numeric AF_IB. An unknown format is a warning.
 */
export function formatHints(format: string | undefined): AddrInfoHints {
  if (format === undefined) return {};
  const f = format.toLowerCase();
  if (f.startsWith("ip")) return { numericHost: true };
  if (f.startsWith("gid")) return { numericHost: true, family: "IB" };
  if (!f.startsWith("name")) console.error("Warning: unknown address format");
  return {};
}

/** The addresses of a tool: where to bind or resolve from, where to connect, ACM's private data. */
export interface RdmaAddr {
  /** The local address (the bind address of a server, `-b` of a client), or null. */
  readonly source: SocketAddress | null;
  /** The server's address (clients), or null. */
  readonly destination: SocketAddress | null;
  /** `ai_connect`: what goes in front of the connect private data (empty without ACM). */
  readonly connectData: Uint8Array;
}

/**
 * `get_rdma_addr` of the C tools' common.c: a server resolves `src` (or the wildcard) and the
 * port passively; a client resolves `src` passively, then `dst` and the port.
 */
export function getRdmaAddr(
  src: string | undefined,
  dst: string | undefined,
  port: number,
  hints: AddrInfoHints,
): RdmaAddr {
  if (hints.passive) {
    const [ai] = getAddrInfo(src ?? null, port, hints);
    return { source: ai?.source ?? null, destination: null, connectData: new Uint8Array() };
  }
  const source = src === undefined
    ? null
    : getAddrInfo(src, null, { ...hints, passive: true })[0]?.source ?? null;
  const [ai] = getAddrInfo(dst ?? null, port, hints);
  return {
    source: source ?? ai?.source ?? null,
    destination: ai?.destination ?? null,
    connectData: ai?.connectData ?? new Uint8Array(),
  };
}

/** `gai_strerror` of what `rdma_getaddrinfo` returns on failure (-1: EAI_BADFLAGS's text). */
export const GAI_FAILURE = "Bad value for ai_flags";

/** The options of the cmatose family of tools, by the long names the tools use. */
const CM_OPTIONS = {
  server: { short: "s", type: "string", arg: "server_address", help: "connect to this server" },
  bind: { short: "b", type: "string", arg: "bind_address", help: "local address to bind to" },
  format: { short: "f", type: "string", arg: "address_format", help: "name, ip, ipv6, or gid" },
  connections: { short: "c", type: "string", arg: "connections", help: "default 1" },
  count: { short: "C", type: "string", arg: "message_count", help: "default 10" },
  size: { short: "S", type: "string", arg: "message_size", help: "default 100" },
  tos: { short: "t", type: "string", arg: "type_of_service", help: "IP type of service" },
  "ud-port-space": {
    short: "p",
    type: "string",
    arg: "port_space",
    help: "0x111 for UDP (default), 0x2 for IPOIB",
  },
} as const satisfies Record<string, OptionSpec>;

/** The named options of {@link CM_OPTIONS}, in the order given. */
export function cmOptions(...names: (keyof typeof CM_OPTIONS)[]): Record<string, OptionSpec> {
  return Object.fromEntries(names.map((n) => [n, CM_OPTIONS[n]]));
}

/** `-c`, `-C`, `-S` (a size of 0 sends no messages, as the C tools) and `-t`. */
export function cmCounts(values: Values): {
  connections: number;
  count: number;
  size: number;
  tos?: number;
} {
  const size = intOption(values, "size", 100, 0, 1 << 24);
  return {
    connections: intOption(values, "connections", 1, 1, 1024),
    count: size ? intOption(values, "count", 10, 0, 1 << 16) : 0,
    size,
    tos: values.tos === undefined ? undefined : intOption(values, "tos", 0, 0, 255),
  };
}

/** `-p 0x111|0x2` of udaddy and mckey: the UD port space. */
export function udPortSpace(values: Values): "UDP" | "IPOIB" {
  const raw = values["ud-port-space"];
  if (raw === undefined) return "UDP";
  const v = intOption(values, "ud-port-space", PortSpace.UDP);
  if (v === PortSpace.UDP) return "UDP";
  if (v === PortSpace.IPOIB) return "IPOIB";
  throw new UsageError(`-p: unknown port space ${String(raw)} (0x111 UDP, 0x2 IPOIB)`);
}

/**
 * A server's start in the cmatose family: the bind address (resolved passively, `-b` or the
 * wildcard), `rdma_bind_addr`, `rdma_listen`; on failure the C tool's line (after `prefix`) and
 * false.
 */
export function bindAndListen(
  prefix: string,
  listener: CmId,
  src: string | undefined,
  port: number,
  hints: AddrInfoHints,
): boolean {
  let addr: RdmaAddr;
  try {
    addr = getRdmaAddr(src, undefined, port, { ...hints, passive: true });
  } catch {
    out(`${prefix}getrdmaaddr error: ${GAI_FAILURE}`);
    return false;
  }
  try {
    listener.bind(addr.source ?? { address: "0.0.0.0", port });
  } catch (e) {
    perror(`${prefix}bind address failed`, e);
    return false;
  }
  try {
    listener.listen();
  } catch (e) {
    perror(`${prefix}failure trying to listen`, e);
    return false;
  }
  return true;
}

/** The end of the cmatose family's main: `test complete`, the clean-up, `return status N`. */
export async function cmTest(run: () => Promise<number>, cleanup: () => void): Promise<number> {
  let ret: number;
  try {
    ret = await run();
  } finally {
    out("test complete");
    cleanup();
  }
  out(`return status ${ret}`);
  return ret;
}
