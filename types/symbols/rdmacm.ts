/**
 * librdmacm: the exported functions of `rdma_cma.h` this library calls.
 * (`rdma_verbs.h` is all inline and is not bound: its helpers are methods of `CmId` over the
 * library's own QP, MRs and CQs. `rdma_create_ep`/`rdma_get_request` are not bound either: they
 * would create librdmacm's hidden PD and CQs and block; `createEndpoint` and `getRequest` do the
 * same with the library's objects.)
 *
 * @module
 */

import type { SymbolTable } from "../ctypes.ts";

/** Every librdmacm function this library calls, with its C prototype. */
export const RDMACM = {
  rdma_create_event_channel: {
    args: [],
    result: "pointer",
    c: "struct rdma_event_channel *rdma_create_event_channel(void)",
  },
  rdma_destroy_event_channel: {
    args: ["pointer"],
    result: "void",
    c: "void rdma_destroy_event_channel(struct rdma_event_channel *channel)",
  },
  rdma_create_id: {
    args: ["pointer", "pointer", "pointer", "i32"],
    result: "i32",
    c: "int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context, enum rdma_port_space ps)",
  },
  rdma_destroy_id: {
    args: ["pointer"],
    result: "i32",
    c: "int rdma_destroy_id(struct rdma_cm_id *id)",
  },
  rdma_migrate_id: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)",
  },
  rdma_bind_addr: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)",
  },
  rdma_resolve_addr: {
    args: ["pointer", "pointer", "pointer", "i32"],
    result: "i32",
    c: "int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)",
  },
  rdma_resolve_route: {
    args: ["pointer", "i32"],
    result: "i32",
    c: "int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)",
  },
  rdma_create_qp: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)",
  },
  rdma_destroy_qp: {
    args: ["pointer"],
    result: "void",
    c: "void rdma_destroy_qp(struct rdma_cm_id *id)",
  },
  rdma_init_qp_attr: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)",
  },
  rdma_connect: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)",
  },
  rdma_establish: {
    args: ["pointer"],
    result: "i32",
    c: "int rdma_establish(struct rdma_cm_id *id)",
    optional: true,
  },
  rdma_listen: {
    args: ["pointer", "i32"],
    result: "i32",
    c: "int rdma_listen(struct rdma_cm_id *id, int backlog)",
  },
  rdma_accept: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)",
  },
  rdma_reject: {
    args: ["pointer", "pointer", "u8"],
    result: "i32",
    c: "int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)",
  },
  rdma_notify: {
    args: ["pointer", "i32"],
    result: "i32",
    c: "int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)",
  },
  rdma_disconnect: {
    args: ["pointer"],
    result: "i32",
    c: "int rdma_disconnect(struct rdma_cm_id *id)",
  },
  rdma_join_multicast: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)",
  },
  rdma_join_multicast_ex: {
    args: ["pointer", "pointer", "pointer"],
    result: "i32",
    c: "int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)",
    optional: true,
  },
  rdma_leave_multicast: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)",
  },
  rdma_get_cm_event: {
    args: ["pointer", "pointer"],
    result: "i32",
    c: "int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)",
  },
  rdma_ack_cm_event: {
    args: ["pointer"],
    result: "i32",
    c: "int rdma_ack_cm_event(struct rdma_cm_event *event)",
  },
  rdma_set_option: {
    args: ["pointer", "i32", "i32", "pointer", "usize"],
    result: "i32",
    c: "int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)",
  },
  rdma_get_src_port: {
    args: ["pointer"],
    result: "u16",
    c: "__be16 rdma_get_src_port(struct rdma_cm_id *id)",
  },
  rdma_get_dst_port: {
    args: ["pointer"],
    result: "u16",
    c: "__be16 rdma_get_dst_port(struct rdma_cm_id *id)",
  },
  rdma_getaddrinfo: {
    args: ["pointer", "pointer", "pointer", "pointer"],
    result: "i32",
    c: "int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)",
  },
  rdma_freeaddrinfo: {
    args: ["pointer"],
    result: "void",
    c: "void rdma_freeaddrinfo(struct rdma_addrinfo *res)",
  },
  rdma_get_devices: {
    args: ["pointer"],
    result: "pointer",
    c: "struct ibv_context **rdma_get_devices(int *num_devices)",
  },
  rdma_free_devices: {
    args: ["pointer"],
    result: "void",
    c: "void rdma_free_devices(struct ibv_context **list)",
  },
  rdma_event_str: {
    args: ["i32"],
    result: "pointer",
    c: "const char *rdma_event_str(enum rdma_cm_event_type event)",
  },
} as const satisfies SymbolTable;
