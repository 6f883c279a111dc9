/**
 * Every enum and flag set of libibverbs and librdmacm that the public API exposes,
 * with their C names and the texts of the C string functions.
 *
 * Each enum is a frozen object from the C name without its prefix to the value
 * (`WcStatus.SUCCESS` is `IBV_WC_SUCCESS`), with a type of the same name for its
 * values. {@link enumName} and {@link flagNames} give back the full C names;
 * {@link ENUM_TABLES} lists every table with its C prefix.
 *
 * @example
 * ```ts
 * import { enumName, flagNames, SendFlags, WcStatus, wcStatusStr } from "./enums.ts";
 * enumName(WcStatus, 5, "IBV_WC_"); // "IBV_WC_WR_FLUSH_ERR"
 * wcStatusStr(5); // "Work Request Flushed Error"
 * flagNames(SendFlags, 0x102, "IBV_SEND_"); // ["IBV_SEND_SIGNALED", "0x100"]
 * ```
 *
 * @module
 */

import * as verbs from "./enums/verbs.ts";
import { InvalidArgumentError } from "./errors.ts";
import * as cm from "./enums/cm.ts";
import { describe } from "./check.ts";

export * from "./enums/verbs.ts";
export * from "./enums/verbs-str.ts";
export * from "./enums/cm.ts";

/** An enum or flag table: C names without their prefix -> values. */
export type EnumTable = Readonly<Record<string, number | bigint>>;

/**
 * The full C name of `value` in `table` (`cPrefix` + key; the first key if several
 * share the value), or `"<unknown N>"`.
 */
export function enumName(table: EnumTable, value: number | bigint, cPrefix: string): string {
  for (const [k, v] of Object.entries(table)) {
    if (toBig(v) === toBig(value)) return cPrefix + k;
  }
  return `<unknown ${value}>`;
}

/**
 * The full C names of a table of small non-negative values, indexed by value (the first key
 * of a value wins, as in {@link enumName}): a lookup table built in one pass.
 */
export function enumNamesByValue(
  table: Readonly<Record<string, number>>,
  cPrefix: string,
): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(table)) out[v] ??= cPrefix + k;
  return out;
}

/**
 * {@link enumNamesByValue} built on the first call: `name(value)` is the full C name, or undefined
 * for a value not in the table. A module keeps one at its top level, so importing it builds
 * nothing (a program that never names a value never pays for the table).
 */
export function lazyEnumNames(
  table: Readonly<Record<string, number>>,
  cPrefix: string,
): (value: number) => string | undefined {
  let names: string[] | undefined;
  return (value) => (names ??= enumNamesByValue(table, cPrefix))[value];
}

function toBig(v: number | bigint): bigint {
  if (typeof v === "bigint") return v;
  if (!Number.isInteger(v)) return -1n;
  // A negative 32-bit int is a mask with bit 31 set.
  return v < 0 && v >= -0x80000000 ? BigInt(v >>> 0) : BigInt(v);
}

/**
 * The full C names of the flags set in `mask`, in table order, followed by the
 * bits no single-bit entry names, as one lowercase hex string ("0x100"). Entries
 * that are not a single bit (masks such as `IBV_ACCESS_OPTIONAL_RANGE`) are not
 * used; of two entries with the same bit the first one names it. A negative
 * number is read as a 32-bit mask.
 */
export function flagNames(table: EnumTable, mask: number | bigint, cPrefix: string): string[] {
  let rest = toBig(mask);
  if (rest < 0n) throw new InvalidArgumentError(`flagNames: not a mask: ${describe(mask)}`);
  const out: string[] = [];
  for (const [k, v] of Object.entries(table)) {
    const bit = BigInt(v);
    if (bit <= 0n || (bit & (bit - 1n)) !== 0n) continue;
    if ((rest & bit) !== 0n) {
      out.push(cPrefix + k);
      rest &= ~bit;
    }
  }
  if (rest !== 0n) out.push(`0x${rest.toString(16)}`);
  return out;
}

/** One entry of {@link ENUM_TABLES}. */
export interface EnumTableInfo {
  /** The exported name of the table (`"WcStatus"`). */
  readonly name: string;
  /** What it is in C (`"enum ibv_wc_status"`, or the macros it gathers). */
  readonly c: string;
  /** The prefix that makes a key a C name (`"IBV_WC_"`). */
  readonly prefix: string;
  /** The table itself. */
  readonly table: EnumTable;
  /**
   * Where the C names are declared: `"verbs"` (`<infiniband/verbs.h>`), `"cm"`
   * (`<rdma/rdma_cma.h>`), or `"kernel"` for values libibverbs passes through from
   * the kernel without naming them (port width, speed, physical state, sysfs GID type).
   */
  readonly header: "verbs" | "cm" | "kernel";
}

function info(
  name: string,
  c: string,
  prefix: string,
  table: EnumTable,
  header: EnumTableInfo["header"],
): EnumTableInfo {
  return Object.freeze({ name, c, prefix, table, header });
}

/** Every enum table of this module with its C prefix and origin. */
export const ENUM_TABLES: readonly EnumTableInfo[] = Object.freeze([
  info("WcStatus", "enum ibv_wc_status", "IBV_WC_", verbs.WcStatus, "verbs"),
  info("WcOpcode", "enum ibv_wc_opcode", "IBV_WC_", verbs.WcOpcode, "verbs"),
  info("WcFlags", "enum ibv_wc_flags", "IBV_WC_", verbs.WcFlags, "verbs"),
  info(
    "CreateCqWcFlags",
    "enum ibv_create_cq_wc_flags",
    "IBV_WC_EX_",
    verbs.CreateCqWcFlags,
    "verbs",
  ),
  info(
    "CqInitAttrMask",
    "enum ibv_cq_init_attr_mask",
    "IBV_CQ_INIT_ATTR_MASK_",
    verbs.CqInitAttrMask,
    "verbs",
  ),
  info(
    "CreateCqAttrFlags",
    "enum ibv_create_cq_attr_flags",
    "IBV_CREATE_CQ_ATTR_",
    verbs.CreateCqAttrFlags,
    "verbs",
  ),
  info("CqAttrMask", "enum ibv_cq_attr_mask", "IBV_CQ_ATTR_", verbs.CqAttrMask, "verbs"),
  info("WrOpcode", "enum ibv_wr_opcode", "IBV_WR_", verbs.WrOpcode, "verbs"),
  info("SendFlags", "enum ibv_send_flags", "IBV_SEND_", verbs.SendFlags, "verbs"),
  info("AccessFlags", "enum ibv_access_flags", "IBV_ACCESS_", verbs.AccessFlags, "verbs"),
  info("QpType", "enum ibv_qp_type", "IBV_QPT_", verbs.QpType, "verbs"),
  info("QpState", "enum ibv_qp_state", "IBV_QPS_", verbs.QpState, "verbs"),
  info("QpAttrMask", "enum ibv_qp_attr_mask", "IBV_QP_", verbs.QpAttrMask, "verbs"),
  info(
    "QpInitAttrMask",
    "enum ibv_qp_init_attr_mask",
    "IBV_QP_INIT_ATTR_",
    verbs.QpInitAttrMask,
    "verbs",
  ),
  info("QpCreateFlags", "enum ibv_qp_create_flags", "IBV_QP_CREATE_", verbs.QpCreateFlags, "verbs"),
  info(
    "QpCreateSendOpsFlags",
    "enum ibv_qp_create_send_ops_flags",
    "IBV_QP_EX_",
    verbs.QpCreateSendOpsFlags,
    "verbs",
  ),
  info(
    "QpOpenAttrMask",
    "enum ibv_qp_open_attr_mask",
    "IBV_QP_OPEN_ATTR_",
    verbs.QpOpenAttrMask,
    "verbs",
  ),
  info("MigState", "enum ibv_mig_state", "IBV_MIG_", verbs.MigState, "verbs"),
  info("Mtu", "enum ibv_mtu", "IBV_", verbs.Mtu, "verbs"),
  info("PortState", "enum ibv_port_state", "IBV_PORT_", verbs.PortState, "verbs"),
  info("LinkLayer", "IBV_LINK_LAYER_*", "IBV_LINK_LAYER_", verbs.LinkLayer, "verbs"),
  info("PortCapFlags", "enum ibv_port_cap_flags", "IBV_PORT_", verbs.PortCapFlags, "verbs"),
  info("PortCapFlags2", "enum ibv_port_cap_flags2", "IBV_PORT_", verbs.PortCapFlags2, "verbs"),
  info("PortWidth", "IB_WIDTH_* (kernel)", "IB_", verbs.PortWidth, "kernel"),
  info("PortSpeed", "IB_SPEED_* (kernel)", "IB_SPEED_", verbs.PortSpeed, "kernel"),
  info(
    "PortPhysState",
    "IB_PORT_PHYS_STATE_* (kernel)",
    "IB_PORT_PHYS_STATE_",
    verbs.PortPhysState,
    "kernel",
  ),
  info("NodeType", "enum ibv_node_type", "IBV_NODE_", verbs.NodeType, "verbs"),
  info("TransportType", "enum ibv_transport_type", "IBV_TRANSPORT_", verbs.TransportType, "verbs"),
  info("AtomicCap", "enum ibv_atomic_cap", "IBV_ATOMIC_", verbs.AtomicCap, "verbs"),
  info("DeviceCapFlags", "enum ibv_device_cap_flags", "IBV_DEVICE_", verbs.DeviceCapFlags, "verbs"),
  info(
    "DeviceCapFlagsEx",
    "IBV_DEVICE_* (64-bit macros)",
    "IBV_DEVICE_",
    verbs.DeviceCapFlagsEx,
    "verbs",
  ),
  info("OdpGeneralCaps", "enum ibv_odp_general_caps", "IBV_ODP_", verbs.OdpGeneralCaps, "verbs"),
  info(
    "OdpTransportCap",
    "enum ibv_odp_transport_cap_bits",
    "IBV_ODP_SUPPORT_",
    verbs.OdpTransportCap,
    "verbs",
  ),
  info("EventType", "enum ibv_event_type", "IBV_EVENT_", verbs.EventType, "verbs"),
  info("SrqAttrMask", "enum ibv_srq_attr_mask", "IBV_SRQ_", verbs.SrqAttrMask, "verbs"),
  info("SrqType", "enum ibv_srq_type", "IBV_SRQT_", verbs.SrqType, "verbs"),
  info(
    "SrqInitAttrMask",
    "enum ibv_srq_init_attr_mask",
    "IBV_SRQ_INIT_ATTR_",
    verbs.SrqInitAttrMask,
    "verbs",
  ),
  info("ReregMrFlags", "enum ibv_rereg_mr_flags", "IBV_REREG_MR_", verbs.ReregMrFlags, "verbs"),
  info(
    "ReregMrErrCode",
    "enum ibv_rereg_mr_err_code",
    "IBV_REREG_MR_ERR_",
    verbs.ReregMrErrCode,
    "verbs",
  ),
  info("MwType", "enum ibv_mw_type", "IBV_MW_", verbs.MwType, "verbs"),
  info("GidType", "enum ibv_gid_type", "IBV_GID_TYPE_", verbs.GidType, "verbs"),
  info(
    "GidTypeSysfs",
    "enum ibv_gid_type_sysfs (internal)",
    "IBV_GID_TYPE_SYSFS_",
    verbs.GidTypeSysfs,
    "kernel",
  ),
  info("Rate", "enum ibv_rate", "IBV_", verbs.Rate, "verbs"),
  info("ForkStatus", "enum ibv_fork_status", "IBV_FORK_", verbs.ForkStatus, "verbs"),
  info("WqType", "enum ibv_wq_type", "IBV_WQT_", verbs.WqType, "verbs"),
  info("WqState", "enum ibv_wq_state", "IBV_WQS_", verbs.WqState, "verbs"),
  info("WqAttrMask", "enum ibv_wq_attr_mask", "IBV_WQ_ATTR_", verbs.WqAttrMask, "verbs"),
  info("WqFlags", "enum ibv_wq_flags", "IBV_WQ_FLAGS_", verbs.WqFlags, "verbs"),
  info("CmEventType", "enum rdma_cm_event_type", "RDMA_CM_EVENT_", cm.CmEventType, "cm"),
  info("PortSpace", "enum rdma_port_space", "RDMA_PS_", cm.PortSpace, "cm"),
  info("IbServiceId", "RDMA_IB_IP_* / RDMA_IB_PS_IB macros", "RDMA_", cm.IbServiceId, "cm"),
  info("ConnParamMax", "RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH", "RDMA_", cm.ConnParamMax, "cm"),
  info("RaiFlags", "RAI_* macros", "RAI_", cm.RaiFlags, "cm"),
  info("OptionLevel", "RDMA_OPTION_ID / RDMA_OPTION_IB", "RDMA_OPTION_", cm.OptionLevel, "cm"),
  info("OptionId", "RDMA_OPTION_ID_*", "RDMA_OPTION_ID_", cm.OptionId, "cm"),
  info("OptionIb", "RDMA_OPTION_IB_*", "RDMA_OPTION_IB_", cm.OptionIb, "cm"),
  info(
    "JoinMcAttrMask",
    "enum rdma_cm_join_mc_attr_mask",
    "RDMA_CM_JOIN_MC_ATTR_",
    cm.JoinMcAttrMask,
    "cm",
  ),
  info("McJoinFlag", "enum rdma_cm_mc_join_flags", "RDMA_MC_JOIN_FLAG_", cm.McJoinFlag, "cm"),
]);
