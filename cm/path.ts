/**
 * InfiniBand path records of a CM id: the paths the connection manager resolved
 * (`id->route.path_rec`, `struct ibv_sa_path_rec`) and the `RDMA_OPTION_IB_PATH` option, which
 * sets a route from a path record the caller has (from an earlier resolution, a cache or a
 * subnet administrator query) instead of `rdma_resolve_route`. RoCE uses the same records (the
 * GIDs are the RoCE GIDs); iWARP has none.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { checkCall } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { OptionIb, OptionLevel, PathFlag } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { checkInteger, checkObject, describe } from "../types/check.ts";
import { type GidLike, parseGid } from "../verbs/gid.ts";
import type { U64 } from "../verbs/wr.ts";
import type { CmIdBase } from "./id-base.ts";

/** An InfiniBand path record (the fields of `struct ibv_sa_path_rec`, in host order). */
export interface PathRecord {
  /** Destination GID (16 bytes). */
  readonly dgid: Uint8Array;
  /** Source GID (16 bytes). */
  readonly sgid: Uint8Array;
  /** Destination LID (0 on RoCE). */
  readonly dlid: number;
  /** Source LID (0 on RoCE). */
  readonly slid: number;
  /** Raw traffic (not IBA transport). */
  readonly rawTraffic: boolean;
  /** Flow label (20 bits). */
  readonly flowLabel: number;
  /** Hop limit. */
  readonly hopLimit: number;
  /** Traffic class. */
  readonly trafficClass: number;
  /** The path is reversible. */
  readonly reversible: boolean;
  /** Number of paths (7 bits). */
  readonly numbPath: number;
  /** Partition key. */
  readonly pkey: number;
  /** Service level (4 bits). */
  readonly sl: number;
  /** MTU selector (2 bits). */
  readonly mtuSelector: number;
  /** Path MTU, an `Mtu` value (6 bits). */
  readonly mtu: number;
  /** Rate selector (2 bits). */
  readonly rateSelector: number;
  /** Static rate, a `Rate` value (6 bits). */
  readonly rate: number;
  /** Packet life time selector (2 bits). */
  readonly packetLifeTimeSelector: number;
  /** Packet life time (6 bits, 4.096 µs × 2^n). */
  readonly packetLifeTime: number;
  /** Preference. */
  readonly preference: number;
}

/**
 * A path to set with `RDMA_OPTION_IB_PATH`: a {@link PathRecord} (a resolved one as it is), GIDs
 * in any form, fields left out are 0, and a service id.
 */
export interface PathInput extends Partial<Omit<PathRecord, "dgid" | "sgid">> {
  /** Destination GID. */
  readonly dgid: GidLike;
  /** Source GID (one of the local port's GIDs). */
  readonly sgid: GidLike;
  /** The service id of the record (default 0; the CM uses the id's own service id). */
  readonly serviceId?: U64;
}

/** The paths the connection manager resolved for `id` (`route.path_rec`, `route.num_paths`). */
export function routePaths(id: CmIdBase): PathRecord[] {
  id.assertOpen();
  const n = native();
  const L = layouts();
  const R = L.rdma_cm_id.fields;
  const count = new DataView(n.arrayBuffer(id.ptr, L.rdma_cm_id.size))
    .getInt32(R["route.num_paths"].offset, true);
  const base = n.readPointer(id.ptr, R["route.path_rec"].offset);
  if (base === null || count <= 0) return [];
  const P = L.ibv_sa_path_rec;
  const F = P.fields;
  const v = new DataView(new Uint8Array(n.arrayBuffer(base, P.size * count)).slice().buffer);
  const out: PathRecord[] = [];
  for (let i = 0, at = 0; i < count; i++, at += P.size) {
    const gid = (f: { offset: number }) =>
      new Uint8Array(v.buffer.slice(at + f.offset, at + f.offset + 16));
    const u8 = (f: { offset: number }) => v.getUint8(at + f.offset);
    out.push({
      dgid: gid(F.dgid),
      sgid: gid(F.sgid),
      dlid: v.getUint16(at + F.dlid.offset, false),
      slid: v.getUint16(at + F.slid.offset, false),
      rawTraffic: v.getInt32(at + F.raw_traffic.offset, true) !== 0,
      flowLabel: v.getUint32(at + F.flow_label.offset, false),
      hopLimit: u8(F.hop_limit),
      trafficClass: u8(F.traffic_class),
      reversible: v.getInt32(at + F.reversible.offset, true) !== 0,
      numbPath: u8(F.numb_path),
      pkey: v.getUint16(at + F.pkey.offset, false),
      sl: u8(F.sl),
      mtuSelector: u8(F.mtu_selector),
      mtu: u8(F.mtu),
      rateSelector: u8(F.rate_selector),
      rate: u8(F.rate),
      packetLifeTimeSelector: u8(F.packet_life_time_selector),
      packetLifeTime: u8(F.packet_life_time),
      preference: u8(F.preference),
    });
  }
  return out;
}

/**
 * Writes `paths` as `struct ibv_path_data` records (the packed SA wire format, network order),
 * the first one flagged primary and bidirectional, into a new block.
 */
function encodePaths(paths: readonly PathInput[]): NativeBlock {
  if (!Array.isArray(paths) || paths.length === 0 || paths.length > 8) {
    throw new InvalidArgumentError(
      `setIbPath: paths must be an array of 1..8 path records, got ${describe(paths)}`,
    );
  }
  const D = layouts().ibv_path_data;
  const F = D.fields;
  const block = new NativeBlock(D.size * paths.length, 8);
  try {
    paths.forEach((p, i) => {
      checkObject(`paths[${i}]`, p);
      const at = i * D.size;
      const v = block.view;
      const bits = (name: string, value: number | undefined, width: number) =>
        checkInteger(`paths[${i}].${name}`, value ?? 0, 0, 2 ** width - 1);
      const flag = (value: boolean | undefined) => (value ? 1 : 0);
      const field = (name: string) => at + F[`path.${name}` as keyof typeof F].offset;
      v.setUint32(
        at + F.flags.offset,
        PathFlag.GMP | PathFlag.PRIMARY | PathFlag.BIDIRECTIONAL,
        true,
      );
      const sid = p.serviceId ?? 0;
      if (typeof sid !== "bigint" && !Number.isSafeInteger(sid)) {
        throw new InvalidArgumentError(
          `paths[${i}].serviceId: not a 64-bit value ${describe(sid)}`,
        );
      }
      v.setBigUint64(field("service_id"), BigInt.asUintN(64, BigInt(sid)), false);
      block.bytes.set(parseGid(p.dgid), field("dgid"));
      block.bytes.set(parseGid(p.sgid), field("sgid"));
      v.setUint16(field("dlid"), bits("dlid", p.dlid, 16), false);
      v.setUint16(field("slid"), bits("slid", p.slid, 16), false);
      v.setUint32(
        field("flowlabel_hoplimit"),
        ((flag(p.rawTraffic) << 31) | (bits("flowLabel", p.flowLabel, 20) << 8) |
          bits("hopLimit", p.hopLimit, 8)) >>> 0,
        false,
      );
      v.setUint8(field("tclass"), bits("trafficClass", p.trafficClass, 8));
      v.setUint8(
        field("reversible_numpath"),
        (flag(p.reversible) << 7) | bits("numbPath", p.numbPath, 7),
      );
      v.setUint16(field("pkey"), bits("pkey", p.pkey, 16), false);
      v.setUint16(field("qosclass_sl"), bits("sl", p.sl, 4), false);
      const sel = (name: string, s: number | undefined, value: number | undefined) =>
        (bits(`${name}Selector`, s, 2) << 6) | bits(name, value, 6);
      v.setUint8(field("mtu"), sel("mtu", p.mtuSelector, p.mtu));
      v.setUint8(field("rate"), sel("rate", p.rateSelector, p.rate));
      v.setUint8(
        field("packetlifetime"),
        sel("packetLifeTime", p.packetLifeTimeSelector, p.packetLifeTime),
      );
      v.setUint8(field("preference"), bits("preference", p.preference, 8));
    });
    return block;
  } catch (e) {
    block.free();
    throw e;
  }
}

/**
 * Sets the route of an id whose address is resolved from path records
 * (`rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH)`); the kernel answers with
 * ROUTE_RESOLVED (module-private: `id.setIbPath()` waits for it).
 */
export function setIbPath(id: CmIdBase, paths: readonly PathInput[]): void {
  const block = encodePaths(paths);
  try {
    checkCall(
      "rdma_set_option",
      native().rdmacm.rdma_set_option(
        id.ptr,
        OptionLevel.IB,
        OptionIb.PATH,
        block.ptr,
        block.size,
      ),
      "RDMA_OPTION_IB_PATH",
    );
  } finally {
    block.free();
  }
}
