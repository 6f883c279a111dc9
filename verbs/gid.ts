/**
 * GIDs: 16 bytes, written as eight groups of four hex digits like the rdma-core
 * tools print them (`fe80:0000:0000:0000:...`); `::` compression is accepted.
 *
 * @module
 */

import { InvalidArgumentError } from "../types/errors.ts";
import { hexGroup } from "../types/digits.ts";

/** A GID as text or as its 16 raw bytes (network order). */
export type GidLike = string | Uint8Array;

/** Formats 16 GID bytes as eight colon-separated groups of four hex digits. */
export function formatGid(raw: Uint8Array): string {
  const parts: string[] = [];
  for (let i = 0; i < 16; i += 2) {
    parts.push(((raw[i] << 8) | raw[i + 1]).toString(16).padStart(4, "0"));
  }
  return parts.join(":");
}

/** Parses a GID (IPv6 text, `::` allowed, or 16 bytes) into 16 bytes. */
export function parseGid(gid: GidLike): Uint8Array {
  if (typeof gid !== "string" && !(gid instanceof Uint8Array)) {
    throw new InvalidArgumentError(`a GID is text or 16 bytes, got ${typeof gid}`);
  }
  if (gid instanceof Uint8Array) {
    if (gid.length !== 16) throw new InvalidArgumentError(`a GID has 16 bytes, got ${gid.length}`);
    return gid;
  }
  const halves = gid.split("::");
  if (halves.length > 2) throw new InvalidArgumentError(`not a GID: "${gid}"`);
  const head = halves[0] ? halves[0].split(":") : [];
  const tail = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
  const fill = halves.length === 2 ? 8 - head.length - tail.length : 0;
  const groups = [...head, ...new Array(Math.max(0, fill)).fill("0"), ...tail];
  const bad = () => new InvalidArgumentError(`not a GID: "${gid}"`);
  if (groups.length !== 8) throw bad();
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    const v = hexGroup(groups[i]);
    if (v < 0) throw bad();
    out[2 * i] = v >> 8;
    out[2 * i + 1] = v & 0xff;
  }
  return out;
}
