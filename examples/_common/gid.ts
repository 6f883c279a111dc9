/**
 * GID text forms used by the C tools: the IPv6 presentation form (`inet_ntop`, e.g.
 * `::ffff:10.0.2.15`) for display, and the 32-hex-digit wire form of the pingpong
 * address exchange.
 *
 * @module
 */

import { parseGid } from "../../verbs.ts";

/** A GID's 16 bytes, network order. */
export type GidBytes = Uint8Array;

/** The all-zero GID (sent when no GID index is given). */
export function zeroGid(): GidBytes {
  return new Uint8Array(16);
}

/** Parses `fe80:0000:...` (eight groups) or compressed IPv6 text into 16 bytes. */
export function gidFromText(text: string): GidBytes {
  return parseGid(text);
}

/**
 * The IPv6 presentation form, as glibc's `inet_ntop(AF_INET6)` writes it: the first
 * longest run of two or more zero groups becomes `::`, and IPv4-mapped or
 * IPv4-compatible addresses end in a dotted quad.
 */
export function gidToInet6(gid: GidBytes): string {
  const w: number[] = [];
  for (let i = 0; i < 16; i += 2) w.push((gid[i] << 8) | gid[i + 1]);
  let bestBase = -1, bestLen = 0;
  for (let i = 0; i < 8;) {
    if (w[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && w[j] === 0) j++;
    if (j - i > bestLen) {
      bestBase = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (bestLen < 2) bestBase = -1;
  const v4 = bestBase === 0 &&
    (bestLen === 6 || (bestLen === 7 && w[7] !== 1) || (bestLen === 5 && w[5] === 0xffff));
  let s = "";
  for (let i = 0; i < 8; i++) {
    if (bestBase !== -1 && i >= bestBase && i < bestBase + bestLen) {
      if (i === bestBase) s += ":";
      continue;
    }
    if (i !== 0) s += ":";
    if (i === 6 && v4) {
      s += `${gid[12]}.${gid[13]}.${gid[14]}.${gid[15]}`;
      break;
    }
    s += w[i].toString(16);
  }
  if (bestBase !== -1 && bestBase + bestLen === 8) s += ":";
  return s;
}

/** The 32 lowercase hex digits of the pingpong wire format (bytes in order). */
export function gidToWire(gid: GidBytes): string {
  let s = "";
  for (const b of gid) s += b.toString(16).padStart(2, "0");
  return s;
}

/** Parses the 32-hex-digit wire form (four big-endian 32-bit words). */
export function gidFromWire(text: string): GidBytes {
  const out = new Uint8Array(16);
  for (let i = 0; i < 4; i++) {
    const word = parseInt(text.slice(i * 8, i * 8 + 8), 16) >>> 0;
    new DataView(out.buffer).setUint32(i * 4, Number.isNaN(word) ? 0 : word, false);
  }
  return out;
}

/** True when the interface-id half (bytes 8..15) is non-zero: the C tools then use a GRH. */
export function hasInterfaceId(gid: GidBytes): boolean {
  for (let i = 8; i < 16; i++) if (gid[i] !== 0) return true;
  return false;
}
