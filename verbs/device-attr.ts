/**
 * Device attributes (`ibv_query_device`, `ibv_query_device_ex` and its nested capability
 * structs) as typed objects with readable enum names.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import {
  AtomicCap,
  DeviceCapFlags,
  DeviceCapFlagsEx,
  enumName,
  flagNames,
  OdpGeneralCaps,
  OdpTransportCap,
  QpType,
} from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { throwReturned } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { readScalars } from "./_structs.ts";
import type { Context } from "./context.ts";

/** `struct ibv_device_attr` with camelCase names (64-bit fields as bigint) plus names. */
export interface DeviceAttr {
  /** Firmware version text. */
  readonly fwVer: string;
  /** Node GUID as 16 hex digits. */
  readonly nodeGuidHex: string;
  /** `device_cap_flags` as C names. */
  readonly deviceCapFlagNames: readonly string[];
  /** `atomic_cap` as its C name. */
  readonly atomicCapName: string;
  /** Every other field of `ibv_device_attr` (`maxQp`, `maxQpWr`, `maxSge`, `maxCqe`, ...). */
  readonly [field: string]: number | bigint | string | readonly string[] | DeviceCaps;
}

/** `struct ibv_odp_caps`: on-demand paging support. */
export interface OdpCaps {
  /** `general_caps` (`IBV_ODP_SUPPORT*` bits). */
  readonly generalCaps: bigint;
  /** `general_caps` as C names (`IBV_ODP_SUPPORT`, `IBV_ODP_SUPPORT_IMPLICIT`). */
  readonly generalCapNames: readonly string[];
  /** `per_transport_caps`: the `IBV_ODP_SUPPORT_*` bits per transport. */
  readonly perTransportCaps: OdpPerTransportCaps;
}

/** `ibv_odp_caps.per_transport_caps`. */
export interface OdpPerTransportCaps {
  /** RC `enum ibv_odp_transport_cap_bits`. */
  readonly rcOdpCaps: number;
  /** UC `enum ibv_odp_transport_cap_bits`. */
  readonly ucOdpCaps: number;
  /** UD `enum ibv_odp_transport_cap_bits`. */
  readonly udOdpCaps: number;
  /** `rc_odp_caps` as C names (`IBV_ODP_SUPPORT_SEND`, ...). */
  readonly rcOdpCapNames: readonly string[];
  /** `uc_odp_caps` as C names. */
  readonly ucOdpCapNames: readonly string[];
  /** `ud_odp_caps` as C names. */
  readonly udOdpCapNames: readonly string[];
}

/** A `supported_qpts` mask (bit `1 << IBV_QPT_*`) with its names. */
export interface SupportedQpts {
  /** The mask: bit `1 << qp_type` per supported QP type. */
  readonly supportedQpts: number;
  /** The supported QP types as C names (`IBV_QPT_UD`, `IBV_QPT_RAW_PACKET`). */
  readonly supportedQptNames: readonly string[];
}

/** `struct ibv_tso_caps`: TCP segmentation offload. */
export interface TsoCaps extends SupportedQpts {
  /** Largest TSO payload in bytes (0: no TSO). */
  readonly maxTso: number;
}

/** `struct ibv_rss_caps`: receive-side scaling. */
export interface RssCaps extends SupportedQpts {
  /** Maximum number of receive WQ indirection tables. */
  readonly maxRwqIndirectionTables: number;
  /** Maximum size of one indirection table. */
  readonly maxRwqIndirectionTableSize: number;
  /** `IBV_RX_HASH_*` fields the hash can cover. */
  readonly rxHashFieldsMask: bigint;
  /** `rx_hash_fields_mask` as C names (`IBV_RX_HASH_SRC_IPV4`, ...). */
  readonly rxHashFieldsMaskNames: readonly string[];
  /** `IBV_RX_HASH_FUNC_*` bits. */
  readonly rxHashFunction: number;
  /** `rx_hash_function` as C names (`IBV_RX_HASH_FUNC_TOEPLITZ`). */
  readonly rxHashFunctionNames: readonly string[];
}

/** `struct ibv_packet_pacing_caps`: per-QP rate limiting. */
export interface PacketPacingCaps extends SupportedQpts {
  /** Lowest rate limit in kbps. */
  readonly qpRateLimitMin: number;
  /** Highest rate limit in kbps (0: no packet pacing). */
  readonly qpRateLimitMax: number;
}

/** `struct ibv_tm_caps`: tag matching. */
export interface TmCaps {
  /** Largest rendezvous header. */
  readonly maxRndvHdrSize: number;
  /** Number of tags (0: no tag matching). */
  readonly maxNumTags: number;
  /** `enum ibv_tm_cap_flags` bits. */
  readonly flags: number;
  /** `flags` as C names (`IBV_TM_CAP_RC`). */
  readonly flagNames: readonly string[];
  /** Outstanding tag list operations. */
  readonly maxOps: number;
  /** SGEs in a tagged buffer. */
  readonly maxSge: number;
}

/** `struct ibv_cq_moderation_caps`. */
export interface CqModerationCaps {
  /** Largest completion count before an event. */
  readonly maxCqCount: number;
  /** Longest moderation period in microseconds. */
  readonly maxCqPeriod: number;
}

/** `struct ibv_pci_atomic_caps`: `IBV_PCI_ATOMIC_OPERATION_*_BYTE_SIZE_SUP` per operation. */
export interface PciAtomicCaps {
  /** Operand sizes of fetch-and-add. */
  readonly fetchAdd: number;
  /** Operand sizes of swap. */
  readonly swap: number;
  /** Operand sizes of compare-and-swap. */
  readonly compareSwap: number;
  /** `fetch_add` as C names. */
  readonly fetchAddNames: readonly string[];
  /** `swap` as C names. */
  readonly swapNames: readonly string[];
  /** `compare_swap` as C names. */
  readonly compareSwapNames: readonly string[];
}

/** Any nested capability struct of {@link DeviceAttrEx}. */
export type DeviceCaps =
  | OdpCaps
  | TsoCaps
  | RssCaps
  | PacketPacingCaps
  | TmCaps
  | CqModerationCaps
  | PciAtomicCaps;

/** `struct ibv_device_attr_ex`: the base attributes plus every extended field. */
export interface DeviceAttrEx extends DeviceAttr {
  /** `device_cap_flags_ex` (the base flags in the low 32 bits). */
  readonly deviceCapFlagsEx: bigint;
  /** `device_cap_flags_ex` as C names. */
  readonly deviceCapFlagsExNames: readonly string[];
  /** On-demand paging. */
  readonly odpCaps: OdpCaps;
  /** `xrc_odp_caps`: the `IBV_ODP_SUPPORT_*` bits of XRC. */
  readonly xrcOdpCaps: number;
  /** `xrc_odp_caps` as C names. */
  readonly xrcOdpCapNames: readonly string[];
  /** `completion_timestamp_mask` (0: no completion timestamps). */
  readonly completionTimestampMask: bigint;
  /** `hca_core_clock` in kHz (0: not reported). */
  readonly hcaCoreClock: bigint;
  /** TCP segmentation offload. */
  readonly tsoCaps: TsoCaps;
  /** Receive-side scaling. */
  readonly rssCaps: RssCaps;
  /** `max_wq_type_rq`: receive work queues. */
  readonly maxWqTypeRq: number;
  /** Packet pacing. */
  readonly packetPacingCaps: PacketPacingCaps;
  /** `raw_packet_caps` (`IBV_RAW_PACKET_CAP_*` bits). */
  readonly rawPacketCaps: number;
  /** `raw_packet_caps` as C names. */
  readonly rawPacketCapNames: readonly string[];
  /** Tag matching. */
  readonly tmCaps: TmCaps;
  /** CQ moderation. */
  readonly cqModCaps: CqModerationCaps;
  /** `max_dm_size`: device memory in bytes. */
  readonly maxDmSize: bigint;
  /** PCI atomics. */
  readonly pciAtomicCaps: PciAtomicCaps;
  /** `phys_port_cnt_ex`. */
  readonly physPortCntEx: number;
}

/** `enum ibv_rx_hash_function_flags`. */
const RX_HASH_FUNCTION = { TOEPLITZ: 0x1 } as const;
/** `enum ibv_rx_hash_fields`. */
const RX_HASH_FIELDS = {
  SRC_IPV4: 0x1,
  DST_IPV4: 0x2,
  SRC_IPV6: 0x4,
  DST_IPV6: 0x8,
  SRC_PORT_TCP: 0x10,
  DST_PORT_TCP: 0x20,
  SRC_PORT_UDP: 0x40,
  DST_PORT_UDP: 0x80,
  IPSEC_SPI: 0x100,
  INNER: 0x80000000,
} as const;
/** `enum ibv_raw_packet_caps`. */
const RAW_PACKET_CAP = {
  CVLAN_STRIPPING: 0x1,
  SCATTER_FCS: 0x2,
  IP_CSUM: 0x4,
  DELAY_DROP: 0x8,
} as const;
/** `enum ibv_tm_cap_flags`. */
const TM_CAP = { RC: 0x1 } as const;
/** `enum ibv_pci_atomic_op_size`. */
const PCI_ATOMIC_OP_SIZE = {
  "4_BYTE_SIZE_SUP": 0x1,
  "8_BYTE_SIZE_SUP": 0x2,
  "16_BYTE_SIZE_SUP": 0x4,
} as const;

/** `supported_qpts` bits: `1 << IBV_QPT_*` (the driver-private type has no bit). */
const QPT_BITS: Record<string, number> = Object.fromEntries(
  Object.entries(QpType).filter(([, v]) => v < 32).map(([k, v]) => [k, 2 ** v]),
);

function qpts(mask: number): SupportedQpts {
  return { supportedQpts: mask, supportedQptNames: flagNames(QPT_BITS, mask, "IBV_QPT_") };
}

/** The nested capability structs of `ibv_device_attr_ex`, as typed objects. */
function nestedCaps(view: DataView) {
  const L = layouts().ibv_device_attr_ex;
  const read = (prefix: string) => readScalars(view, L, prefix) as Record<string, number>;
  const big = (prefix: string) => readScalars(view, L, prefix) as Record<string, bigint>;
  const odp = big("odp_caps.");
  const per = read("odp_caps.per_transport_caps.");
  const transport = (v: number) => flagNames(OdpTransportCap, v, "IBV_ODP_SUPPORT_");
  const tso = read("tso_caps.");
  const rss = readScalars(view, L, "rss_caps.") as Record<string, number> & {
    rxHashFieldsMask: bigint;
  };
  const pacing = read("packet_pacing_caps.");
  const tm = read("tm_caps.");
  const cq = read("cq_mod_caps.");
  const pci = read("pci_atomic_caps.");
  const pciNames = (v: number) => flagNames(PCI_ATOMIC_OP_SIZE, v, "IBV_PCI_ATOMIC_OPERATION_");
  const odpCaps: OdpCaps = {
    generalCaps: odp.generalCaps,
    generalCapNames: flagNames(OdpGeneralCaps, odp.generalCaps, "IBV_ODP_"),
    perTransportCaps: {
      rcOdpCaps: per.rcOdpCaps,
      ucOdpCaps: per.ucOdpCaps,
      udOdpCaps: per.udOdpCaps,
      rcOdpCapNames: transport(per.rcOdpCaps),
      ucOdpCapNames: transport(per.ucOdpCaps),
      udOdpCapNames: transport(per.udOdpCaps),
    },
  };
  const tsoCaps: TsoCaps = { maxTso: tso.maxTso, ...qpts(tso.supportedQpts) };
  const rssCaps: RssCaps = {
    maxRwqIndirectionTables: rss.maxRwqIndirectionTables,
    maxRwqIndirectionTableSize: rss.maxRwqIndirectionTableSize,
    rxHashFieldsMask: rss.rxHashFieldsMask,
    rxHashFieldsMaskNames: flagNames(RX_HASH_FIELDS, rss.rxHashFieldsMask, "IBV_RX_HASH_"),
    rxHashFunction: rss.rxHashFunction,
    rxHashFunctionNames: flagNames(RX_HASH_FUNCTION, rss.rxHashFunction, "IBV_RX_HASH_FUNC_"),
    ...qpts(rss.supportedQpts),
  };
  const packetPacingCaps: PacketPacingCaps = {
    qpRateLimitMin: pacing.qpRateLimitMin,
    qpRateLimitMax: pacing.qpRateLimitMax,
    ...qpts(pacing.supportedQpts),
  };
  const tmCaps: TmCaps = {
    maxRndvHdrSize: tm.maxRndvHdrSize,
    maxNumTags: tm.maxNumTags,
    flags: tm.flags,
    flagNames: flagNames(TM_CAP, tm.flags, "IBV_TM_CAP_"),
    maxOps: tm.maxOps,
    maxSge: tm.maxSge,
  };
  const cqModCaps: CqModerationCaps = { maxCqCount: cq.maxCqCount, maxCqPeriod: cq.maxCqPeriod };
  const pciAtomicCaps: PciAtomicCaps = {
    fetchAdd: pci.fetchAdd,
    swap: pci.swap,
    compareSwap: pci.compareSwap,
    fetchAddNames: pciNames(pci.fetchAdd),
    swapNames: pciNames(pci.swap),
    compareSwapNames: pciNames(pci.compareSwap),
  };
  return { odpCaps, tsoCaps, rssCaps, packetPacingCaps, tmCaps, cqModCaps, pciAtomicCaps };
}

function hex64(v: bigint): string {
  const b = new DataView(new ArrayBuffer(8));
  b.setBigUint64(0, v, true); // __be64 as stored: print its bytes in order
  return b.getBigUint64(0, false).toString(16).padStart(16, "0");
}

function deviceAttrFrom(view: DataView, prefix: string): DeviceAttr {
  const L = layouts();
  const layout = prefix ? L.ibv_device_attr_ex : L.ibv_device_attr;
  const o = readScalars(view, layout, prefix, 0, ["fw_ver"]);
  return {
    ...o,
    fwVer: o.fwVer as string,
    nodeGuidHex: hex64(o.nodeGuid as bigint),
    deviceCapFlagNames: flagNames(DeviceCapFlags, o.deviceCapFlags as number, "IBV_DEVICE_"),
    atomicCapName: enumName(AtomicCap, o.atomicCap as number, "IBV_ATOMIC_"),
  };
}

/** `ibv_query_device`. */
export function queryDevice(ctx: Context): DeviceAttr {
  ctx.assertOpen();
  const block = new NativeBlock(layouts().ibv_device_attr.size, 8);
  try {
    const rc = native().ibverbs.ibv_query_device(ctx.ptr, block.ptr);
    if (rc !== 0) throwReturned("ibv_query_device", rc);
    return deviceAttrFrom(block.view, "");
  } finally {
    block.free();
  }
}

/** `ibv_query_device_ex` through `verbs_context`, falling back to the base query like `verbs.h`. */
export function queryDeviceEx(ctx: Context): DeviceAttrEx {
  const n = native();
  const L = layouts();
  const fn = ctx.extendedOp("query_device_ex");
  const block = new NativeBlock(L.ibv_device_attr_ex.size, 8);
  const input = new NativeBlock(L.ibv_query_device_ex_input.size, 8);
  try {
    let rc: number = Errno.EOPNOTSUPP;
    if (fn) {
      rc = n.fnPointer(fn, IBVERBS_OPS.query_device_ex)(
        ctx.ptr,
        input.ptr,
        block.ptr,
        L.ibv_device_attr_ex.size,
      );
    }
    if (rc === Errno.EOPNOTSUPP) {
      block.clear();
      rc = n.ibverbs.ibv_query_device(ctx.ptr, block.ptr);
    }
    if (rc !== 0) throwReturned("ibv_query_device_ex", rc);
    const base = deviceAttrFrom(block.view, "orig_attr.");
    const ex = readScalars(block.view, L.ibv_device_attr_ex);
    return {
      ...ex,
      ...base,
      ...nestedCaps(block.view),
      deviceCapFlagsEx: ex.deviceCapFlagsEx as bigint,
      deviceCapFlagsExNames: flagNames(
        { ...DeviceCapFlags, ...DeviceCapFlagsEx },
        ex.deviceCapFlagsEx as bigint,
        "IBV_DEVICE_",
      ),
      xrcOdpCaps: ex.xrcOdpCaps as number,
      xrcOdpCapNames: flagNames(OdpTransportCap, ex.xrcOdpCaps as number, "IBV_ODP_SUPPORT_"),
      completionTimestampMask: ex.completionTimestampMask as bigint,
      hcaCoreClock: ex.hcaCoreClock as bigint,
      maxWqTypeRq: ex.maxWqTypeRq as number,
      rawPacketCaps: ex.rawPacketCaps as number,
      rawPacketCapNames: flagNames(
        RAW_PACKET_CAP,
        ex.rawPacketCaps as number,
        "IBV_RAW_PACKET_CAP_",
      ),
      maxDmSize: ex.maxDmSize as bigint,
      physPortCntEx: ex.physPortCntEx as number,
    };
  } finally {
    block.free();
    input.free();
  }
}
