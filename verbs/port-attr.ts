/**
 * Port, GID and P_Key queries as typed objects with readable enum names. The port is queried
 * through `verbs_context.query_port` (the exported `ibv_query_port` fills only the truncated
 * compat struct).
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import {
  enumName,
  flagNames,
  GidType,
  LinkLayer,
  type Mtu,
  mtuStr,
  mtuToBytes,
  physStateStr,
  PortCapFlags,
  PortState,
  portStateStr,
  speedStr,
  widthStr,
} from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { throwErrno, throwReturned } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { readScalars } from "./_structs.ts";
import { formatGid } from "./gid.ts";
import type { Context } from "./context.ts";
import { checkInteger } from "../types/check.ts";

/** `struct ibv_port_attr` with camelCase names plus readable names. */
export interface PortAttr {
  /** `enum ibv_port_state`. */
  readonly state: PortState;
  /** The state's C name (`IBV_PORT_ACTIVE`). */
  readonly stateName: string;
  /** The state's text (`ibv_port_state_str`). */
  readonly stateText: string;
  /** `enum ibv_mtu` of the largest MTU. */
  readonly maxMtu: Mtu;
  /** `enum ibv_mtu` in use. */
  readonly activeMtu: Mtu;
  /** The active MTU in bytes. */
  readonly activeMtuBytes: number;
  /** Length of the GID table. */
  readonly gidTblLen: number;
  /** `port_cap_flags` as C names. */
  readonly portCapFlagNames: readonly string[];
  /** Maximum message size. */
  readonly maxMsgSz: number;
  /** Length of the P_Key table. */
  readonly pkeyTblLen: number;
  /** LID (0 on RoCE). */
  readonly lid: number;
  /** `IBV_LINK_LAYER_*`. */
  readonly linkLayer: LinkLayer;
  /** The link layer's C name. */
  readonly linkLayerName: string;
  /** Readable width, speed, physical state and MTU. */
  readonly activeWidthName: string;
  /** Readable active speed. */
  readonly activeSpeedName: string;
  /** Readable physical state. */
  readonly physStateName: string;
  /** Readable active MTU. */
  readonly activeMtuName: string;
  /** Every other scalar field of `ibv_port_attr`. */
  readonly [field: string]: number | string | readonly string[];
}

/** One GID table entry (`struct ibv_gid_entry`). */
export interface GidEntry {
  /** The GID text. */
  readonly gid: string;
  /** Index in the port's table. */
  readonly gidIndex: number;
  /** Port number. */
  readonly portNum: number;
  /** `enum ibv_gid_type` value. */
  readonly gidType: GidType;
  /** Its C name (`IBV_GID_TYPE_ROCE_V2`). */
  readonly gidTypeName: string;
  /** Interface index of the netdev (RoCE), 0 otherwise. */
  readonly ndevIfindex: number;
}

function checkPort(port: number): void {
  checkInteger("port", port, 1, 255);
}

/** The full `struct ibv_port_attr` through `verbs_context.query_port` (compat query otherwise). */
export function queryPort(ctx: Context, port: number): PortAttr {
  checkPort(port);
  const n = native();
  const L = layouts().ibv_port_attr;
  const fn = ctx.extendedOp("query_port");
  const block = new NativeBlock(L.size, 8);
  try {
    const rc = fn
      ? n.fnPointer(fn, IBVERBS_OPS.query_port)(ctx.ptr, port, block.ptr, L.size)
      : n.ibverbs.ibv_query_port(ctx.ptr, port, block.ptr);
    if (rc !== 0) throwReturned("ibv_query_port", rc, `port ${port}`);
    const o = readScalars(block.view, L) as Record<string, number>;
    return {
      ...o,
      state: o.state as PortState,
      stateName: enumName(PortState, o.state, "IBV_PORT_"),
      stateText: portStateStr(o.state),
      maxMtu: o.maxMtu as Mtu,
      activeMtu: o.activeMtu as Mtu,
      activeMtuBytes: mtuToBytes(o.activeMtu) ?? 0,
      activeMtuName: mtuStr(o.activeMtu),
      gidTblLen: o.gidTblLen,
      portCapFlagNames: flagNames(PortCapFlags, o.portCapFlags, "IBV_PORT_"),
      maxMsgSz: o.maxMsgSz,
      pkeyTblLen: o.pkeyTblLen,
      lid: o.lid,
      linkLayer: o.linkLayer as LinkLayer,
      linkLayerName: enumName(LinkLayer, o.linkLayer, "IBV_LINK_LAYER_"),
      activeWidthName: widthStr(o.activeWidth),
      activeSpeedName: speedStr(o.activeSpeed),
      physStateName: physStateStr(o.physState),
    };
  } finally {
    block.free();
  }
}

/** `ibv_query_gid`: one GID as text. */
export function queryGid(ctx: Context, port: number, index: number): string {
  ctx.assertOpen();
  checkPort(port);
  checkInteger("GID index", index, 0, 0x7fffffff);
  const block = new NativeBlock(16, 8);
  try {
    if (native().ibverbs.ibv_query_gid(ctx.ptr, port, index, block.ptr) !== 0) {
      throwErrno("ibv_query_gid", `port ${port} index ${index}`);
    }
    return formatGid(block.bytes);
  } finally {
    block.free();
  }
}

function gidEntry(view: DataView, base: number): GidEntry {
  const L = layouts().ibv_gid_entry.fields;
  const gidType = view.getUint32(base + L.gid_type.offset, true) as GidType;
  return {
    gid: formatGid(new Uint8Array(view.buffer, view.byteOffset + base + L.gid.offset, 16)),
    gidIndex: view.getUint32(base + L.gid_index.offset, true),
    portNum: view.getUint32(base + L.port_num.offset, true),
    gidType,
    gidTypeName: enumName(GidType, gidType, "IBV_GID_TYPE_"),
    ndevIfindex: view.getUint32(base + L.ndev_ifindex.offset, true),
  };
}

/** `ibv_query_gid_ex`: one GID entry with its type. */
export function queryGidEx(ctx: Context, port: number, index: number): GidEntry {
  ctx.assertOpen();
  checkPort(port);
  checkInteger("GID index", index, 0, 0x7fffffff);
  const n = native();
  const size = layouts().ibv_gid_entry.size;
  const fn = n.ibverbs._ibv_query_gid_ex;
  if (!fn) throw new InvalidArgumentError("this libibverbs has no ibv_query_gid_ex");
  const block = new NativeBlock(size, 8);
  try {
    const rc = fn(ctx.ptr, port, index, block.ptr, 0, size);
    if (rc !== 0) throwReturned("ibv_query_gid_ex", rc, `port ${port} index ${index}`);
    return gidEntry(block.view, 0);
  } finally {
    block.free();
  }
}

/** `ibv_query_gid_table`: every valid GID of every port. */
export function gidTable(ctx: Context, maxEntries = 256): GidEntry[] {
  ctx.assertOpen();
  const n = native();
  const size = layouts().ibv_gid_entry.size;
  const fn = n.ibverbs._ibv_query_gid_table;
  if (!fn) throw new InvalidArgumentError("this libibverbs has no ibv_query_gid_table");
  const block = new NativeBlock(size * maxEntries, 8);
  try {
    const count = Number(fn(ctx.ptr, block.ptr, maxEntries, 0, size));
    if (count < 0) throwReturned("ibv_query_gid_table", count);
    const out: GidEntry[] = [];
    for (let i = 0; i < count; i++) out.push(gidEntry(block.view, i * size));
    return out;
  } finally {
    block.free();
  }
}

/** `ibv_query_pkey`: the P_Key at `index`, in host order. */
export function queryPkey(ctx: Context, port: number, index: number): number {
  ctx.assertOpen();
  checkPort(port);
  checkInteger("P_Key index", index, 0, 0xffff);
  const block = new NativeBlock(2, 8);
  try {
    if (native().ibverbs.ibv_query_pkey(ctx.ptr, port, index, block.ptr) !== 0) {
      throwErrno("ibv_query_pkey", `port ${port} index ${index}`);
    }
    return block.view.getUint16(0, false);
  } finally {
    block.free();
  }
}
