/**
 * The enums and flag sets of libibverbs (`<infiniband/verbs.h>`), each as a frozen
 * name->value object whose keys are the C names without their prefix (the string functions of
 * libibverbs are in `verbs-str.ts`).
 *
 * The values are those of rdma-core 44; `tests/enums.test.ts` compares every one
 * with the installed headers.
 *
 * @module
 */

/** `enum ibv_wc_status`: the status of a work completion. */
export const WcStatus = {
  SUCCESS: 0,
  LOC_LEN_ERR: 1,
  LOC_QP_OP_ERR: 2,
  LOC_EEC_OP_ERR: 3,
  LOC_PROT_ERR: 4,
  WR_FLUSH_ERR: 5,
  MW_BIND_ERR: 6,
  BAD_RESP_ERR: 7,
  LOC_ACCESS_ERR: 8,
  REM_INV_REQ_ERR: 9,
  REM_ACCESS_ERR: 10,
  REM_OP_ERR: 11,
  RETRY_EXC_ERR: 12,
  RNR_RETRY_EXC_ERR: 13,
  LOC_RDD_VIOL_ERR: 14,
  REM_INV_RD_REQ_ERR: 15,
  REM_ABORT_ERR: 16,
  INV_EECN_ERR: 17,
  INV_EEC_STATE_ERR: 18,
  FATAL_ERR: 19,
  RESP_TIMEOUT_ERR: 20,
  GENERAL_ERR: 21,
  TM_ERR: 22,
  TM_RNDV_INCOMPLETE: 23,
} as const;
Object.freeze(WcStatus);
/** A value of {@link WcStatus}. */
export type WcStatus = typeof WcStatus[keyof typeof WcStatus];

/** `enum ibv_wc_opcode`: the operation a work completion reports; receives have bit 7 set. */
export const WcOpcode = {
  SEND: 0,
  RDMA_WRITE: 1,
  RDMA_READ: 2,
  COMP_SWAP: 3,
  FETCH_ADD: 4,
  BIND_MW: 5,
  LOCAL_INV: 6,
  TSO: 7,
  ATOMIC_WRITE: 9,
  RECV: 128,
  RECV_RDMA_WITH_IMM: 129,
  TM_ADD: 130,
  TM_DEL: 131,
  TM_SYNC: 132,
  TM_RECV: 133,
  TM_NO_TAG: 134,
  DRIVER1: 135,
  DRIVER2: 136,
  DRIVER3: 137,
} as const;
Object.freeze(WcOpcode);
/** A value of {@link WcOpcode}. */
export type WcOpcode = typeof WcOpcode[keyof typeof WcOpcode];

/** `enum ibv_wc_flags`: the `wc_flags` bits of a work completion. */
export const WcFlags = {
  GRH: 0x1,
  WITH_IMM: 0x2,
  IP_CSUM_OK: 0x4,
  WITH_INV: 0x8,
  TM_SYNC_REQ: 0x10,
  TM_MATCH: 0x20,
  TM_DATA_VALID: 0x40,
} as const;
Object.freeze(WcFlags);
/** A bit of {@link WcFlags}. */
export type WcFlags = typeof WcFlags[keyof typeof WcFlags];

/** `enum ibv_create_cq_wc_flags`: the fields an extended CQ (`ibv_create_cq_ex`) reports. */
export const CreateCqWcFlags = {
  WITH_BYTE_LEN: 0x1,
  WITH_IMM: 0x2,
  WITH_QP_NUM: 0x4,
  WITH_SRC_QP: 0x8,
  WITH_SLID: 0x10,
  WITH_SL: 0x20,
  WITH_DLID_PATH_BITS: 0x40,
  WITH_COMPLETION_TIMESTAMP: 0x80,
  WITH_CVLAN: 0x100,
  WITH_FLOW_TAG: 0x200,
  WITH_TM_INFO: 0x400,
  WITH_COMPLETION_TIMESTAMP_WALLCLOCK: 0x800,
} as const;
Object.freeze(CreateCqWcFlags);
/** A bit of {@link CreateCqWcFlags}. */
export type CreateCqWcFlags = typeof CreateCqWcFlags[keyof typeof CreateCqWcFlags];

/** `enum ibv_cq_init_attr_mask`: the valid fields of `ibv_cq_init_attr_ex.comp_mask`. */
export const CqInitAttrMask = { FLAGS: 0x1, PD: 0x2 } as const;
Object.freeze(CqInitAttrMask);
/** A bit of {@link CqInitAttrMask}. */
export type CqInitAttrMask = typeof CqInitAttrMask[keyof typeof CqInitAttrMask];

/** `enum ibv_create_cq_attr_flags`: the `flags` of `ibv_cq_init_attr_ex`. */
export const CreateCqAttrFlags = { SINGLE_THREADED: 0x1, IGNORE_OVERRUN: 0x2 } as const;
Object.freeze(CreateCqAttrFlags);
/** A bit of {@link CreateCqAttrFlags}. */
export type CreateCqAttrFlags = typeof CreateCqAttrFlags[keyof typeof CreateCqAttrFlags];

/** `enum ibv_cq_attr_mask`: the fields `ibv_modify_cq` changes. */
export const CqAttrMask = { MODERATE: 0x1, RESERVED: 0x2 } as const;
Object.freeze(CqAttrMask);
/** A bit of {@link CqAttrMask}. */
export type CqAttrMask = typeof CqAttrMask[keyof typeof CqAttrMask];

/** `enum ibv_wr_opcode`: the operation of a send work request. */
export const WrOpcode = {
  RDMA_WRITE: 0,
  RDMA_WRITE_WITH_IMM: 1,
  SEND: 2,
  SEND_WITH_IMM: 3,
  RDMA_READ: 4,
  ATOMIC_CMP_AND_SWP: 5,
  ATOMIC_FETCH_AND_ADD: 6,
  LOCAL_INV: 7,
  BIND_MW: 8,
  SEND_WITH_INV: 9,
  TSO: 10,
  DRIVER1: 11,
  ATOMIC_WRITE: 15,
} as const;
Object.freeze(WrOpcode);
/** A value of {@link WrOpcode}. */
export type WrOpcode = typeof WrOpcode[keyof typeof WrOpcode];

/** `enum ibv_send_flags`: the `send_flags` of a send work request. */
export const SendFlags = {
  FENCE: 0x1,
  SIGNALED: 0x2,
  SOLICITED: 0x4,
  INLINE: 0x8,
  IP_CSUM: 0x10,
} as const;
Object.freeze(SendFlags);
/** A bit of {@link SendFlags}. */
export type SendFlags = typeof SendFlags[keyof typeof SendFlags];

/**
 * `enum ibv_access_flags`: the access rights of a memory region, memory window or
 * QP. `OPTIONAL_RANGE` (`IBV_ACCESS_OPTIONAL_RANGE`) is the mask of the bits a
 * provider may ignore when it does not support them (`RELAXED_ORDERING` is one).
 */
export const AccessFlags = {
  LOCAL_WRITE: 1,
  REMOTE_WRITE: 0x2,
  REMOTE_READ: 0x4,
  REMOTE_ATOMIC: 0x8,
  MW_BIND: 0x10,
  ZERO_BASED: 0x20,
  ON_DEMAND: 0x40,
  HUGETLB: 0x80,
  RELAXED_ORDERING: 0x100000,
  OPTIONAL_RANGE: 0x3ff00000,
} as const;
Object.freeze(AccessFlags);
/** A bit (or the optional-range mask) of {@link AccessFlags}. */
export type AccessFlags = typeof AccessFlags[keyof typeof AccessFlags];

/** `enum ibv_qp_type`: the transport service of a queue pair. */
export const QpType = {
  RC: 2,
  UC: 3,
  UD: 4,
  RAW_PACKET: 8,
  XRC_SEND: 9,
  XRC_RECV: 10,
  DRIVER: 0xff,
} as const;
Object.freeze(QpType);
/** A value of {@link QpType}. */
export type QpType = typeof QpType[keyof typeof QpType];

/** `enum ibv_qp_state`: the state of a queue pair. */
export const QpState = {
  RESET: 0,
  INIT: 1,
  RTR: 2,
  RTS: 3,
  SQD: 4,
  SQE: 5,
  ERR: 6,
  UNKNOWN: 7,
} as const;
Object.freeze(QpState);
/** A value of {@link QpState}. */
export type QpState = typeof QpState[keyof typeof QpState];

/** `enum ibv_qp_attr_mask`: the fields of `ibv_qp_attr` that `ibv_modify_qp`/`ibv_query_qp` use. */
export const QpAttrMask = {
  STATE: 0x1,
  CUR_STATE: 0x2,
  EN_SQD_ASYNC_NOTIFY: 0x4,
  ACCESS_FLAGS: 0x8,
  PKEY_INDEX: 0x10,
  PORT: 0x20,
  QKEY: 0x40,
  AV: 0x80,
  PATH_MTU: 0x100,
  TIMEOUT: 0x200,
  RETRY_CNT: 0x400,
  RNR_RETRY: 0x800,
  RQ_PSN: 0x1000,
  MAX_QP_RD_ATOMIC: 0x2000,
  ALT_PATH: 0x4000,
  MIN_RNR_TIMER: 0x8000,
  SQ_PSN: 0x10000,
  MAX_DEST_RD_ATOMIC: 0x20000,
  PATH_MIG_STATE: 0x40000,
  CAP: 0x80000,
  DEST_QPN: 0x100000,
  RATE_LIMIT: 0x2000000,
} as const;
Object.freeze(QpAttrMask);
/** A bit of {@link QpAttrMask}. */
export type QpAttrMask = typeof QpAttrMask[keyof typeof QpAttrMask];

/** `enum ibv_qp_init_attr_mask`: the valid fields of `ibv_qp_init_attr_ex.comp_mask`. */
export const QpInitAttrMask = {
  PD: 0x1,
  XRCD: 0x2,
  CREATE_FLAGS: 0x4,
  MAX_TSO_HEADER: 0x8,
  IND_TABLE: 0x10,
  RX_HASH: 0x20,
  SEND_OPS_FLAGS: 0x40,
} as const;
Object.freeze(QpInitAttrMask);
/** A bit of {@link QpInitAttrMask}. */
export type QpInitAttrMask = typeof QpInitAttrMask[keyof typeof QpInitAttrMask];

/** `enum ibv_qp_create_flags`: the `create_flags` of `ibv_qp_init_attr_ex`. */
export const QpCreateFlags = {
  BLOCK_SELF_MCAST_LB: 0x2,
  SCATTER_FCS: 0x100,
  CVLAN_STRIPPING: 0x200,
  SOURCE_QPN: 0x400,
  PCI_WRITE_END_PADDING: 0x800,
} as const;
Object.freeze(QpCreateFlags);
/** A bit of {@link QpCreateFlags}. */
export type QpCreateFlags = typeof QpCreateFlags[keyof typeof QpCreateFlags];

/** `enum ibv_qp_create_send_ops_flags`: the `send_ops_flags` of `ibv_qp_init_attr_ex` (the `ibv_wr_*` API). */
export const QpCreateSendOpsFlags = {
  WITH_RDMA_WRITE: 0x1,
  WITH_RDMA_WRITE_WITH_IMM: 0x2,
  WITH_SEND: 0x4,
  WITH_SEND_WITH_IMM: 0x8,
  WITH_RDMA_READ: 0x10,
  WITH_ATOMIC_CMP_AND_SWP: 0x20,
  WITH_ATOMIC_FETCH_AND_ADD: 0x40,
  WITH_LOCAL_INV: 0x80,
  WITH_BIND_MW: 0x100,
  WITH_SEND_WITH_INV: 0x200,
  WITH_TSO: 0x400,
  WITH_ATOMIC_WRITE: 0x1000,
} as const;
Object.freeze(QpCreateSendOpsFlags);
/** A bit of {@link QpCreateSendOpsFlags}. */
export type QpCreateSendOpsFlags = typeof QpCreateSendOpsFlags[keyof typeof QpCreateSendOpsFlags];

/** `enum ibv_qp_open_attr_mask`: the valid fields of `ibv_qp_open_attr.comp_mask`. */
export const QpOpenAttrMask = {
  NUM: 0x1,
  XRCD: 0x2,
  CONTEXT: 0x4,
  TYPE: 0x8,
  RESERVED: 0x10,
} as const;
Object.freeze(QpOpenAttrMask);
/** A bit of {@link QpOpenAttrMask}. */
export type QpOpenAttrMask = typeof QpOpenAttrMask[keyof typeof QpOpenAttrMask];

/** `enum ibv_mig_state`: the path migration state of a queue pair. */
export const MigState = { MIGRATED: 0, REARM: 1, ARMED: 2 } as const;
Object.freeze(MigState);
/** A value of {@link MigState}. */
export type MigState = typeof MigState[keyof typeof MigState];

/** `enum ibv_mtu`: a path MTU (`IBV_MTU_256` ... `IBV_MTU_4096`). */
export const Mtu = { MTU_256: 1, MTU_512: 2, MTU_1024: 3, MTU_2048: 4, MTU_4096: 5 } as const;
Object.freeze(Mtu);
/** A value of {@link Mtu}. */
export type Mtu = typeof Mtu[keyof typeof Mtu];

/** The size in bytes of an {@link Mtu} value (256 ... 4096), or `undefined` if it is none. */
export function mtuToBytes(mtu: number): number | undefined {
  return Number.isInteger(mtu) && mtu >= 1 && mtu <= 5 ? 128 << mtu : undefined;
}

/** The {@link Mtu} value for exactly 256, 512, 1024, 2048 or 4096 bytes, or `undefined`. */
export function bytesToMtu(bytes: number): Mtu | undefined {
  for (const v of Object.values(Mtu)) if (128 << v === bytes) return v;
  return undefined;
}

/** An MTU as `ibv_devinfo` prints it: "4096", or "invalid MTU". */
export function mtuStr(mtu: number): string {
  const b = mtuToBytes(mtu);
  return b === undefined ? "invalid MTU" : String(b);
}

/** `enum ibv_port_state`: the logical state of a port. */
export const PortState = {
  NOP: 0,
  DOWN: 1,
  INIT: 2,
  ARMED: 3,
  ACTIVE: 4,
  ACTIVE_DEFER: 5,
} as const;
Object.freeze(PortState);
/** A value of {@link PortState}. */
export type PortState = typeof PortState[keyof typeof PortState];

/** `IBV_LINK_LAYER_*` (an anonymous enum): the `link_layer` of a port. */
export const LinkLayer = { UNSPECIFIED: 0, INFINIBAND: 1, ETHERNET: 2 } as const;
Object.freeze(LinkLayer);
/** A value of {@link LinkLayer}. */
export type LinkLayer = typeof LinkLayer[keyof typeof LinkLayer];

/** A link layer as `ibv_devinfo` prints it: "InfiniBand", "Ethernet" or "Unknown". */
export function linkLayerStr(linkLayer: number): string {
  switch (linkLayer) {
    case LinkLayer.UNSPECIFIED:
    case LinkLayer.INFINIBAND:
      return "InfiniBand";
    case LinkLayer.ETHERNET:
      return "Ethernet";
    default:
      return "Unknown";
  }
}

/** `enum ibv_port_cap_flags`: the `port_cap_flags` of a port. */
export const PortCapFlags = {
  SM: 0x2,
  NOTICE_SUP: 0x4,
  TRAP_SUP: 0x8,
  OPT_IPD_SUP: 0x10,
  AUTO_MIGR_SUP: 0x20,
  SL_MAP_SUP: 0x40,
  MKEY_NVRAM: 0x80,
  PKEY_NVRAM: 0x100,
  LED_INFO_SUP: 0x200,
  SYS_IMAGE_GUID_SUP: 0x800,
  PKEY_SW_EXT_PORT_TRAP_SUP: 0x1000,
  EXTENDED_SPEEDS_SUP: 0x4000,
  CAP_MASK2_SUP: 0x8000,
  CM_SUP: 0x10000,
  SNMP_TUNNEL_SUP: 0x20000,
  REINIT_SUP: 0x40000,
  DEVICE_MGMT_SUP: 0x80000,
  VENDOR_CLASS_SUP: 0x100000,
  DR_NOTICE_SUP: 0x200000,
  CAP_MASK_NOTICE_SUP: 0x400000,
  BOOT_MGMT_SUP: 0x800000,
  LINK_LATENCY_SUP: 0x1000000,
  CLIENT_REG_SUP: 0x2000000,
  IP_BASED_GIDS: 0x4000000,
} as const;
Object.freeze(PortCapFlags);
/** A bit of {@link PortCapFlags}. */
export type PortCapFlags = typeof PortCapFlags[keyof typeof PortCapFlags];

/** `enum ibv_port_cap_flags2`: the `port_cap_flags2` of a port. */
export const PortCapFlags2 = {
  SET_NODE_DESC_SUP: 0x1,
  INFO_EXT_SUP: 0x2,
  VIRT_SUP: 0x4,
  SWITCH_PORT_STATE_TABLE_SUP: 0x8,
  LINK_WIDTH_2X_SUP: 0x10,
  LINK_SPEED_HDR_SUP: 0x20,
  LINK_SPEED_NDR_SUP: 0x400,
} as const;
Object.freeze(PortCapFlags2);
/** A bit of {@link PortCapFlags2}. */
export type PortCapFlags2 = typeof PortCapFlags2[keyof typeof PortCapFlags2];

/**
 * The `active_width` values of a port (the kernel's `IB_WIDTH_*`; libibverbs has no
 * enum for them). The number of lanes is 1, 2, 4, 8 or 12.
 */
export const PortWidth = {
  WIDTH_1X: 1,
  WIDTH_4X: 2,
  WIDTH_8X: 4,
  WIDTH_12X: 8,
  WIDTH_2X: 16,
} as const;
Object.freeze(PortWidth);
/** A value of {@link PortWidth}. */
export type PortWidth = typeof PortWidth[keyof typeof PortWidth];

/** The number of lanes of a {@link PortWidth} value, or `undefined`. */
export function widthToLanes(width: number): number | undefined {
  switch (width) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
    default:
      return undefined;
  }
}

/** A port width as `ibv_devinfo` prints it: "4X", or "invalid width". */
export function widthStr(width: number): string {
  const lanes = widthToLanes(width);
  return lanes === undefined ? "invalid width" : `${lanes}X`;
}

/**
 * The `active_speed` values of a port (the kernel's `IB_SPEED_*`): the signalling
 * rate of one lane, SDR 2.5 Gb/s ... NDR 100 Gb/s.
 */
export const PortSpeed = {
  SDR: 1,
  DDR: 2,
  QDR: 4,
  FDR10: 8,
  FDR: 16,
  EDR: 32,
  HDR: 64,
  NDR: 128,
} as const;
Object.freeze(PortSpeed);
/** A value of {@link PortSpeed}. */
export type PortSpeed = typeof PortSpeed[keyof typeof PortSpeed];

const SPEED_GBPS: Readonly<Record<number, string>> = Object.freeze({
  1: "2.5",
  2: "5.0",
  4: "10.0",
  8: "10.0",
  16: "14.0",
  32: "25.0",
  64: "50.0",
  128: "100.0",
});

/** The per-lane rate in Gb/s of a {@link PortSpeed} value, or `undefined`. */
export function speedToGbps(speed: number): number | undefined {
  const s = SPEED_GBPS[speed];
  return s === undefined ? undefined : Number(s);
}

/** A port speed as `ibv_devinfo` prints it: "25.0 Gbps", or "invalid speed". */
export function speedStr(speed: number): string {
  const s = SPEED_GBPS[speed];
  return s === undefined ? "invalid speed" : `${s} Gbps`;
}

/** The `phys_state` values of a port (the kernel's `IB_PORT_PHYS_STATE_*`). */
export const PortPhysState = {
  SLEEP: 1,
  POLLING: 2,
  DISABLED: 3,
  PORT_CONFIGURATION_TRAINING: 4,
  LINK_UP: 5,
  LINK_ERROR_RECOVERY: 6,
  PHY_TEST: 7,
} as const;
Object.freeze(PortPhysState);
/** A value of {@link PortPhysState}. */
export type PortPhysState = typeof PortPhysState[keyof typeof PortPhysState];

/** A physical port state as `ibv_devinfo` prints it: "LINK_UP", or "invalid physical state". */
export function physStateStr(physState: number): string {
  switch (physState) {
    case 1:
      return "SLEEP";
    case 2:
      return "POLLING";
    case 3:
      return "DISABLED";
    case 4:
      return "PORT_CONFIGURATION TRAINNING";
    case 5:
      return "LINK_UP";
    case 6:
      return "LINK_ERROR_RECOVERY";
    case 7:
      return "PHY TEST";
    default:
      return "invalid physical state";
  }
}

/** `enum ibv_node_type`: the kind of a device. */
export const NodeType = {
  UNKNOWN: -1,
  CA: 1,
  SWITCH: 2,
  ROUTER: 3,
  RNIC: 4,
  USNIC: 5,
  USNIC_UDP: 6,
  UNSPECIFIED: 7,
} as const;
Object.freeze(NodeType);
/** A value of {@link NodeType}. */
export type NodeType = typeof NodeType[keyof typeof NodeType];

/** `enum ibv_transport_type`: the transport of a device. */
export const TransportType = {
  UNKNOWN: -1,
  IB: 0,
  IWARP: 1,
  USNIC: 2,
  USNIC_UDP: 3,
  UNSPECIFIED: 4,
} as const;
Object.freeze(TransportType);
/** A value of {@link TransportType}. */
export type TransportType = typeof TransportType[keyof typeof TransportType];

/** A transport as `ibv_devinfo` prints it: "InfiniBand", "iWARP", ..., or "invalid transport". */
export function transportTypeStr(transport: number): string {
  switch (transport) {
    case TransportType.IB:
      return "InfiniBand";
    case TransportType.IWARP:
      return "iWARP";
    case TransportType.USNIC:
      return "usNIC";
    case TransportType.USNIC_UDP:
      return "usNIC UDP";
    default:
      return "invalid transport";
  }
}

/** `enum ibv_atomic_cap`: the atomic operation guarantees of a device. */
export const AtomicCap = { NONE: 0, HCA: 1, GLOB: 2 } as const;
Object.freeze(AtomicCap);
/** A value of {@link AtomicCap}. */
export type AtomicCap = typeof AtomicCap[keyof typeof AtomicCap];

/** An atomic capability as `ibv_devinfo` prints it: "ATOMIC_HCA", or "invalid atomic capability". */
export function atomicCapStr(cap: number): string {
  switch (cap) {
    case AtomicCap.NONE:
      return "ATOMIC_NONE";
    case AtomicCap.HCA:
      return "ATOMIC_HCA";
    case AtomicCap.GLOB:
      return "ATOMIC_GLOB";
    default:
      return "invalid atomic capability";
  }
}

/** `enum ibv_device_cap_flags`: the `device_cap_flags` of `ibv_device_attr` (32 bits). */
export const DeviceCapFlags = {
  RESIZE_MAX_WR: 1,
  BAD_PKEY_CNTR: 0x2,
  BAD_QKEY_CNTR: 0x4,
  RAW_MULTI: 0x8,
  AUTO_PATH_MIG: 0x10,
  CHANGE_PHY_PORT: 0x20,
  UD_AV_PORT_ENFORCE: 0x40,
  CURR_QP_STATE_MOD: 0x80,
  SHUTDOWN_PORT: 0x100,
  INIT_TYPE: 0x200,
  PORT_ACTIVE_EVENT: 0x400,
  SYS_IMAGE_GUID: 0x800,
  RC_RNR_NAK_GEN: 0x1000,
  SRQ_RESIZE: 0x2000,
  N_NOTIFY_CQ: 0x4000,
  MEM_WINDOW: 0x20000,
  UD_IP_CSUM: 0x40000,
  XRC: 0x100000,
  MEM_MGT_EXTENSIONS: 0x200000,
  MEM_WINDOW_TYPE_2A: 0x800000,
  MEM_WINDOW_TYPE_2B: 0x1000000,
  RC_IP_CSUM: 0x2000000,
  RAW_IP_CSUM: 0x4000000,
  MANAGED_FLOW_STEERING: 0x20000000,
} as const;
Object.freeze(DeviceCapFlags);
/** A bit of {@link DeviceCapFlags}. */
export type DeviceCapFlags = typeof DeviceCapFlags[keyof typeof DeviceCapFlags];

/**
 * The 64-bit device capabilities above bit 31 (`IBV_DEVICE_RAW_SCATTER_FCS`,
 * `IBV_DEVICE_PCI_WRITE_END_PADDING`), found in `ibv_device_attr_ex.device_cap_flags_ex`.
 * Bigints, since they do not fit JavaScript's 32-bit bit operators.
 */
export const DeviceCapFlagsEx = {
  RAW_SCATTER_FCS: 0x400000000n,
  PCI_WRITE_END_PADDING: 0x1000000000n,
} as const;
Object.freeze(DeviceCapFlagsEx);
/** A bit of {@link DeviceCapFlagsEx}. */
export type DeviceCapFlagsEx = typeof DeviceCapFlagsEx[keyof typeof DeviceCapFlagsEx];

/** `enum ibv_odp_general_caps`: the `general_caps` of `ibv_odp_caps` (on-demand paging). */
export const OdpGeneralCaps = { SUPPORT: 0x1, SUPPORT_IMPLICIT: 0x2 } as const;
Object.freeze(OdpGeneralCaps);
/** A bit of {@link OdpGeneralCaps}. */
export type OdpGeneralCaps = typeof OdpGeneralCaps[keyof typeof OdpGeneralCaps];

/** `enum ibv_odp_transport_cap_bits`: the per-transport on-demand paging capabilities. */
export const OdpTransportCap = {
  SEND: 0x1,
  RECV: 0x2,
  WRITE: 0x4,
  READ: 0x8,
  ATOMIC: 0x10,
  SRQ_RECV: 0x20,
} as const;
Object.freeze(OdpTransportCap);
/** A bit of {@link OdpTransportCap}. */
export type OdpTransportCap = typeof OdpTransportCap[keyof typeof OdpTransportCap];

/** `enum ibv_event_type`: the type of an asynchronous event. */
export const EventType = {
  CQ_ERR: 0,
  QP_FATAL: 1,
  QP_REQ_ERR: 2,
  QP_ACCESS_ERR: 3,
  COMM_EST: 4,
  SQ_DRAINED: 5,
  PATH_MIG: 6,
  PATH_MIG_ERR: 7,
  DEVICE_FATAL: 8,
  PORT_ACTIVE: 9,
  PORT_ERR: 10,
  LID_CHANGE: 11,
  PKEY_CHANGE: 12,
  SM_CHANGE: 13,
  SRQ_ERR: 14,
  SRQ_LIMIT_REACHED: 15,
  QP_LAST_WQE_REACHED: 16,
  CLIENT_REREGISTER: 17,
  GID_CHANGE: 18,
  WQ_FATAL: 19,
} as const;
Object.freeze(EventType);
/** A value of {@link EventType}. */
export type EventType = typeof EventType[keyof typeof EventType];

/** `enum ibv_srq_attr_mask`: the fields `ibv_modify_srq` changes. */
export const SrqAttrMask = { MAX_WR: 0x1, LIMIT: 0x2 } as const;
Object.freeze(SrqAttrMask);
/** A bit of {@link SrqAttrMask}. */
export type SrqAttrMask = typeof SrqAttrMask[keyof typeof SrqAttrMask];

/** `enum ibv_srq_type`: the kind of a shared receive queue. */
export const SrqType = { BASIC: 0, XRC: 1, TM: 2 } as const;
Object.freeze(SrqType);
/** A value of {@link SrqType}. */
export type SrqType = typeof SrqType[keyof typeof SrqType];

/** `enum ibv_srq_init_attr_mask`: the valid fields of `ibv_srq_init_attr_ex.comp_mask`. */
export const SrqInitAttrMask = {
  TYPE: 0x1,
  PD: 0x2,
  XRCD: 0x4,
  CQ: 0x8,
  TM: 0x10,
  RESERVED: 0x20,
} as const;
Object.freeze(SrqInitAttrMask);
/** A bit of {@link SrqInitAttrMask}. */
export type SrqInitAttrMask = typeof SrqInitAttrMask[keyof typeof SrqInitAttrMask];

/**
 * `enum ibv_rereg_mr_flags`: what `ibv_rereg_mr` changes. `FLAGS_SUPPORTED` is the
 * mask of all of them.
 */
export const ReregMrFlags = {
  CHANGE_TRANSLATION: 0x1,
  CHANGE_PD: 0x2,
  CHANGE_ACCESS: 0x4,
  FLAGS_SUPPORTED: 7,
} as const;
Object.freeze(ReregMrFlags);
/** A bit (or the supported mask) of {@link ReregMrFlags}. */
export type ReregMrFlags = typeof ReregMrFlags[keyof typeof ReregMrFlags];

/** `enum ibv_rereg_mr_err_code`: the negative results of `ibv_rereg_mr`. */
export const ReregMrErrCode = {
  INPUT: -1,
  DONT_FORK_NEW: -2,
  DO_FORK_OLD: -3,
  CMD: -4,
  CMD_AND_DO_FORK_NEW: -5,
} as const;
Object.freeze(ReregMrErrCode);
/** A value of {@link ReregMrErrCode}. */
export type ReregMrErrCode = typeof ReregMrErrCode[keyof typeof ReregMrErrCode];

/** `enum ibv_advise_mr_advice`: what `ibv_advise_mr` asks of an ODP region. */
export const AdviseMrAdvice = { PREFETCH: 0, PREFETCH_WRITE: 1, PREFETCH_NO_FAULT: 2 } as const;
Object.freeze(AdviseMrAdvice);
/** A value of {@link AdviseMrAdvice}. */
export type AdviseMrAdvice = typeof AdviseMrAdvice[keyof typeof AdviseMrAdvice];

/** `IBV_ADVISE_MR_FLAG_*`: the flags of `ibv_advise_mr`. */
export const AdviseMrFlags = { FLUSH: 1 } as const;
Object.freeze(AdviseMrFlags);
/** A bit of {@link AdviseMrFlags}. */
export type AdviseMrFlags = typeof AdviseMrFlags[keyof typeof AdviseMrFlags];

/** `enum ibv_xrcd_init_attr_mask`: the valid fields of `ibv_xrcd_init_attr.comp_mask`. */
export const XrcdInitAttrMask = { FD: 1, OFLAGS: 2, RESERVED: 4 } as const;
Object.freeze(XrcdInitAttrMask);
/** A bit of {@link XrcdInitAttrMask}. */
export type XrcdInitAttrMask = typeof XrcdInitAttrMask[keyof typeof XrcdInitAttrMask];

/** `enum ibv_mw_type`: the type of a memory window. */
export const MwType = { TYPE_1: 1, TYPE_2: 2 } as const;
Object.freeze(MwType);
/** A value of {@link MwType}. */
export type MwType = typeof MwType[keyof typeof MwType];

/** `enum ibv_gid_type`: the type of a GID table entry (`ibv_query_gid_ex`, `ibv_query_gid_table`). */
export const GidType = { IB: 0, ROCE_V1: 1, ROCE_V2: 2 } as const;
Object.freeze(GidType);
/** A value of {@link GidType}. */
export type GidType = typeof GidType[keyof typeof GidType];

/**
 * The GID types as the kernel names them in sysfs (`gid_attrs/types/N`), which
 * libibverbs reads for `ibv_query_gid_type` (its internal `enum ibv_gid_type_sysfs`:
 * IB and RoCE v1 share one value there).
 */
export const GidTypeSysfs = { IB_ROCE_V1: 0, ROCE_V2: 1 } as const;
Object.freeze(GidTypeSysfs);
/** A value of {@link GidTypeSysfs}. */
export type GidTypeSysfs = typeof GidTypeSysfs[keyof typeof GidTypeSysfs];

/** Parses a sysfs GID type text ("IB/RoCE v1" or "RoCE v2", trailing newline allowed). */
export function parseSysfsGidType(text: string): GidTypeSysfs | undefined {
  switch (text.trim()) {
    case "IB/RoCE v1":
      return GidTypeSysfs.IB_ROCE_V1;
    case "RoCE v2":
      return GidTypeSysfs.ROCE_V2;
    default:
      return undefined;
  }
}

/** `enum ibv_rate`: a static rate of an address handle (`ah_attr.static_rate`). */
export const Rate = {
  RATE_MAX: 0,
  RATE_2_5_GBPS: 2,
  RATE_5_GBPS: 5,
  RATE_10_GBPS: 3,
  RATE_20_GBPS: 6,
  RATE_30_GBPS: 4,
  RATE_40_GBPS: 7,
  RATE_60_GBPS: 8,
  RATE_80_GBPS: 9,
  RATE_120_GBPS: 10,
  RATE_14_GBPS: 11,
  RATE_56_GBPS: 12,
  RATE_112_GBPS: 13,
  RATE_168_GBPS: 14,
  RATE_25_GBPS: 15,
  RATE_100_GBPS: 16,
  RATE_200_GBPS: 17,
  RATE_300_GBPS: 18,
  RATE_28_GBPS: 19,
  RATE_50_GBPS: 20,
  RATE_400_GBPS: 21,
  RATE_600_GBPS: 22,
  RATE_800_GBPS: 23,
  RATE_1200_GBPS: 24,
} as const;
Object.freeze(Rate);
/** A value of {@link Rate}. */
export type Rate = typeof Rate[keyof typeof Rate];

const RATE_MBPS: readonly number[] = Object.freeze([
  -1,
  -1,
  2500,
  10000,
  30000,
  5000,
  20000,
  40000,
  60000,
  80000,
  120000,
  14062,
  56250,
  112500,
  168750,
  25781,
  103125,
  206250,
  309375,
  28125,
  53125,
  425000,
  637500,
  850000,
  1275000,
]);

/** `ibv_rate_to_mbps`: a {@link Rate} in Mb/s (the data rate of the encoding), or -1. */
export function rateToMbps(rate: number): number {
  return Number.isInteger(rate) && rate >= 0 && rate < RATE_MBPS.length ? RATE_MBPS[rate] : -1;
}

/** `enum ibv_fork_status`: the result of `ibv_is_fork_initialized`. */
export const ForkStatus = { DISABLED: 0, ENABLED: 1, UNNEEDED: 2 } as const;
Object.freeze(ForkStatus);
/** A value of {@link ForkStatus}. */
export type ForkStatus = typeof ForkStatus[keyof typeof ForkStatus];

/** `enum ibv_wq_type`: the kind of a work queue. */
export const WqType = { RQ: 0 } as const;
Object.freeze(WqType);
/** A value of {@link WqType}. */
export type WqType = typeof WqType[keyof typeof WqType];

/** `enum ibv_wq_state`: the state of a work queue. */
export const WqState = { RESET: 0, RDY: 1, ERR: 2, UNKNOWN: 3 } as const;
Object.freeze(WqState);
/** A value of {@link WqState}. */
export type WqState = typeof WqState[keyof typeof WqState];

/** `enum ibv_wq_attr_mask`: the fields `ibv_modify_wq` changes. */
export const WqAttrMask = { STATE: 0x1, CURR_STATE: 0x2, FLAGS: 0x4, RESERVED: 0x8 } as const;
Object.freeze(WqAttrMask);
/** A bit of {@link WqAttrMask}. */
export type WqAttrMask = typeof WqAttrMask[keyof typeof WqAttrMask];

/** `enum ibv_wq_flags`: the `create_flags` of a work queue. */
export const WqFlags = {
  CVLAN_STRIPPING: 0x1,
  SCATTER_FCS: 0x2,
  DELAY_DROP: 0x4,
  PCI_WRITE_END_PADDING: 0x8,
  RESERVED: 0x10,
} as const;
Object.freeze(WqFlags);
/** A bit of {@link WqFlags}. */
export type WqFlags = typeof WqFlags[keyof typeof WqFlags];
