/**
 * Socket addresses for the connection manager: parsing numeric IPv4/IPv6
 * addresses into native `sockaddr_in` / `sockaddr_in6` bytes, and reading
 * `sockaddr_in`, `sockaddr_in6` and `sockaddr_ib` back into plain objects.
 * Host names go through {@link getAddrInfo} (`rdma_getaddrinfo`).
 *
 * @module
 */

import { InvalidArgumentError } from "../types/errors.ts";
import { layouts } from "../ffi/native.ts";
import { checkInteger, checkObject, checkString, describe } from "../types/check.ts";
import { decimalDigits, hexGroup } from "../types/digits.ts";

/** `AF_INET`. */
export const AF_INET = 2;
/** `AF_INET6`. */
export const AF_INET6 = 10;
/** `AF_IB` (native InfiniBand addressing, `struct sockaddr_ib`). */
export const AF_IB = 27;

/** An address family as this library names it. */
export type AddressFamily = "IPv4" | "IPv6" | "IB";

/** A socket address as plain data. */
export interface SocketAddress {
  /** The address family. */
  readonly family: AddressFamily;
  /** Dotted IPv4, RFC 5952 IPv6 text, or an IB GID in IPv6 notation. */
  readonly address: string;
  /** The port (host order); for IB the low 16 bits of the service id. */
  readonly port: number;
  /** IPv6 scope id / IB scope id, when not 0. */
  readonly scopeId?: number;
  /** IB only: the service id (`sib_sid`, host order). */
  readonly serviceId?: bigint;
  /** IB only: the partition key. */
  readonly pkey?: number;
}

/**
 * A listener's or a connection side's address as `Deno.NetAddr` has it: the transport (`"tcp"`
 * for rdma_cm's connected port spaces, `"udp"` for its datagram ones), the numeric address and
 * the port.
 */
export interface RdmaAddr<T extends "tcp" | "udp" = "tcp" | "udp"> {
  /** `"tcp"` (RC port spaces) or `"udp"` (UDP, IPoIB). */
  readonly transport: T;
  /** The numeric address (an IB GID in IPv6 notation on IB). */
  readonly hostname: string;
  /** The port. */
  readonly port: number;
}

/** `a` (a CM id's side, null before it is bound) as an {@link RdmaAddr}. */
export function toAddr<T extends "tcp" | "udp">(
  a: SocketAddress | null,
  transport: T,
): RdmaAddr<T> {
  return { transport, hostname: a?.address ?? "", port: a?.port ?? 0 };
}

/** Where a {@link SocketAddress} may come from: a plain object, or "address" with a port. */
export type AddressInput = SocketAddress | { address: string; port?: number };

/** The size of the native buffer that holds any sockaddr (`sockaddr_storage`). */
export const SOCKADDR_STORAGE_SIZE = 128;

/** Parses dotted-quad IPv4 text into 4 bytes, or returns null. */
export function parseIPv4(text: string): Uint8Array | null {
  const parts = text.split(".");
  if (parts.length !== 4) return null;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const v = decimalDigits(parts[i], 3, false);
    if (v < 0 || v > 255) return null;
    out[i] = v;
  }
  return out;
}

/** Parses IPv6 text (with `::`, an embedded IPv4 tail, an optional numeric `%scope`) into 16 bytes and the scope, or null. */
export function parseIPv6(text: string): { bytes: Uint8Array; scopeId: number } | null {
  let scopeId = 0;
  const pct = text.indexOf("%");
  if (pct >= 0) {
    scopeId = decimalDigits(text.slice(pct + 1), 10, true);
    if (scopeId < 0 || scopeId > 0xffffffff) return null;
    text = text.slice(0, pct);
  }
  if (text.startsWith("[") && text.endsWith("]")) text = text.slice(1, -1);
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const groups = (s: string): number[] | null => {
    if (s === "") return [];
    const out: number[] = [];
    const parts = s.split(":");
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i];
      if (i === parts.length - 1 && p.includes(".")) {
        const v4 = parseIPv4(p);
        if (!v4) return null;
        out.push((v4[0] << 8) | v4[1], (v4[2] << 8) | v4[3]);
      } else {
        const v = hexGroup(p);
        if (v < 0) return null;
        out.push(v);
      }
    }
    return out;
  };
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  if (!head || !tail) return null;
  const n = head.length + tail.length;
  if (halves.length === 2 ? n > 7 : n !== 8) return null;
  const all = [...head, ...new Array(8 - n).fill(0), ...tail];
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    bytes[2 * i] = all[i] >> 8;
    bytes[2 * i + 1] = all[i] & 0xff;
  }
  return { bytes, scopeId };
}

/** Formats 16 address bytes as RFC 5952 IPv6 text (longest zero run as `::`, IPv4-mapped as `::ffff:a.b.c.d`). */
export function formatIPv6(bytes: Uint8Array): string {
  const g: number[] = [];
  for (let i = 0; i < 8; i++) g.push((bytes[2 * i] << 8) | bytes[2 * i + 1]);
  if (g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff) {
    return `::ffff:${bytes[12]}.${bytes[13]}.${bytes[14]}.${bytes[15]}`;
  }
  let best = -1, bestLen = 1;
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (a: number[]) => a.map((x) => x.toString(16)).join(":");
  if (best < 0) return hex(g);
  return `${hex(g.slice(0, best))}::${hex(g.slice(best + bestLen))}`;
}

function checkPort(port: number): number {
  return checkInteger("port", port, 0, 0xffff);
}

/**
 * Encodes a numeric address and port as `sockaddr_in` or `sockaddr_in6` bytes
 * (the native layout of this machine), or an address of family `"IB"` (a GID, as
 * {@link getAddrInfo} returns for `AF_IB`) as `sockaddr_ib`. Throws {@link InvalidArgumentError} for
 * anything that is not a numeric IPv4/IPv6 address; resolve names with
 * {@link getAddrInfo} first.
 */
export function encodeSockaddr(input: AddressInput): Uint8Array {
  checkObject("address", input);
  checkString("address.address", input.address);
  const port = checkPort(input.port ?? 0);
  const L = layouts();
  if ("family" in input && input.family === "IB") return encodeSockaddrIb(input, port);
  const v4 = parseIPv4(input.address);
  if (v4) {
    const s = L.sockaddr_in;
    const out = new Uint8Array(s.size);
    const dv = new DataView(out.buffer);
    dv.setUint16(s.fields.sin_family.offset, AF_INET, true);
    dv.setUint16(s.fields.sin_port.offset, port, false);
    out.set(v4, s.fields.sin_addr.offset);
    return out;
  }
  const v6 = parseIPv6(input.address);
  if (v6) {
    const s = L.sockaddr_in6;
    const out = new Uint8Array(s.size);
    const dv = new DataView(out.buffer);
    dv.setUint16(s.fields.sin6_family.offset, AF_INET6, true);
    dv.setUint16(s.fields.sin6_port.offset, port, false);
    out.set(v6.bytes, s.fields.sin6_addr.offset);
    const scope = ("scopeId" in input && input.scopeId) || v6.scopeId;
    dv.setUint32(s.fields.sin6_scope_id.offset, scope, true);
    return out;
  }
  throw new InvalidArgumentError(
    `not a numeric IPv4 or IPv6 address: ${
      describe(input.address)
    } (resolve host names with getAddrInfo)`,
  );
}

/**
 * `struct sockaddr_ib` for an IB address (a GID in IPv6 text): the service id is `serviceId`,
 * else the port (0 for none, e.g. a multicast group), matched in full when set; the P_Key is
 * `pkey`, else 0 (the kernel then uses the port's default).
 */
function encodeSockaddrIb(input: SocketAddress, port: number): Uint8Array {
  const s = layouts().sockaddr_ib;
  const f = s.fields;
  const gid = parseIPv6(input.address);
  if (!gid) {
    throw new InvalidArgumentError(`not an IB address (GID text): ${describe(input.address)}`);
  }
  const out = new Uint8Array(s.size);
  const dv = new DataView(out.buffer);
  const sid = input.serviceId ?? BigInt(port);
  if (typeof sid !== "bigint") {
    throw new InvalidArgumentError(`serviceId must be a bigint, got ${describe(sid)}`);
  }
  dv.setUint16(f.sib_family.offset, AF_IB, true);
  dv.setUint16(f.sib_pkey.offset, checkInteger("pkey", input.pkey ?? 0, 0, 0xffff), false);
  out.set(gid.bytes, f.sib_addr.offset);
  dv.setBigUint64(f.sib_sid.offset, BigInt.asUintN(64, sid), false);
  dv.setBigUint64(f.sib_sid_mask.offset, sid ? 0xffffffffffffffffn : 0n, false);
  dv.setBigUint64(f.sib_scope_id.offset, BigInt(input.scopeId ?? 0), true);
  return out;
}

/**
 * Reads a native sockaddr (`sockaddr_in`, `sockaddr_in6` or `sockaddr_ib`) from
 * `bytes` at `offset`; null when the family is unset (`AF_UNSPEC`) or unknown.
 */
export function decodeSockaddr(bytes: Uint8Array, offset = 0): SocketAddress | null {
  const L = layouts();
  const dv = new DataView(bytes.buffer, bytes.byteOffset + offset);
  const family = dv.getUint16(0, true);
  if (family === AF_INET) {
    const f = L.sockaddr_in.fields;
    const a = offset + f.sin_addr.offset;
    return {
      family: "IPv4",
      address: `${bytes[a]}.${bytes[a + 1]}.${bytes[a + 2]}.${bytes[a + 3]}`,
      port: dv.getUint16(f.sin_port.offset, false),
    };
  }
  if (family === AF_INET6) {
    const f = L.sockaddr_in6.fields;
    const a = offset + f.sin6_addr.offset;
    const scopeId = dv.getUint32(f.sin6_scope_id.offset, true);
    return {
      family: "IPv6",
      address: formatIPv6(bytes.subarray(a, a + 16)),
      port: dv.getUint16(f.sin6_port.offset, false),
      ...(scopeId ? { scopeId } : {}),
    };
  }
  if (family === AF_IB) {
    const f = L.sockaddr_ib.fields;
    const a = offset + f.sib_addr.offset;
    const sid = dv.getBigUint64(f.sib_sid.offset, false);
    const scopeId = Number(dv.getBigUint64(f.sib_scope_id.offset, true));
    return {
      family: "IB",
      address: formatIPv6(bytes.subarray(a, a + 16)),
      port: Number(sid & 0xffffn),
      serviceId: sid,
      pkey: dv.getUint16(f.sib_pkey.offset, false),
      ...(scopeId ? { scopeId } : {}),
    };
  }
  return null;
}
