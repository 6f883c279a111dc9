/**
 * devinfo - the information `ibv_devinfo` prints (`-v` for everything), with the same
 * field names and formatting, so the two outputs can be compared line by line.
 *
 * ```sh
 * deno run --allow-ffi jsr:@rdma/verbs/examples/devinfo -v
 * bun examples/devinfo.ts -d rxe0 -i 1
 * ```
 *
 * @module
 */

import { readFileSync } from "node:fs";
import {
  AtomicCap,
  type Context,
  type DeviceAttrEx,
  DeviceCapFlags,
  DeviceCapFlagsEx,
  type DeviceInfo,
  enumName,
  type GidEntry,
  GidType,
  LinkLayer,
  listDevices,
  OdpGeneralCaps,
  OdpTransportCap,
  openDevice,
  type PortAttr,
  PortState,
  QpType,
  TransportType,
  transportTypeStr,
} from "../verbs.ts";
import {
  countOption,
  intOption,
  out,
  runTool,
  stringOption,
  type ToolSpec,
  UsageError,
} from "./_common/cli.ts";
import { gidFromText, gidToInet6 } from "./_common/gid.ts";

const SPEC: ToolSpec = {
  name: "devinfo",
  synopsis: ["            print the ca attributes"],
  options: {
    "ib-dev": {
      short: "d",
      type: "string",
      arg: "dev",
      help: "use IB device <dev> (default first device found)",
    },
    "ib-port": {
      short: "i",
      type: "string",
      arg: "port",
      help: "use port <port> of IB device (default all ports)",
    },
    list: { short: "l", type: "boolean", help: "print only the IB devices names" },
    verbose: {
      short: "v",
      type: "boolean",
      multiple: true,
      help: "print all the attributes of the IB device(s)",
    },
  },
  maxPositionals: 0,
  permissions:
    "--allow-ffi; --allow-read=/sys/class/infiniband to print board_id where the device has one",
};

const T = "\t";

function hex(v: number | bigint, width = 0, upper = false): string {
  const s = BigInt.asUintN(64, BigInt(v)).toString(16).padStart(width, "0");
  return upper ? s.toUpperCase() : s;
}

function guidText(hex16: string): string {
  return hex16.match(/.{4}/g)!.join(":");
}

function portStateText(s: number): string {
  const name = enumName(PortState, s, "");
  return /^(DOWN|INIT|ARMED|ACTIVE)$/.test(name) ? `PORT_${name}` : "invalid state";
}

const PHYS_STATES = [
  "",
  "SLEEP",
  "POLLING",
  "DISABLED",
  "PORT_CONFIGURATION TRAINNING",
  "LINK_UP",
  "LINK_ERROR_RECOVERY",
  "PHY TEST",
];

function physStateText(s: number): string {
  return PHYS_STATES[s] || "invalid physical state";
}

function atomicText(a: number): string {
  const name = enumName(AtomicCap, a, "");
  return /^(NONE|HCA|GLOB)$/.test(name) ? `ATOMIC_${name}` : "invalid atomic capability";
}

function mtuText(m: number): string {
  return m >= 1 && m <= 5 ? String(128 << m) : "invalid MTU";
}

function widthText(w: number): string {
  return ({ 1: "1", 2: "4", 4: "8", 8: "12", 16: "2" } as Record<number, string>)[w] ??
    "invalid width";
}

function speedText(s: number): string {
  return ({
    1: "2.5 Gbps",
    2: "5.0 Gbps",
    4: "10.0 Gbps",
    8: "10.0 Gbps",
    16: "14.0 Gbps",
    32: "25.0 Gbps",
    64: "50.0 Gbps",
    128: "100.0 Gbps",
    256: "200.0 Gbps",
  } as Record<number, string>)[s] ?? "invalid speed";
}

function vlText(v: number): string {
  return ({ 1: "1", 2: "2", 3: "4", 4: "8", 5: "15" } as Record<number, string>)[v] ??
    "invalid value";
}

function linkLayerText(l: number): string {
  if (l === LinkLayer.UNSPECIFIED || l === LinkLayer.INFINIBAND) return "InfiniBand";
  return l === LinkLayer.ETHERNET ? "Ethernet" : "Unknown";
}

function gidTypeText(t: number): string {
  if (t === GidType.IB) return "IB";
  if (t === GidType.ROCE_V1) return "RoCE v1";
  if (t === GidType.ROCE_V2) return "RoCE v2";
  return "Invalid GID type";
}

/** A numeric field of a queried struct, by its camelCase name (0 when absent). */
function n(o: object, name: string): number {
  const v = (o as Record<string, unknown>)[name];
  return typeof v === "bigint" ? Number(v) : typeof v === "number" ? v : 0;
}

/** A 64-bit field as bigint (0n when absent). */
function big(o: object, name: string): bigint {
  const v = (o as Record<string, unknown>)[name];
  return typeof v === "bigint" ? v : typeof v === "number" ? BigInt(v) : 0n;
}

const CAP_FLAG_ORDER = [
  "RESIZE_MAX_WR",
  "BAD_PKEY_CNTR",
  "BAD_QKEY_CNTR",
  "RAW_MULTI",
  "AUTO_PATH_MIG",
  "CHANGE_PHY_PORT",
  "UD_AV_PORT_ENFORCE",
  "CURR_QP_STATE_MOD",
  "SHUTDOWN_PORT",
  "INIT_TYPE",
  "PORT_ACTIVE_EVENT",
  "SYS_IMAGE_GUID",
  "RC_RNR_NAK_GEN",
  "SRQ_RESIZE",
  "N_NOTIFY_CQ",
  "MEM_WINDOW",
  "UD_IP_CSUM",
  "XRC",
  "MEM_MGT_EXTENSIONS",
  "MEM_WINDOW_TYPE_2A",
  "MEM_WINDOW_TYPE_2B",
  "RC_IP_CSUM",
  "RAW_IP_CSUM",
  "MANAGED_FLOW_STEERING",
] as const;

function printCapFlags(flags: number): void {
  let known = 0;
  for (const name of CAP_FLAG_ORDER) {
    const bit = (DeviceCapFlags as Record<string, number>)[name] ?? 0;
    known |= bit;
    if (flags & bit) out(`${T.repeat(5)}${name}`);
  }
  const unknown = (flags & ~known) >>> 0;
  if (unknown) out(`${T.repeat(5)}Unknown flags: 0x${hex(unknown, 0, true)}`);
}

/** A flag line: five tabs, then the text (how `ibv_devinfo` lists set bits). */
function flagLine(text: string): void {
  out(`${T.repeat(5)}${text}`);
}

/** `Unknown flags: 0x...` for the bits of `mask` outside `known`, if any. */
function unknownFlags(mask: number | bigint, known: number | bigint): void {
  const rest = BigInt.asUintN(64, BigInt(mask)) & ~BigInt(known);
  if (rest) flagLine(`Unknown flags: 0x${hex(rest, 0, true)}`);
}

const ODP_TRANSPORT: [number, string][] = [
  [OdpTransportCap.SEND, "SUPPORT_SEND"],
  [OdpTransportCap.RECV, "SUPPORT_RECV"],
  [OdpTransportCap.WRITE, "SUPPORT_WRITE"],
  [OdpTransportCap.READ, "SUPPORT_READ"],
  [OdpTransportCap.ATOMIC, "SUPPORT_ATOMIC"],
  [OdpTransportCap.SRQ_RECV, "SUPPORT_SRQ"],
];

function printOdpTransport(caps: number): void {
  if (!caps) return flagLine("NO SUPPORT");
  let known = 0;
  for (const [bit, name] of ODP_TRANSPORT) {
    known |= bit;
    if (caps & bit) flagLine(name);
  }
  unknownFlags(caps, known);
}

function printOdp(a: DeviceAttrEx): void {
  const g = a.odpCaps.generalCaps;
  out(`${T}general_odp_caps:`);
  if (g & BigInt(OdpGeneralCaps.SUPPORT)) flagLine("ODP_SUPPORT");
  if (g & BigInt(OdpGeneralCaps.SUPPORT_IMPLICIT)) flagLine("ODP_SUPPORT_IMPLICIT");
  unknownFlags(g, OdpGeneralCaps.SUPPORT | OdpGeneralCaps.SUPPORT_IMPLICIT);
  const per = a.odpCaps.perTransportCaps;
  for (const [t, caps] of [["rc", per.rcOdpCaps], ["uc", per.ucOdpCaps], ["ud", per.udOdpCaps]]) {
    out(`${T}${t}_odp_caps:`);
    printOdpTransport(caps as number);
  }
  out(`${T}xrc_odp_caps:`);
  printOdpTransport(a.xrcOdpCaps);
}

const QPT_RAW = 1 << QpType.RAW_PACKET, QPT_UD = 1 << QpType.UD;

function printQpts(qpts: number): void {
  out(`${T}${T}supported_qp:`);
  if (qpts & QPT_RAW) flagLine("SUPPORT_RAW_PACKET");
  if (qpts & QPT_UD) flagLine("SUPPORT_UD");
  unknownFlags(qpts, QPT_RAW | QPT_UD);
}

const RAW_PACKET_CAPS: [number, string][] = [
  [0x1, "C-VLAN stripping offload"],
  [0x2, "Scatter FCS offload"],
  [0x4, "IP csum offload"],
  [0x8, "Delay drop"],
];

/** The extended attributes `ibv_devinfo -v` prints after the base ones. */
function printExtended(a: DeviceAttrEx, ctx: Context): void {
  printOdp(a);
  if (a.completionTimestampMask) {
    out(`${T}completion timestamp_mask:${T.repeat(3)}0x${hex(a.completionTimestampMask, 16)}`);
  } else out(`${T}completion_timestamp_mask not supported`);
  if (a.hcaCoreClock) out(`${T}hca_core_clock:${T.repeat(3)}${a.hcaCoreClock}kHZ`);
  else out(`${T}core clock not supported`);
  if (a.rawPacketCaps) {
    out(`${T}raw packet caps:`);
    for (const [bit, text] of RAW_PACKET_CAPS) if (a.rawPacketCaps & bit) flagLine(text);
  }
  out(`${T}device_cap_flags_ex:${T}${T}0x${hex(a.deviceCapFlagsEx, 0, true)}`);
  const exOnly = a.deviceCapFlagsEx & 0xffffffff00000000n;
  if (exOnly & DeviceCapFlagsEx.RAW_SCATTER_FCS) flagLine("RAW_SCATTER_FCS");
  if (exOnly & DeviceCapFlagsEx.PCI_WRITE_END_PADDING) flagLine("PCI_WRITE_END_PADDING");
  unknownFlags(exOnly, DeviceCapFlagsEx.RAW_SCATTER_FCS | DeviceCapFlagsEx.PCI_WRITE_END_PADDING);
  const tso = a.tsoCaps;
  out(`${T}tso_caps:`);
  out(`${T}${T}max_tso:${T.repeat(3)}${tso.maxTso}`);
  if (tso.maxTso) printQpts(tso.supportedQpts);
  const rss = a.rssCaps;
  out(`${T}rss_caps:`);
  out(`${T}${T}max_rwq_indirection_tables:${T.repeat(3)}${rss.maxRwqIndirectionTables}`);
  out(`${T}${T}max_rwq_indirection_table_size:${T.repeat(3)}${rss.maxRwqIndirectionTableSize}`);
  out(`${T}${T}rx_hash_function:${T.repeat(4)}0x${hex(rss.rxHashFunction)}`);
  out(`${T}${T}rx_hash_fields_mask:${T.repeat(4)}0x${hex(rss.rxHashFieldsMask, 0, true)}`);
  if (rss.supportedQpts) printQpts(rss.supportedQpts);
  out(`${T}max_wq_type_rq:${T.repeat(3)}${a.maxWqTypeRq}`);
  const pacing = a.packetPacingCaps;
  out(`${T}packet_pacing_caps:`);
  out(`${T}${T}qp_rate_limit_min:${T}${pacing.qpRateLimitMin}kbps`);
  out(`${T}${T}qp_rate_limit_max:${T}${pacing.qpRateLimitMax}kbps`);
  if (pacing.qpRateLimitMax) printQpts(pacing.supportedQpts);
  const tm = a.tmCaps;
  if (tm.maxNumTags) {
    out(`${T}max_rndv_hdr_size:${T}${T}${tm.maxRndvHdrSize}`);
    out(`${T}max_num_tags:${T.repeat(3)}${tm.maxNumTags}`);
    out(`${T}max_ops:${T.repeat(3)}${tm.maxOps}`);
    out(`${T}max_sge:${T.repeat(3)}${tm.maxSge}`);
    out(`${T}flags:`);
    if (tm.flagNames.includes("IBV_TM_CAP_RC")) flagLine("IBV_TM_CAP_RC");
  } else out(`${T}tag matching not supported`);
  const cq = a.cqModCaps;
  if (cq.maxCqCount && cq.maxCqPeriod) {
    out(`\n${T}cq moderation caps:`);
    out(`${T}${T}max_cq_count:${T}${cq.maxCqCount}`);
    out(`${T}${T}max_cq_period:${T}${cq.maxCqPeriod} us\n`);
  }
  if (a.maxDmSize) out(`${T}maximum available device memory:${T}${a.maxDmSize}Bytes\n`);
  out(`${T}num_comp_vectors:${T}${T}${ctx.numCompVectors}`);
}

function printBase(a: DeviceAttrEx): void {
  const f = (name: string, tabs: number, v: string | number) =>
    out(`${T}${name}:${T.repeat(tabs)}${v}`);
  f("max_mr_size", 3, `0x${hex(big(a, "maxMrSize"))}`);
  f("page_size_cap", 3, `0x${hex(big(a, "pageSizeCap"))}`);
  f("max_qp", 4, n(a, "maxQp"));
  f("max_qp_wr", 3, n(a, "maxQpWr"));
  f("device_cap_flags", 2, `0x${hex(n(a, "deviceCapFlags"), 8)}`);
  printCapFlags(n(a, "deviceCapFlags"));
  f("max_sge", 3, n(a, "maxSge"));
  f("max_sge_rd", 3, n(a, "maxSgeRd"));
  f("max_cq", 4, n(a, "maxCq"));
  f("max_cqe", 3, n(a, "maxCqe"));
  f("max_mr", 4, n(a, "maxMr"));
  f("max_pd", 4, n(a, "maxPd"));
  f("max_qp_rd_atom", 3, n(a, "maxQpRdAtom"));
  f("max_ee_rd_atom", 3, n(a, "maxEeRdAtom"));
  f("max_res_rd_atom", 2, n(a, "maxResRdAtom"));
  f("max_qp_init_rd_atom", 2, n(a, "maxQpInitRdAtom"));
  f("max_ee_init_rd_atom", 2, n(a, "maxEeInitRdAtom"));
  f("atomic_cap", 3, `${atomicText(n(a, "atomicCap"))} (${n(a, "atomicCap")})`);
  f("max_ee", 4, n(a, "maxEe"));
  f("max_rdd", 3, n(a, "maxRdd"));
  f("max_mw", 4, n(a, "maxMw"));
  f("max_raw_ipv6_qp", 2, n(a, "maxRawIpv6Qp"));
  f("max_raw_ethy_qp", 2, n(a, "maxRawEthyQp"));
  f("max_mcast_grp", 3, n(a, "maxMcastGrp"));
  f("max_mcast_qp_attach", 2, n(a, "maxMcastQpAttach"));
  f("max_total_mcast_qp_attach", 1, n(a, "maxTotalMcastQpAttach"));
  f("max_ah", 4, n(a, "maxAh"));
  f("max_fmr", 3, n(a, "maxFmr"));
  if (n(a, "maxFmr")) f("max_map_per_fmr", 2, n(a, "maxMapPerFmr"));
  f("max_srq", 3, n(a, "maxSrq"));
  if (n(a, "maxSrq")) {
    f("max_srq_wr", 3, n(a, "maxSrqWr"));
    f("max_srq_sge", 3, n(a, "maxSrqSge"));
  }
  f("max_pkeys", 3, n(a, "maxPkeys"));
  f("local_ca_ack_delay", 2, n(a, "localCaAckDelay"));
}

function printPort(
  dev: DeviceInfo,
  port: number,
  p: PortAttr,
  gids: readonly GidEntry[],
  verbose: boolean,
): void {
  const f = (name: string, tabs: number, v: string | number) =>
    out(`${T}${T}${T}${name}:${T.repeat(tabs)}${v}`);
  out(`${T}${T}port:${T}${port}`);
  f("state", 3, `${portStateText(p.state)} (${p.state})`);
  f("max_mtu", 2, `${mtuText(p.maxMtu)} (${p.maxMtu})`);
  f("active_mtu", 2, `${mtuText(p.activeMtu)} (${p.activeMtu})`);
  f("sm_lid", 3, n(p, "smLid"));
  f("port_lid", 2, p.lid);
  f("port_lmc", 2, `0x${hex(n(p, "lmc"), 2)}`);
  f("link_layer", 2, linkLayerText(p.linkLayer));
  if (verbose) {
    f("max_msg_sz", 2, `0x${hex(p.maxMsgSz)}`);
    f("port_cap_flags", 2, `0x${hex(n(p, "portCapFlags"), 8)}`);
    f("port_cap_flags2", 1, `0x${hex(n(p, "portCapFlags2"), 4)}`);
    f("max_vl_num", 2, `${vlText(n(p, "maxVlNum"))} (${n(p, "maxVlNum")})`);
    f("bad_pkey_cntr", 2, `0x${hex(n(p, "badPkeyCntr"))}`);
    f("qkey_viol_cntr", 2, `0x${hex(n(p, "qkeyViolCntr"))}`);
    f("sm_sl", 3, n(p, "smSl"));
    f("pkey_tbl_len", 2, p.pkeyTblLen);
    f("gid_tbl_len", 2, p.gidTblLen);
    f("subnet_timeout", 2, n(p, "subnetTimeout"));
    f("init_type_reply", 1, n(p, "initTypeReply"));
    f("active_width", 2, `${widthText(n(p, "activeWidth"))}X (${n(p, "activeWidth")})`);
    f("active_speed", 2, `${speedText(n(p, "activeSpeed"))} (${n(p, "activeSpeed")})`);
    if (dev.transportType === TransportType.IB) {
      f("phys_state", 2, `${physStateText(n(p, "physState"))} (${n(p, "physState")})`);
    }
    for (const g of gids) {
      if (g.portNum !== port) continue;
      const text = gidToInet6(gidFromText(g.gid));
      f(`GID[${String(g.gidIndex).padStart(3)}]`, 2, `${text}, ${gidTypeText(g.gidType)}`);
    }
  }
  out("");
}

function boardId(dev: DeviceInfo): string | null {
  try {
    const text = readFileSync(`${dev.ibdevPath}/board_id`, "utf8").trim();
    return text || null;
  } catch {
    return null;
  }
}

function printDevice(dev: DeviceInfo, onlyPort: number, verbose: boolean): number {
  using ctx = openDevice(dev.name);
  const a = ctx.queryDeviceEx();
  const ports = n(a, "physPortCnt");
  if (onlyPort && onlyPort > ports) {
    console.error("Invalid port requested for device");
    return 4;
  }
  out(`hca_id:${T}${dev.name}`);
  out(`${T}transport:${T.repeat(3)}${transportTypeStr(dev.transportType)} (${dev.transportType})`);
  if (a.fwVer) out(`${T}fw_ver:${T.repeat(4)}${a.fwVer}`);
  out(`${T}node_guid:${T.repeat(3)}${guidText(a.nodeGuidHex)}`);
  out(`${T}sys_image_guid:${T.repeat(3)}${guidText(beHex(big(a, "sysImageGuid")))}`);
  out(`${T}vendor_id:${T.repeat(3)}0x${hex(n(a, "vendorId"), 4)}`);
  out(`${T}vendor_part_id:${T.repeat(3)}${n(a, "vendorPartId")}`);
  out(`${T}hw_ver:${T.repeat(4)}0x${hex(n(a, "hwVer"), 0, true)}`);
  const board = boardId(dev);
  if (board) out(`${T}board_id:${T.repeat(3)}${board}`);
  out(`${T}phys_port_cnt:${T.repeat(3)}${ports}`);
  if (verbose) {
    printBase(a);
    printExtended(a, ctx);
  }
  const gids = verbose ? ctx.gidTable() : [];
  for (let port = 1; port <= ports; port++) {
    if (onlyPort && port !== onlyPort) continue;
    printPort(dev, port, ctx.queryPort(port), gids, verbose);
  }
  return 0;
}

/** A `__be64` read as a little-endian number, as hex digits in wire order. */
function beHex(v: bigint): string {
  const b = new DataView(new ArrayBuffer(8));
  b.setBigUint64(0, v, true);
  return b.getBigUint64(0, false).toString(16).padStart(16, "0");
}

if (import.meta.main) {
  await runTool(SPEC, ({ values }) => {
    const port = intOption(values, "ib-port", 0);
    if (values["ib-port"] !== undefined && port <= 0) {
      throw new UsageError(`--ib-port: ports are numbered from 1, got ${port}`);
    }
    const verbose = countOption(values, "verbose") > 0;
    const devices = listDevices();
    if (values.list) {
      out(`${devices.length} HCA${devices.length !== 1 ? "s" : ""} found:`);
      for (const d of devices) out(`${T}${d.name}`);
      out("");
      return 0;
    }
    const name = stringOption(values, "ib-dev");
    if (name !== undefined) {
      const dev = devices.find((d) => d.name === name);
      if (!dev) {
        console.error(`IB device '${name}' wasn't found`);
        return 1;
      }
      return printDevice(dev, port, verbose);
    }
    let rc = 0;
    for (const d of devices) rc |= printDevice(d, port, verbose);
    return rc;
  });
}
