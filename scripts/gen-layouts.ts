/**
 * Generates `types/layouts/<arch>.ts`: size, alignment and field offsets of every C struct the
 * library reads or writes, measured by the C compiler from the installed rdma-core and libc headers.
 *
 * The probe is compiled to an object file, never run: the numbers sit in a `uint32_t` array in a
 * section of its own, read back from the ELF file. So the same code measures the host and a cross
 * target (x86-64 with `x86_64-linux-gnu-gcc`, aarch64 with `aarch64-linux-gnu-gcc`).
 *
 *   deno run -A scripts/gen-layouts.ts          write both tables (skips an arch without compiler)
 *   bun scripts/gen-layouts.ts --check          compare with the checked-in tables, exit 1 on change
 *
 * Only node:* APIs are used so that Deno and Bun both run it.
 *
 * @module
 */
import { execFileSync, spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import type { FieldLayout, LayoutArch, LayoutTable, StructLayout } from "../types/layout.ts";

/**
 * What is measured: C type, then its field paths. `name:type` adds the field `name` and every
 * field of the listed `type`, prefixed with `name.` (recursively). Macros are fine as paths.
 */
const STRUCTS: readonly (readonly [string, string])[] = [
  // libibverbs
  ["union ibv_gid", "raw global global.subnet_prefix global.interface_id"],
  [
    "struct ibv_context_ops",
    `_compat_query_device _compat_query_port _compat_alloc_pd
    _compat_dealloc_pd _compat_reg_mr _compat_rereg_mr _compat_dereg_mr alloc_mw bind_mw
    dealloc_mw _compat_create_cq poll_cq req_notify_cq _compat_cq_event _compat_resize_cq
    _compat_destroy_cq _compat_create_srq _compat_modify_srq _compat_query_srq _compat_destroy_srq
    post_srq_recv _compat_create_qp _compat_query_qp _compat_modify_qp _compat_destroy_qp
    post_send post_recv _compat_create_ah _compat_destroy_ah _compat_attach_mcast
    _compat_detach_mcast _compat_async_event`,
  ],
  [
    "struct ibv_context",
    "device ops:ibv_context_ops cmd_fd async_fd num_comp_vectors mutex abi_compat",
  ],
  [
    "struct verbs_context",
    `query_port advise_mr alloc_null_mr read_counters
    attach_counters_point_flow create_counters destroy_counters reg_dm_mr alloc_dm free_dm
    modify_flow_action_esp destroy_flow_action create_flow_action_esp modify_qp_rate_limit
    alloc_parent_domain dealloc_td alloc_td modify_cq post_srq_ops destroy_rwq_ind_table
    create_rwq_ind_table destroy_wq modify_wq create_wq query_rt_values create_cq_ex priv
    query_device_ex ibv_destroy_flow ABI_placeholder2 ibv_create_flow ABI_placeholder1 open_qp
    create_qp_ex get_srq_num create_srq_ex open_xrcd close_xrcd _ABI_placeholder3 sz context`,
  ],
  ["struct ibv_device", "_ops node_type transport_type name dev_name dev_path ibdev_path"],
  [
    "struct ibv_device_attr",
    `fw_ver node_guid sys_image_guid max_mr_size page_size_cap vendor_id
    vendor_part_id hw_ver max_qp max_qp_wr device_cap_flags max_sge max_sge_rd max_cq max_cqe
    max_mr max_pd max_qp_rd_atom max_ee_rd_atom max_res_rd_atom max_qp_init_rd_atom
    max_ee_init_rd_atom atomic_cap max_ee max_rdd max_mw max_raw_ipv6_qp max_raw_ethy_qp
    max_mcast_grp max_mcast_qp_attach max_total_mcast_qp_attach max_ah max_fmr max_map_per_fmr
    max_srq max_srq_wr max_srq_sge max_pkeys local_ca_ack_delay phys_port_cnt`,
  ],
  [
    "struct ibv_odp_caps",
    `general_caps per_transport_caps per_transport_caps.rc_odp_caps
    per_transport_caps.uc_odp_caps per_transport_caps.ud_odp_caps`,
  ],
  ["struct ibv_tso_caps", "max_tso supported_qpts"],
  [
    "struct ibv_rss_caps",
    `supported_qpts max_rwq_indirection_tables
    max_rwq_indirection_table_size rx_hash_fields_mask rx_hash_function`,
  ],
  ["struct ibv_packet_pacing_caps", "qp_rate_limit_min qp_rate_limit_max supported_qpts"],
  ["struct ibv_tm_caps", "max_rndv_hdr_size max_num_tags flags max_ops max_sge"],
  ["struct ibv_cq_moderation_caps", "max_cq_count max_cq_period"],
  ["struct ibv_pci_atomic_caps", "fetch_add swap compare_swap"],
  [
    "struct ibv_device_attr_ex",
    `orig_attr:ibv_device_attr comp_mask odp_caps:ibv_odp_caps
    completion_timestamp_mask hca_core_clock device_cap_flags_ex tso_caps:ibv_tso_caps
    rss_caps:ibv_rss_caps max_wq_type_rq packet_pacing_caps:ibv_packet_pacing_caps
    raw_packet_caps tm_caps:ibv_tm_caps cq_mod_caps:ibv_cq_moderation_caps max_dm_size
    pci_atomic_caps:ibv_pci_atomic_caps xrc_odp_caps phys_port_cnt_ex`,
  ],
  ["struct ibv_query_device_ex_input", "comp_mask"],
  [
    "struct ibv_port_attr",
    `state max_mtu active_mtu gid_tbl_len port_cap_flags max_msg_sz
    bad_pkey_cntr qkey_viol_cntr pkey_tbl_len lid sm_lid lmc max_vl_num sm_sl subnet_timeout
    init_type_reply active_width active_speed phys_state link_layer flags port_cap_flags2`,
  ],
  ["struct ibv_gid_entry", "gid:ibv_gid gid_index port_num gid_type ndev_ifindex"],
  [
    "struct ibv_wc",
    `wr_id status opcode vendor_err byte_len imm_data invalidated_rkey qp_num
    src_qp wc_flags pkey_index slid sl dlid_path_bits`,
  ],
  ["struct ibv_sge", "addr length lkey"],
  ["struct ibv_mw_bind_info", "mr addr length mw_access_flags"],
  [
    "struct ibv_send_wr",
    `wr_id next sg_list num_sge opcode send_flags imm_data invalidate_rkey
    wr wr.rdma wr.rdma.remote_addr wr.rdma.rkey wr.atomic wr.atomic.remote_addr
    wr.atomic.compare_add wr.atomic.swap wr.atomic.rkey wr.ud wr.ud.ah wr.ud.remote_qpn
    wr.ud.remote_qkey qp_type qp_type.xrc qp_type.xrc.remote_srqn bind_mw bind_mw.mw
    bind_mw.rkey bind_mw.bind_info:ibv_mw_bind_info tso tso.hdr tso.hdr_sz tso.mss`,
  ],
  ["struct ibv_recv_wr", "wr_id next sg_list num_sge"],
  ["struct ibv_qp_cap", "max_send_wr max_recv_wr max_send_sge max_recv_sge max_inline_data"],
  ["struct ibv_global_route", "dgid:ibv_gid flow_label sgid_index hop_limit traffic_class"],
  [
    "struct ibv_ah_attr",
    "grh:ibv_global_route dlid sl src_path_bits static_rate is_global port_num",
  ],
  [
    "struct ibv_qp_attr",
    `qp_state cur_qp_state path_mtu path_mig_state qkey rq_psn sq_psn
    dest_qp_num qp_access_flags cap:ibv_qp_cap ah_attr:ibv_ah_attr alt_ah_attr:ibv_ah_attr
    pkey_index alt_pkey_index en_sqd_async_notify sq_draining max_rd_atomic max_dest_rd_atomic
    min_rnr_timer port_num timeout retry_cnt rnr_retry alt_port_num alt_timeout rate_limit`,
  ],
  ["struct ibv_qp_init_attr", "qp_context send_cq recv_cq srq cap:ibv_qp_cap qp_type sq_sig_all"],
  ["struct ibv_srq_attr", "max_wr max_sge srq_limit"],
  ["struct ibv_srq_init_attr", "srq_context attr:ibv_srq_attr"],
  ["struct ibv_grh", "version_tclass_flow paylen next_hdr hop_limit sgid:ibv_gid dgid:ibv_gid"],
  [
    "struct ibv_async_event",
    `element element.cq element.qp element.srq element.wq
    element.port_num event_type`,
  ],
  ["struct ibv_comp_channel", "context fd refcnt"],
  [
    "struct ibv_cq",
    `context channel cq_context handle cqe mutex cond comp_events_completed
    async_events_completed`,
  ],
  [
    "struct ibv_qp",
    `context qp_context pd send_cq recv_cq srq handle qp_num state qp_type mutex
    cond events_completed`,
  ],
  ["struct ibv_srq", "context srq_context pd handle mutex cond events_completed"],
  ["struct ibv_pd", "context handle"],
  ["struct ibv_mr", "context pd addr length handle lkey rkey"],
  ["struct ibv_mw", "context pd rkey handle type"],
  ["struct ibv_mw_bind", "wr_id send_flags bind_info:ibv_mw_bind_info"],
  ["struct ibv_ah", "context pd handle"],
  // extended verbs: QPs and CQs with function-pointer post/poll, XRC, the open/init attributes
  [
    "struct ibv_qp_ex",
    `qp_base comp_mask wr_id wr_flags wr_atomic_cmp_swp wr_atomic_fetch_add wr_bind_mw
    wr_local_inv wr_rdma_read wr_rdma_write wr_rdma_write_imm wr_send wr_send_imm wr_send_inv
    wr_send_tso wr_set_ud_addr wr_set_xrc_srqn wr_set_inline_data wr_set_inline_data_list
    wr_set_sge wr_set_sge_list wr_start wr_complete wr_abort wr_atomic_write`,
  ],
  [
    "struct ibv_cq_ex",
    `context channel cq_context handle cqe comp_mask status wr_id start_poll next_poll
    end_poll read_opcode read_vendor_err read_byte_len read_imm_data read_qp_num read_src_qp
    read_wc_flags read_slid read_sl read_dlid_path_bits read_completion_ts read_cvlan
    read_flow_tag read_tm_info read_completion_wallclock_ns`,
  ],
  ["struct ibv_poll_cq_attr", "comp_mask"],
  [
    "struct ibv_cq_init_attr_ex",
    "cqe cq_context channel comp_vector wc_flags comp_mask flags parent_domain",
  ],
  [
    "struct ibv_qp_init_attr_ex",
    `qp_context send_cq recv_cq srq cap:ibv_qp_cap qp_type sq_sig_all comp_mask pd xrcd
    create_flags max_tso_header rwq_ind_tbl rx_hash_conf source_qpn send_ops_flags`,
  ],
  ["struct ibv_xrcd_init_attr", "comp_mask fd oflags"],
  ["struct ibv_xrcd", "context"],
  ["struct ibv_tm_cap", "max_num_tags max_ops"],
  [
    "struct ibv_srq_init_attr_ex",
    "srq_context attr:ibv_srq_attr comp_mask srq_type pd xrcd cq tm_cap:ibv_tm_cap",
  ],
  ["struct ibv_qp_open_attr", "comp_mask qp_num xrcd qp_context qp_type"],
  ["struct ibv_data_buf", "addr length"],
  // libc
  ["struct sockaddr", "sa_family sa_data"],
  ["struct in_addr", "s_addr"],
  ["struct sockaddr_in", "sin_family sin_port sin_addr:in_addr sin_zero"],
  ["struct in6_addr", "s6_addr s6_addr16 s6_addr32"],
  ["struct sockaddr_in6", "sin6_family sin6_port sin6_flowinfo sin6_addr:in6_addr sin6_scope_id"],
  ["struct sockaddr_storage", "ss_family"],
  [
    "struct addrinfo",
    `ai_flags ai_family ai_socktype ai_protocol ai_addrlen ai_addr
    ai_canonname ai_next`,
  ],
  ["struct epoll_event", "events data data.ptr data.fd data.u32 data.u64"],
  ["struct timespec", "tv_sec tv_nsec"],
  // librdmacm (and AF_IB addresses from <infiniband/ib.h>)
  [
    "struct ib_addr",
    `sib_raw sib_addr8 sib_addr16 sib_addr32 sib_addr64 sib_subnet_prefix
    sib_interface_id`,
  ],
  [
    "struct sockaddr_ib",
    `sib_family sib_pkey sib_flowinfo sib_addr:ib_addr sib_sid sib_sid_mask
    sib_scope_id`,
  ],
  ["struct rdma_event_channel", "fd"],
  ["struct rdma_ib_addr", "sgid:ibv_gid dgid:ibv_gid pkey"],
  [
    "struct rdma_addr",
    `src_addr:sockaddr src_sin:sockaddr_in src_sin6:sockaddr_in6
    src_storage:sockaddr_storage dst_addr:sockaddr dst_sin:sockaddr_in dst_sin6:sockaddr_in6
    dst_storage:sockaddr_storage addr addr.ibaddr:rdma_ib_addr`,
  ],
  [
    "struct ibv_sa_path_rec",
    `dgid:ibv_gid sgid:ibv_gid dlid slid raw_traffic flow_label hop_limit
    traffic_class reversible numb_path pkey sl mtu_selector mtu rate_selector rate
    packet_life_time_selector packet_life_time preference`,
  ],
  [
    "struct ibv_path_record",
    `service_id dgid:ibv_gid sgid:ibv_gid dlid slid flowlabel_hoplimit tclass
    reversible_numpath pkey qosclass_sl mtu rate packetlifetime preference reserved`,
  ],
  ["struct ibv_path_data", "flags reserved path:ibv_path_record"],
  ["struct rdma_route", "addr:rdma_addr path_rec num_paths"],
  [
    "struct rdma_cm_id",
    `verbs channel context qp route:rdma_route ps port_num event
    send_cq_channel send_cq recv_cq_channel recv_cq srq pd qp_type`,
  ],
  [
    "struct rdma_conn_param",
    `private_data private_data_len responder_resources initiator_depth
    flow_control retry_count rnr_retry_count srq qp_num`,
  ],
  ["struct rdma_ud_param", "private_data private_data_len ah_attr:ibv_ah_attr qp_num qkey"],
  [
    "struct rdma_cm_event",
    `id listen_id event status param param.conn:rdma_conn_param
    param.ud:rdma_ud_param`,
  ],
  ["struct rdma_cm_join_mc_attr_ex", "comp_mask join_flags addr"],
  [
    "struct rdma_addrinfo",
    `ai_flags ai_family ai_qp_type ai_port_space ai_src_len ai_dst_len
    ai_src_addr ai_dst_addr ai_src_canonname ai_dst_canonname ai_route_len ai_route
    ai_connect_len ai_connect ai_next`,
  ],
];

const HEADERS = [
  "stddef.h",
  "stdint.h",
  "time.h",
  "sys/socket.h",
  "sys/epoll.h",
  "netinet/in.h",
  "netdb.h",
  "infiniband/verbs.h",
  "infiniband/ib.h",
  "infiniband/sa.h",
  "rdma/rdma_cma.h",
];

/** Where the (architecture independent) rdma-core headers live; a cross build uses them too. */
const RDMA_INCLUDE = process.env.RDMA_INCLUDE ?? "/usr/include";
const SECTION = "layout_probe";
const TRIPLE: Record<LayoutArch, string> = {
  x86_64: "x86_64-linux-gnu",
  aarch64: "aarch64-linux-gnu",
};
const ARCHES: readonly LayoutArch[] = ["x86_64", "aarch64"];
const ROOT = join(dirname(new URL(import.meta.url).pathname), "..");

/** The architecture of this machine, or undefined when there is no table for it. */
export function hostArch(): LayoutArch | undefined {
  return process.arch === "x64" ? "x86_64" : process.arch === "arm64" ? "aarch64" : undefined;
}

/** Every struct with its field paths, `name:type` expanded. */
function structList(): { key: string; ctype: string; fields: string[] }[] {
  const byKey = new Map(STRUCTS.map(([ctype, f]) => [ctype.replace(/^(struct|union) /, ""), f]));
  const expand = (fields: string, prefix: string): string[] =>
    fields.trim().split(/\s+/).flatMap((spec) => {
      const [name, type] = spec.split(":");
      if (type === undefined) return [prefix + name];
      const sub = byKey.get(type);
      if (sub === undefined) throw new Error(`gen-layouts: unknown type "${type}" in "${spec}"`);
      return [prefix + name, ...expand(sub, `${prefix}${name}.`)];
    });
  return STRUCTS.map(([ctype, f]) => ({
    key: ctype.replace(/^(struct|union) /, ""),
    ctype,
    fields: expand(f, ""),
  }));
}

/** The C probe: one `uint32_t` array of size, align, then offset/size per field. */
export function probeSource(): string {
  const rows = structList().map(({ ctype, fields }) =>
    [`  sizeof(${ctype}), _Alignof(${ctype}),`, ...fields.map((f) => `  F(${ctype}, ${f}),`)].join(
      "\n",
    )
  );
  return [
    "#define _GNU_SOURCE",
    ...HEADERS.map((h) => `#include <${h}>`),
    "#define F(T, f) offsetof(T, f), sizeof(((T *)0)->f)",
    `__attribute__((used, section("${SECTION}")))`,
    "const uint32_t layout_values[] = {",
    ...rows,
    "};",
    "",
  ].join("\n");
}

/** The compiler for an arch, or undefined. The host's own `cc` serves the host's arch. */
function compilerFor(arch: LayoutArch): string | undefined {
  const names = [`${TRIPLE[arch]}-gcc`, ...(arch === hostArch() ? ["cc", "gcc", "clang"] : [])];
  return names.find((cc) => spawnSync(cc, ["--version"], { stdio: "ignore" }).status === 0);
}

/** The bytes of one named section of a little-endian ELF64 object file. */
function elfSection(file: Uint8Array, name: string): Uint8Array {
  const v = new DataView(file.buffer, file.byteOffset, file.byteLength);
  if (v.getUint32(0) !== 0x7f454c46 || file[4] !== 2 || file[5] !== 1) {
    throw new Error("gen-layouts: probe object is not a little-endian ELF64 file");
  }
  const shoff = Number(v.getBigUint64(0x28, true));
  const shentsize = v.getUint16(0x3a, true), shnum = v.getUint16(0x3c, true);
  const sh = (i: number) => {
    const o = shoff + i * shentsize;
    return {
      name: v.getUint32(o, true),
      off: Number(v.getBigUint64(o + 24, true)),
      size: Number(v.getBigUint64(o + 32, true)),
    };
  };
  const strtab = sh(v.getUint16(0x3e, true));
  for (let i = 0; i < shnum; i++) {
    const s = sh(i);
    let end = strtab.off + s.name;
    while (file[end] !== 0) end++;
    if (new TextDecoder().decode(file.subarray(strtab.off + s.name, end)) === name) {
      return file.subarray(s.off, s.off + s.size);
    }
  }
  throw new Error(`gen-layouts: section ${name} missing from the probe object`);
}

/** Why the probe cannot be compiled for `arch` here (no compiler, no headers), or undefined. */
export function probeUnavailable(arch: LayoutArch): string | undefined {
  const cc = compilerFor(arch);
  if (cc === undefined) return `no C compiler for ${arch} (${TRIPLE[arch]}-gcc)`;
  if (arch !== hostArch()) return undefined; // cross builds borrow the host's rdma-core headers
  const r = spawnSync(cc, ["-fsyntax-only", "-x", "c", "-"], {
    input: HEADERS.map((h) => `#include <${h}>\n`).join(""),
    encoding: "utf8",
  });
  return r.status === 0
    ? undefined
    : `C headers missing (libibverbs-dev, librdmacm-dev): ${r.stderr.trim()}`;
}

/** Compiles the probe for `arch` (without running it) and returns the measured table. */
export function probeLayouts(arch: LayoutArch): LayoutTable {
  const cc = compilerFor(arch);
  if (cc === undefined) {
    throw new Error(`gen-layouts: no C compiler for ${arch} (${TRIPLE[arch]}-gcc)`);
  }
  const dir = mkdtempSync(join(tmpdir(), "rdma-layout-"));
  try {
    const args = ["-c", "-O0", "-std=gnu11", "-o", join(dir, "probe.o"), join(dir, "probe.c")];
    if (arch !== hostArch()) {
      // glibc headers come from the cross toolchain; only rdma-core's are borrowed from the host.
      mkdirSync(join(dir, "inc"));
      for (const d of ["infiniband", "rdma"]) {
        symlinkSync(join(RDMA_INCLUDE, d), join(dir, "inc", d));
      }
      args.unshift("-I", join(dir, "inc"));
    }
    writeFileSync(join(dir, "probe.c"), probeSource());
    execFileSync(cc, args, { stdio: ["ignore", "ignore", "pipe"] });
    const object = new Uint8Array(readFileSync(join(dir, "probe.o"))); // a copy, not a pooled Buffer
    const values = new Uint32Array(elfSection(object, SECTION).slice().buffer);
    let i = 0;
    const table: Record<string, StructLayout> = {};
    for (const { key, fields } of structList()) {
      const size = values[i++], align = values[i++];
      const out: Record<string, FieldLayout> = {};
      for (const f of fields) out[f] = { offset: values[i++], size: values[i++] };
      table[key] = { size, align, fields: out };
    }
    if (i !== values.length) {
      throw new Error(`gen-layouts: probe has ${values.length} values, expected ${i}`);
    }
    return table;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Every difference between two tables, one line each; empty when they agree. */
export function diffLayouts(want: LayoutTable, got: LayoutTable, label = "table"): string[] {
  const out: string[] = [];
  const keys = (a: object, b: object) => [...new Set([...Object.keys(a), ...Object.keys(b)])];
  for (const s of keys(want, got)) {
    const w = want[s], g = got[s];
    if (w === undefined || g === undefined) {
      out.push(`${label}: struct ${s} only in ${w === undefined ? "new" : "checked-in"} table`);
      continue;
    }
    for (const p of ["size", "align"] as const) {
      if (w[p] !== g[p]) out.push(`${label}: ${s} ${p} ${w[p]} -> ${g[p]}`);
    }
    for (const f of keys(w.fields, g.fields)) {
      const wf = w.fields[f], gf = g.fields[f];
      if (wf === undefined || gf === undefined) {
        out.push(`${label}: ${s}.${f} only in ${wf === undefined ? "new" : "checked-in"} table`);
      } else if (wf.offset !== gf.offset || wf.size !== gf.size) {
        out.push(
          `${label}: ${s}.${f} offset/size ${wf.offset}/${wf.size} -> ${gf.offset}/${gf.size}`,
        );
      }
    }
  }
  return out;
}

/** Struct and field names that differ between two tables (numbers ignored). */
function keyDiff(a: LayoutTable, b: LayoutTable): string[] {
  const shape = (t: LayoutTable) =>
    new Set(
      Object.entries(t).flatMap(([s, l]) => [s, ...Object.keys(l.fields).map((f) => `${s}.${f}`)]),
    );
  const x = shape(a), y = shape(b);
  return [...x].filter((k) => !y.has(k)).concat([...y].filter((k) => !x.has(k)));
}

/** The installed rdma-core version, from the Debian package of the headers. */
function rdmaCoreVersion(): string {
  const r = spawnSync("dpkg-query", ["-W", "-f", "${Version}", "libibverbs-dev"], {
    encoding: "utf8",
  });
  return r.status === 0 && r.stdout
    ? `rdma-core ${r.stdout.replace(/-[^-]*$/, "")} (libibverbs-dev ${r.stdout})`
    : "rdma-core (version unknown)";
}

const exportName = (arch: LayoutArch) => arch.toUpperCase();
const tablePath = (arch: LayoutArch) => join(ROOT, "types", "layouts", `${arch}.ts`);
const prop = (k: string) => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k));

/** The TypeScript module for one table (run through `deno fmt` afterwards). */
function render(arch: LayoutArch, table: LayoutTable): string {
  const lines = [
    `// Generated by \`deno run -A scripts/gen-layouts.ts\` (or \`bun scripts/gen-layouts.ts\`) from the`,
    `// ${rdmaCoreVersion()} and libc headers for ${arch}. Do not edit by hand: regenerate.`,
    "",
    'import type { LayoutTable } from "../layout.ts";',
    "",
    `/** Struct layouts for ${arch} Linux. */`,
    `export const ${exportName(arch)} = {`,
  ];
  for (const [s, l] of Object.entries(table)) {
    lines.push(
      `  ${prop(s)}: {`,
      `    size: ${l.size},`,
      `    align: ${l.align},`,
      "    fields: {",
    );
    for (const [f, v] of Object.entries(l.fields)) {
      lines.push(`      ${prop(f)}: { offset: ${v.offset}, size: ${v.size} },`);
    }
    lines.push("    },", "  },");
  }
  lines.push("} as const satisfies LayoutTable;", "");
  return lines.join("\n");
}

/** `deno fmt` for generated files: this runtime when it is Deno, else the project's or PATH's. */
function denoFmt(file: string): void {
  const local = join(ROOT, "node_modules", ".bin", "deno");
  const deno = /deno(\.exe)?$/.test(process.execPath)
    ? process.execPath
    : existsSync(local)
    ? local
    : "deno";
  const r = spawnSync(deno, ["fmt", "--quiet", file], { stdio: "inherit" });
  if (r.status !== 0) {
    console.warn(`gen-layouts: could not run deno fmt on ${file}; run it by hand`);
  }
}

async function checkedIn(arch: LayoutArch): Promise<LayoutTable | undefined> {
  if (!existsSync(tablePath(arch))) return undefined;
  const mod = await import(new URL(`../types/layouts/${arch}.ts`, import.meta.url).href);
  return mod[exportName(arch)] as LayoutTable;
}

async function main(args: string[]): Promise<number> {
  const check = args.includes("--check");
  const tables = new Map<LayoutArch, LayoutTable>();
  for (const arch of ARCHES) {
    if (compilerFor(arch) === undefined) {
      console.warn(`gen-layouts: skipping ${arch}: no compiler (install ${TRIPLE[arch]}-gcc)`);
      continue;
    }
    tables.set(arch, probeLayouts(arch));
  }
  if (tables.size === 0) {
    console.error("gen-layouts: no C compiler for any architecture");
    return 1;
  }
  const problems: string[] = [];
  for (const arch of ARCHES) {
    const old = await checkedIn(arch);
    const got = tables.get(arch);
    if (check && got) problems.push(...diffLayouts(old ?? {}, got, arch));
    for (const other of ARCHES) {
      const o = tables.get(other) ?? await checkedIn(other);
      if (got && o && other !== arch) {
        problems.push(...keyDiff(got, o).map((k) => `${arch} vs ${other}: ${k} in only one`));
      }
    }
  }
  if (problems.length > 0) {
    console.error([...new Set(problems)].join("\n"));
    if (check) {
      console.error("gen-layouts: layouts differ; run `deno run -A scripts/gen-layouts.ts`");
    }
    return 1;
  }
  if (check) {
    console.log(`gen-layouts: ${[...tables.keys()].join(", ")} up to date`);
    return 0;
  }
  for (const [arch, table] of tables) {
    mkdirSync(dirname(tablePath(arch)), { recursive: true });
    writeFileSync(tablePath(arch), render(arch, table));
    denoFmt(tablePath(arch));
    console.log(
      `gen-layouts: wrote types/layouts/${arch}.ts (${Object.keys(table).length} structs)`,
    );
  }
  return 0;
}

if (import.meta.main) process.exitCode = await main(process.argv.slice(2));
