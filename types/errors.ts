/**
 * The error classes of this library. Every failure is one of these, split by
 * cause: the caller's mistake, a failing C call (with its errno), an operation
 * the provider does not support, a closed object, a missing device or library.
 *
 * @module
 */

import { Errno, errnoName } from "./errno.ts";

/** The base class of every error this library throws. */
export class RdmaError extends Error {
  /** Creates the error. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A C call failed; carries the operation, errno and its name. */
export class NativeError extends RdmaError {
  /** The C function that failed, e.g. `ibv_alloc_pd`. */
  readonly operation: string;
  /** The errno value it left. */
  readonly errno: number;
  /** The errno name, e.g. `ENOMEM`. */
  readonly code: string;
  /** Creates the error; `detail` is the errno's text from the C library. */
  constructor(operation: string, errno: number, detail: string, context?: string) {
    super(`${operation}${context ? ` (${context})` : ""} failed: ${errnoName(errno)} (${detail})`);
    this.operation = operation;
    this.errno = errno;
    this.code = errnoName(errno);
  }
}

/** The provider or device does not support the operation (EOPNOTSUPP and kin). */
export class UnsupportedError extends NativeError {}

/** Errno values that mean "not supported by this provider". */
export const UNSUPPORTED_ERRNOS: ReadonlySet<number> = new Set([
  Errno.EOPNOTSUPP,
  Errno.EPROTONOSUPPORT,
  Errno.ENOSYS,
]);

/** The caller passed something the library or the provider would reject; nothing was sent to the provider. */
export class InvalidArgumentError extends RdmaError {}

/** An object was used after it, or its parent, was closed. */
export class ClosedError extends RdmaError {
  /** Creates the error for the named kind of object (e.g. `ProtectionDomain`). */
  constructor(what: string) {
    super(`${what} is closed`);
  }
}

/** The machine has no RDMA device (or no RDMA support in its kernel). */
export class NoDeviceError extends RdmaError {
  /** Creates the error; `detail` says what was observed. */
  constructor(detail: string) {
    super(
      `No RDMA device found (${detail}). To get one on this machine: use an RDMA NIC ` +
        "(InfiniBand, RoCE or iWARP) with its driver loaded, or create a software device " +
        "on an Ethernet interface: soft-RoCE with `sudo modprobe rdma_rxe && sudo rdma link " +
        "add rxe0 type rxe netdev <ifname>` (or soft-iWARP: `modprobe siw`, `type siw`); " +
        "the `rdma` command is in the iproute2 package and the providers in ibverbs-providers " +
        "(rdma-core). A kernel without RDMA support (no CONFIG_INFINIBAND) cannot do this; " +
        "the project's own tests then run in a QEMU guest (scripts/softroce-vm).",
    );
  }
}

/**
 * The process may not open an RDMA device node (`/dev/infiniband/uverbs*` or
 * `/dev/infiniband/rdma_cm`): a permission problem, not a missing device.
 */
export class DevicePermissionError extends RdmaError {
  /** The device node, e.g. `/dev/infiniband/uverbs0`. */
  readonly node: string;
  /** Creates the error for `node`; `operation` is the C call that failed. */
  constructor(operation: string, node: string) {
    super(
      `${operation} failed: permission denied on ${node}. Give this user read/write access to ` +
        "the RDMA device nodes (e.g. add it to the group that owns them, often `rdma`, or a " +
        'udev rule setting MODE="0666"), or run as root.',
    );
    this.node = node;
  }
}

/** The runtime does not let the program call native code (Deno without `--allow-ffi`). */
export class FfiPermissionError extends RdmaError {
  /** Creates the error. */
  constructor() {
    super(
      "@rdma/verbs calls libibverbs and librdmacm through FFI: run Deno with --allow-ffi " +
        "(e.g. `deno run --allow-ffi main.ts`), or grant it in deno.json's permissions.",
    );
  }
}

/** A native library could not be loaded. */
export class LibraryNotFoundError extends RdmaError {
  /** The library's soname, e.g. `libibverbs.so.1`. */
  readonly library: string;
  /** Creates the error with install hints. */
  constructor(library: string, tried: readonly string[], install: string, reason: string) {
    super(
      `Could not load ${library} (tried: ${tried.join(", ")}): ${reason}. ${install}`,
    );
    this.library = library;
  }
}

/** A wait was cancelled by its AbortSignal or ran past its timeout. */
export class AbortedError extends RdmaError {}

/**
 * A connection manager operation ended in a failure event (`ADDR_ERROR`,
 * `ROUTE_ERROR`, `UNREACHABLE`, `REJECTED`, `CONNECT_ERROR`, `DEVICE_REMOVAL`,
 * `MULTICAST_ERROR`, or an unexpected `DISCONNECTED`). Carries the event, its
 * status and the private data the peer sent with it (a reject's data).
 */
export class CmEventError extends RdmaError {
  /** The `rdma_cm_event_type` value. */
  readonly event: number;
  /** Its C name, e.g. `RDMA_CM_EVENT_REJECTED`. */
  readonly eventName: string;
  /**
   * The event's status: a negative errno for most failures (e.g. -110 ETIMEDOUT),
   * the transport's reject reason for `REJECTED` (IB CM: 28 = consumer reject,
   * 8 = invalid service id; iWARP: a negative errno such as -111 ECONNREFUSED).
   */
  readonly status: number;
  /** The private data that came with the event (a copy), or null. */
  readonly privateData: Uint8Array | null;
  /** Creates the error; `operation` says what was being waited for. */
  constructor(
    operation: string,
    event: number,
    eventName: string,
    status: number,
    privateData: Uint8Array | null,
  ) {
    const st = status < 0 ? `${status} (${errnoName(-status)})` : `${status}`;
    super(`${operation} failed: ${eventName}, status ${st}`);
    this.event = event;
    this.eventName = eventName;
    this.status = status;
    this.privateData = privateData;
  }
}

/**
 * A work request completed with an error status. Carries the status, its name and
 * text (`ibv_wc_status_str`), the vendor error, the WR id and the QP number.
 */
export class WorkCompletionError extends RdmaError {
  /** `enum ibv_wc_status` value. */
  readonly status: number;
  /** Its C name, e.g. `IBV_WC_REM_ACCESS_ERR`. */
  readonly statusName: string;
  /** Vendor error syndrome. */
  readonly vendorErr: number;
  /** The WR id of the failed request. */
  readonly wrId: bigint;
  /** The QP it was posted on. */
  readonly qpNum: number;
  /** Creates the error; `text` is `ibv_wc_status_str(status)`. */
  constructor(
    status: number,
    statusName: string,
    text: string,
    vendorErr: number,
    wrId: bigint,
    qpNum: number,
  ) {
    super(
      `work request ${wrId} on QP ${qpNum} failed: ${statusName} (${text}), vendor error 0x${
        vendorErr.toString(16)
      }`,
    );
    this.status = status;
    this.statusName = statusName;
    this.vendorErr = vendorErr;
    this.wrId = wrId;
    this.qpNum = qpNum;
  }
}
