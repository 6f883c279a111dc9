/**
 * `rdma_getaddrinfo`: host and service names to RDMA addresses, copied out into
 * plain objects (the native list is freed before returning).
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { PortSpace, RaiFlags } from "../types/enums.ts";
import { nativeError } from "../ffi/errors.ts";
import { AF_IB, AF_INET, AF_INET6, decodeSockaddr, type SocketAddress } from "./address.ts";
import { copyBytes, NativeBlock } from "../ffi/memory.ts";
import { describe } from "../types/check.ts";

/** Hints for {@link getAddrInfo}. */
export interface AddrInfoHints {
  /** Resolve a local (listening) address: `RAI_PASSIVE`. */
  passive?: boolean;
  /** Do not resolve names: `RAI_NUMERICHOST`. */
  numericHost?: boolean;
  /** Skip route resolution: `RAI_NOROUTE`. */
  noRoute?: boolean;
  /** Address family to return. */
  family?: "IPv4" | "IPv6" | "IB";
  /** QP type (`IBV_QPT_RC` 2, `IBV_QPT_UD` 4). */
  qpType?: number;
  /** Port space (`PortSpace.TCP`, `PortSpace.UDP`, `PortSpace.IB`). */
  portSpace?: number;
}

/** One result of {@link getAddrInfo}. */
export interface AddrInfo {
  /** `ai_flags`. */
  readonly flags: number;
  /** The address family. */
  readonly family: "IPv4" | "IPv6" | "IB" | "unspecified";
  /** `ai_qp_type`. */
  readonly qpType: number;
  /** `ai_port_space`. */
  readonly portSpace: number;
  /** The source address, when one was given or resolved. */
  readonly source: SocketAddress | null;
  /** The destination address. */
  readonly destination: SocketAddress | null;
  /** `ai_src_canonname`. */
  readonly sourceName: string | null;
  /** `ai_dst_canonname`. */
  readonly destinationName: string | null;
  /** `ai_connect`: data librdmacm puts in front of connect private data (IB ACM); empty if none. */
  readonly connectData: Uint8Array;
  /** `ai_route_len`: bytes of path records resolved with the address (0 if none). */
  readonly routeLength: number;
}

const FAMILIES = { IPv4: AF_INET, IPv6: AF_INET6, IB: AF_IB } as const;

function familyName(f: number): AddrInfo["family"] {
  return f === AF_INET ? "IPv4" : f === AF_INET6 ? "IPv6" : f === AF_IB ? "IB" : "unspecified";
}

/**
 * Resolves `node` (a host name or numeric address; null for the wildcard with
 * `passive`) and `service` (a port number or name) to RDMA addresses with
 * `rdma_getaddrinfo`. Throws a {@link NativeError} when nothing resolves.
 */
export function getAddrInfo(
  node: string | null,
  service: string | number | null,
  hints_: AddrInfoHints = {},
): AddrInfo[] {
  if (typeof hints_ !== "object" || hints_ === null) {
    throw new InvalidArgumentError("getAddrInfo: hints must be an object");
  }
  if (node !== null && typeof node !== "string") {
    throw new InvalidArgumentError("getAddrInfo: node must be a string or null");
  }
  if (service !== null && typeof service !== "string" && !Number.isInteger(service)) {
    throw new InvalidArgumentError("getAddrInfo: service must be a port number, a name or null");
  }
  if (node === null && service === null) {
    throw new InvalidArgumentError("getAddrInfo: node and service cannot both be null");
  }
  if (hints_.family !== undefined && !(hints_.family in FAMILIES)) {
    throw new InvalidArgumentError(`getAddrInfo: unknown family ${describe(hints_.family)}`);
  }
  if (
    hints_.portSpace !== undefined && !Object.values(PortSpace).includes(hints_.portSpace as never)
  ) {
    throw new InvalidArgumentError(`getAddrInfo: unknown port space ${describe(hints_.portSpace)}`);
  }
  const n = native();
  const A = layouts().rdma_addrinfo;
  const hints = new NativeBlock(A.size, 8);
  const res = new NativeBlock(8, 8);
  const nodeBlock = node === null ? null : NativeBlock.from(n.cstringBytes(node));
  const svcBlock = service === null ? null : NativeBlock.from(n.cstringBytes(String(service)));
  try {
    const hv = hints.view;
    let flags = 0;
    if (hints_.passive) flags |= RaiFlags.PASSIVE;
    if (hints_.numericHost) flags |= RaiFlags.NUMERICHOST;
    if (hints_.noRoute) flags |= RaiFlags.NOROUTE;
    if (hints_.family) flags |= RaiFlags.FAMILY;
    hv.setInt32(A.fields.ai_flags.offset, flags, true);
    hv.setInt32(A.fields.ai_family.offset, hints_.family ? FAMILIES[hints_.family] : 0, true);
    hv.setInt32(A.fields.ai_qp_type.offset, hints_.qpType ?? 0, true);
    hv.setInt32(A.fields.ai_port_space.offset, hints_.portSpace ?? 0, true);
    n.setErrno(0);
    const rc = n.rdmacm.rdma_getaddrinfo(
      nodeBlock?.ptr ?? null,
      svcBlock?.ptr ?? null,
      hints.ptr,
      res.ptr,
    );
    if (rc !== 0) {
      const errno = n.errno();
      throw nativeError("rdma_getaddrinfo", errno || Math.abs(rc), `${node}:${service}`);
    }
    const head = res.pointerAt(0);
    const out: AddrInfo[] = [];
    try {
      for (let p = head; p !== null; p = n.readPointer(p, A.fields.ai_next.offset)) {
        const v = new DataView(n.arrayBuffer(p, A.size));
        const addr = (ptrOff: number, lenOff: number) => {
          const ap = n.readPointer(p, ptrOff);
          const len = v.getUint32(lenOff, true);
          return ap === null || len === 0 ? null : decodeSockaddr(copyBytes(ap, len));
        };
        const conn = n.readPointer(p, A.fields.ai_connect.offset);
        out.push({
          flags: v.getInt32(A.fields.ai_flags.offset, true),
          family: familyName(v.getInt32(A.fields.ai_family.offset, true)),
          qpType: v.getInt32(A.fields.ai_qp_type.offset, true),
          portSpace: v.getInt32(A.fields.ai_port_space.offset, true),
          source: addr(A.fields.ai_src_addr.offset, A.fields.ai_src_len.offset),
          destination: addr(A.fields.ai_dst_addr.offset, A.fields.ai_dst_len.offset),
          sourceName: n.cstring(n.readPointer(p, A.fields.ai_src_canonname.offset)),
          destinationName: n.cstring(n.readPointer(p, A.fields.ai_dst_canonname.offset)),
          connectData: copyBytes(
            conn,
            Number(v.getBigUint64(A.fields.ai_connect_len.offset, true)),
          ),
          routeLength: Number(v.getBigUint64(A.fields.ai_route_len.offset, true)),
        });
      }
    } finally {
      n.rdmacm.rdma_freeaddrinfo(head);
    }
    return out;
  } finally {
    hints.free();
    res.free();
    nodeBlock?.free();
    svcBlock?.free();
  }
}
