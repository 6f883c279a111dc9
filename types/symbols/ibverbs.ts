/**
 * libibverbs: the exported functions, and the signatures of the inline verbs that
 * `verbs.h` reaches through `ibv_context.ops` / `verbs_context` function pointers.
 *
 * @module
 */

import type { FunctionSpec, SymbolTable } from "../ctypes.ts";

/** Every exported libibverbs function this library calls, with its C prototype. */
export const IBVERBS = {
  ibv_get_device_list: {
    args: ["pointer"],
    result: "pointer",
    c: "struct ibv_device **ibv_get_device_list(int *num_devices)",
  },
  ibv_free_device_list: {
    args: ["pointer"],
    result: "void",
    c: "void ibv_free_device_list(struct ibv_device **list)",
  },
  ibv_get_device_name: {
    args: ["pointer"],
    result: "pointer",
    c: "const char *ibv_get_device_name(struct ibv_device *device)",
  },
  ibv_get_device_guid: {
    args: ["pointer"],
    result: "u64",
    c: "__be64 ibv_get_device_guid(struct ibv_device *device)",
  },
  ibv_get_device_index: {
    args: ["pointer"],
    result: "i32",
    c: "int ibv_get_device_index(struct ibv_device *device)",
  },
  ibv_open_device: {
    args: ["pointer"],
    result: "pointer",
    c: "struct ibv_context *ibv_open_device(struct ibv_device *device)",
  },
  ibv_close_device: {
    args: ["pointer"],
    result: "i32",
    c: "int ibv_close_device(struct ibv_context *context)",
  },
  ibv_query_device: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)",
  },
  ibv_query_port: {
    args: ["pointer", "u8", "pointer"],
    result: "i32",
    c: "int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr) /* compat only: use verbs_context.query_port */",
  },
  ibv_query_gid: {
    args: ["pointer", "u8", "i32", "pointer"],
    result: "i32",
    c: "int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)",
  },
  _ibv_query_gid_ex: {
    args: ["pointer", "u32", "u32", "pointer", "u32", "usize"],
    result: "i32",
    c: "int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index, struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)",
    optional: true,
  },
  _ibv_query_gid_table: {
    args: ["pointer", "pointer", "usize", "u32", "usize"],
    result: "isize",
    c: "ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries, size_t max_entries, uint32_t flags, size_t entry_size)",
    optional: true,
  },
  ibv_query_pkey: {
    args: ["pointer", "u8", "i32", "pointer"],
    result: "i32",
    c: "int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)",
  },
  ibv_get_pkey_index: {
    args: ["pointer", "u8", "u16"],
    result: "i32",
    c: "int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)",
  },
  ibv_get_async_event: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)",
  },
  ibv_ack_async_event: {
    args: ["pointer"],
    result: "void",
    c: "void ibv_ack_async_event(struct ibv_async_event *event)",
  },
  ibv_alloc_pd: {
    args: ["pointer"],
    result: "pointer",
    c: "struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)",
  },
  ibv_dealloc_pd: { args: ["pointer"], result: "i32", c: "int ibv_dealloc_pd(struct ibv_pd *pd)" },
  ibv_reg_mr_iova2: {
    args: ["pointer", "pointer", "usize", "u64", "u32"],
    result: "pointer",
    c: "struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)",
  },
  ibv_rereg_mr: {
    args: ["pointer", "i32", "pointer", "pointer", "usize", "i32"],
    result: "i32",
    c: "int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)",
  },
  ibv_dereg_mr: { args: ["pointer"], result: "i32", c: "int ibv_dereg_mr(struct ibv_mr *mr)" },
  ibv_reg_dmabuf_mr: {
    args: ["pointer", "u64", "usize", "u64", "i32", "i32"],
    result: "pointer",
    c: "struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access)",
    optional: true,
  },
  ibv_create_comp_channel: {
    args: ["pointer"],
    result: "pointer",
    c: "struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)",
  },
  ibv_destroy_comp_channel: {
    args: ["pointer"],
    result: "i32",
    c: "int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)",
  },
  ibv_create_cq: {
    args: ["pointer", "i32", "pointer", "pointer", "i32"],
    result: "pointer",
    c: "struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context, struct ibv_comp_channel *channel, int comp_vector)",
  },
  ibv_resize_cq: {
    args: ["pointer", "i32"],
    result: "i32",
    c: "int ibv_resize_cq(struct ibv_cq *cq, int cqe)",
  },
  ibv_destroy_cq: { args: ["pointer"], result: "i32", c: "int ibv_destroy_cq(struct ibv_cq *cq)" },
  ibv_get_cq_event: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)",
    hot: true,
  },
  ibv_ack_cq_events: {
    args: ["pointer", "u32"],
    result: "void",
    c: "void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)",
    hot: true,
  },
  ibv_create_srq: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr)",
  },
  ibv_modify_srq: {
    args: ["pointer", "pointer", "i32"],
    result: "i32",
    c: "int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)",
  },
  ibv_query_srq: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)",
  },
  ibv_destroy_srq: {
    args: ["pointer"],
    result: "i32",
    c: "int ibv_destroy_srq(struct ibv_srq *srq)",
  },
  ibv_create_qp: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)",
  },
  ibv_modify_qp: {
    args: ["pointer", "pointer", "i32"],
    result: "i32",
    c: "int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)",
  },
  ibv_query_qp: {
    args: ["pointer", "pointer", "i32", "pointer"],
    result: "i32",
    c: "int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, struct ibv_qp_init_attr *init_attr)",
  },
  ibv_destroy_qp: { args: ["pointer"], result: "i32", c: "int ibv_destroy_qp(struct ibv_qp *qp)" },
  ibv_query_qp_data_in_order: {
    args: ["pointer", "i32", "u32"],
    result: "i32",
    c: "int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)",
    optional: true,
  },
  ibv_qp_to_qp_ex: {
    args: ["pointer"],
    result: "pointer",
    c: "struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)",
    optional: true,
  },
  ibv_create_ah: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)",
  },
  ibv_init_ah_from_wc: {
    args: ["pointer", "u8", "pointer", "pointer", "pointer"],
    result: "i32",
    c: "int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc, struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)",
  },
  ibv_create_ah_from_wc: {
    args: ["pointer", "pointer", "pointer", "u8"],
    result: "pointer",
    c: "struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port_num)",
  },
  ibv_destroy_ah: { args: ["pointer"], result: "i32", c: "int ibv_destroy_ah(struct ibv_ah *ah)" },
  ibv_attach_mcast: {
    args: ["pointer", "pointer", "u16"],
    result: "i32",
    c: "int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)",
  },
  ibv_detach_mcast: {
    args: ["pointer", "pointer", "u16"],
    result: "i32",
    c: "int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)",
  },
  ibv_fork_init: { args: [], result: "i32", c: "int ibv_fork_init(void)" },
  ibv_wc_status_str: {
    args: ["i32"],
    result: "pointer",
    c: "const char *ibv_wc_status_str(enum ibv_wc_status status)",
  },
  ibv_event_type_str: {
    args: ["i32"],
    result: "pointer",
    c: "const char *ibv_event_type_str(enum ibv_event_type event)",
  },
  ibv_node_type_str: {
    args: ["i32"],
    result: "pointer",
    c: "const char *ibv_node_type_str(enum ibv_node_type node_type)",
  },
  ibv_port_state_str: {
    args: ["i32"],
    result: "pointer",
    c: "const char *ibv_port_state_str(enum ibv_port_state port_state)",
  },
  ibv_rate_to_mbps: { args: ["i32"], result: "i32", c: "int ibv_rate_to_mbps(enum ibv_rate rate)" },
} as const satisfies SymbolTable;

/**
 * The inline verbs of `verbs.h`, which are not exported symbols: they are
 * function pointers in `ibv_context.ops` (and `verbs_context` for the extended
 * ones), in `struct ibv_qp_ex` (the `ibv_wr_*` API) and in `struct ibv_cq_ex`
 * (`ibv_start_poll` and the `ibv_wc_read_*` accessors), called with these signatures.
 */
export const IBVERBS_OPS = {
  poll_cq: {
    args: ["pointer", "i32", "pointer"],
    result: "i32",
    c: "int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)",
  },
  req_notify_cq: {
    args: ["pointer", "i32"],
    result: "i32",
    c: "int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only)",
  },
  post_send: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)",
  },
  post_recv: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)",
  },
  post_srq_recv: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int (*post_srq_recv)(struct ibv_srq *srq, struct ibv_recv_wr *recv_wr, struct ibv_recv_wr **bad_recv_wr)",
  },
  alloc_mw: {
    args: ["pointer", "i32"],
    result: "pointer",
    c: "struct ibv_mw *(*alloc_mw)(struct ibv_pd *pd, enum ibv_mw_type type)",
  },
  dealloc_mw: { args: ["pointer"], result: "i32", c: "int (*dealloc_mw)(struct ibv_mw *mw)" },
  bind_mw: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int (*bind_mw)(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)",
  },
  query_port: {
    args: ["pointer", "u8", "pointer", "usize"],
    result: "i32",
    c: "int (*query_port)(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr, size_t port_attr_len) /* verbs_context */",
  },
  query_device_ex: {
    args: ["pointer", "pointer", "pointer", "usize"],
    result: "i32",
    c: "int (*query_device_ex)(struct ibv_context *context, const struct ibv_query_device_ex_input *input, struct ibv_device_attr_ex *attr, size_t attr_size) /* verbs_context */",
  },
  create_cq_ex: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *context, struct ibv_cq_init_attr_ex *init_attr) /* verbs_context */",
  },
  create_qp_ex: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_qp *(*create_qp_ex)(struct ibv_context *context, struct ibv_qp_init_attr_ex *qp_init_attr_ex) /* verbs_context */",
  },
  open_xrcd: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_xrcd *(*open_xrcd)(struct ibv_context *context, struct ibv_xrcd_init_attr *xrcd_init_attr) /* verbs_context */",
  },
  close_xrcd: {
    args: ["pointer"],
    result: "i32",
    c: "int (*close_xrcd)(struct ibv_xrcd *xrcd) /* verbs_context */",
  },
  create_srq_ex: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_srq *(*create_srq_ex)(struct ibv_context *context, struct ibv_srq_init_attr_ex *srq_init_attr_ex) /* verbs_context */",
  },
  get_srq_num: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int (*get_srq_num)(struct ibv_srq *srq, uint32_t *srq_num) /* verbs_context */",
  },
  open_qp: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "struct ibv_qp *(*open_qp)(struct ibv_context *context, struct ibv_qp_open_attr *attr) /* verbs_context */",
  },
  advise_mr: {
    args: ["pointer", "i32", "u32", "pointer", "u32"],
    result: "i32",
    c: "int (*advise_mr)(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sges) /* verbs_context */",
  },
  alloc_null_mr: {
    args: ["pointer"],
    result: "pointer",
    c: "struct ibv_mr *(*alloc_null_mr)(struct ibv_pd *pd) /* verbs_context */",
  },
  // struct ibv_qp_ex: the ibv_wr_* work-request builders (ibv_wr_start ... ibv_wr_complete)
  wr_start: { args: ["pointer"], result: "void", c: "void (*wr_start)(struct ibv_qp_ex *qp)" },
  wr_complete: { args: ["pointer"], result: "i32", c: "int (*wr_complete)(struct ibv_qp_ex *qp)" },
  wr_abort: { args: ["pointer"], result: "void", c: "void (*wr_abort)(struct ibv_qp_ex *qp)" },
  wr_send: { args: ["pointer"], result: "void", c: "void (*wr_send)(struct ibv_qp_ex *qp)" },
  wr_send_imm: {
    args: ["pointer", "u32"],
    result: "void",
    c: "void (*wr_send_imm)(struct ibv_qp_ex *qp, __be32 imm_data)",
  },
  wr_send_inv: {
    args: ["pointer", "u32"],
    result: "void",
    c: "void (*wr_send_inv)(struct ibv_qp_ex *qp, uint32_t invalidate_rkey)",
  },
  wr_rdma_write: {
    args: ["pointer", "u32", "u64"],
    result: "void",
    c: "void (*wr_rdma_write)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)",
  },
  wr_rdma_write_imm: {
    args: ["pointer", "u32", "u64", "u32"],
    result: "void",
    c: "void (*wr_rdma_write_imm)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, __be32 imm_data)",
  },
  wr_rdma_read: {
    args: ["pointer", "u32", "u64"],
    result: "void",
    c: "void (*wr_rdma_read)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)",
  },
  wr_atomic_cmp_swp: {
    args: ["pointer", "u32", "u64", "u64", "u64"],
    result: "void",
    c: "void (*wr_atomic_cmp_swp)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t compare, uint64_t swap)",
  },
  wr_atomic_fetch_add: {
    args: ["pointer", "u32", "u64", "u64"],
    result: "void",
    c: "void (*wr_atomic_fetch_add)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t add)",
  },
  wr_bind_mw: {
    args: ["pointer", "pointer", "u32", "pointer"],
    result: "void",
    c: "void (*wr_bind_mw)(struct ibv_qp_ex *qp, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *bind_info)",
  },
  wr_local_inv: {
    args: ["pointer", "u32"],
    result: "void",
    c: "void (*wr_local_inv)(struct ibv_qp_ex *qp, uint32_t invalidate_rkey)",
  },
  wr_set_sge: {
    args: ["pointer", "u32", "u64", "u32"],
    result: "void",
    c: "void (*wr_set_sge)(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length)",
  },
  wr_set_sge_list: {
    args: ["pointer", "usize", "pointer"],
    result: "void",
    c: "void (*wr_set_sge_list)(struct ibv_qp_ex *qp, size_t num_sge, const struct ibv_sge *sg_list)",
  },
  wr_set_inline_data: {
    args: ["pointer", "pointer", "usize"],
    result: "void",
    c: "void (*wr_set_inline_data)(struct ibv_qp_ex *qp, void *addr, size_t length)",
  },
  wr_set_inline_data_list: {
    args: ["pointer", "usize", "pointer"],
    result: "void",
    c: "void (*wr_set_inline_data_list)(struct ibv_qp_ex *qp, size_t num_buf, const struct ibv_data_buf *buf_list)",
  },
  wr_set_ud_addr: {
    args: ["pointer", "pointer", "u32", "u32"],
    result: "void",
    c: "void (*wr_set_ud_addr)(struct ibv_qp_ex *qp, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)",
  },
  wr_set_xrc_srqn: {
    args: ["pointer", "u32"],
    result: "void",
    c: "void (*wr_set_xrc_srqn)(struct ibv_qp_ex *qp, uint32_t remote_srqn)",
  },
  // struct ibv_cq_ex: ibv_start_poll / ibv_next_poll / ibv_end_poll and the ibv_wc_read_* accessors
  start_poll: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int (*start_poll)(struct ibv_cq_ex *current, struct ibv_poll_cq_attr *attr)",
  },
  next_poll: { args: ["pointer"], result: "i32", c: "int (*next_poll)(struct ibv_cq_ex *current)" },
  end_poll: { args: ["pointer"], result: "void", c: "void (*end_poll)(struct ibv_cq_ex *current)" },
  read_opcode: {
    args: ["pointer"],
    result: "i32",
    c: "enum ibv_wc_opcode (*read_opcode)(struct ibv_cq_ex *current)",
  },
  read_vendor_err: {
    args: ["pointer"],
    result: "u32",
    c: "uint32_t (*read_vendor_err)(struct ibv_cq_ex *current)",
  },
  read_byte_len: {
    args: ["pointer"],
    result: "u32",
    c: "uint32_t (*read_byte_len)(struct ibv_cq_ex *current)",
  },
  read_imm_data: {
    args: ["pointer"],
    result: "u32",
    c: "__be32 (*read_imm_data)(struct ibv_cq_ex *current)",
  },
  read_qp_num: {
    args: ["pointer"],
    result: "u32",
    c: "uint32_t (*read_qp_num)(struct ibv_cq_ex *current)",
  },
  read_src_qp: {
    args: ["pointer"],
    result: "u32",
    c: "uint32_t (*read_src_qp)(struct ibv_cq_ex *current)",
  },
  read_wc_flags: {
    args: ["pointer"],
    result: "u32",
    c: "unsigned int (*read_wc_flags)(struct ibv_cq_ex *current)",
  },
  read_slid: {
    args: ["pointer"],
    result: "u32",
    c: "uint32_t (*read_slid)(struct ibv_cq_ex *current)",
  },
  read_sl: { args: ["pointer"], result: "u8", c: "uint8_t (*read_sl)(struct ibv_cq_ex *current)" },
  read_dlid_path_bits: {
    args: ["pointer"],
    result: "u8",
    c: "uint8_t (*read_dlid_path_bits)(struct ibv_cq_ex *current)",
  },
  read_completion_ts: {
    args: ["pointer"],
    result: "u64",
    c: "uint64_t (*read_completion_ts)(struct ibv_cq_ex *current)",
  },
  read_completion_wallclock_ns: {
    args: ["pointer"],
    result: "u64",
    c: "uint64_t (*read_completion_wallclock_ns)(struct ibv_cq_ex *current)",
  },
  read_cvlan: {
    args: ["pointer"],
    result: "u16",
    c: "uint16_t (*read_cvlan)(struct ibv_cq_ex *current)",
  },
  read_flow_tag: {
    args: ["pointer"],
    result: "u32",
    c: "uint32_t (*read_flow_tag)(struct ibv_cq_ex *current)",
  },
} as const satisfies Readonly<Record<string, FunctionSpec>>;
