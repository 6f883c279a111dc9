/**
 * The enums, flags and constants of librdmacm (`<rdma/rdma_cma.h>`), each as a
 * frozen name->value object whose keys are the C names without their prefix, the
 * `rdma_event_str` function, and the private-data limits of the connection manager.
 *
 * @module
 */

/** `enum rdma_cm_event_type`: the type of a connection manager event. */
export const CmEventType = {
  ADDR_RESOLVED: 0,
  ADDR_ERROR: 1,
  ROUTE_RESOLVED: 2,
  ROUTE_ERROR: 3,
  CONNECT_REQUEST: 4,
  CONNECT_RESPONSE: 5,
  CONNECT_ERROR: 6,
  UNREACHABLE: 7,
  REJECTED: 8,
  ESTABLISHED: 9,
  DISCONNECTED: 10,
  DEVICE_REMOVAL: 11,
  MULTICAST_JOIN: 12,
  MULTICAST_ERROR: 13,
  ADDR_CHANGE: 14,
  TIMEWAIT_EXIT: 15,
} as const;
Object.freeze(CmEventType);
/** A value of {@link CmEventType}. */
export type CmEventType = typeof CmEventType[keyof typeof CmEventType];

/** `rdma_event_str`: "RDMA_CM_EVENT_..." for a {@link CmEventType}, "UNKNOWN EVENT" otherwise. */
export function cmEventStr(event: number): string {
  for (const [k, v] of Object.entries(CmEventType)) {
    if (v === event) return `RDMA_CM_EVENT_${k}`;
  }
  return "UNKNOWN EVENT";
}

/**
 * `enum rdma_port_space`: the port space of an `rdma_cm_id`. `TCP` and `IB` give
 * connected (RC) ids, `UDP` and `IPOIB` unreliable datagram (UD) ids.
 */
export const PortSpace = { IPOIB: 0x0002, TCP: 0x0106, UDP: 0x0111, IB: 0x013f } as const;
Object.freeze(PortSpace);
/** A value of {@link PortSpace}. */
export type PortSpace = typeof PortSpace[keyof typeof PortSpace];

/**
 * The IB service-id layout of the `RDMA_IB_IP_*`/`RDMA_IB_PS_IB` macros: a service
 * id for an IP port is `IB_IP_PS_TCP | port` (or `IB_IP_PS_UDP | port`). Bigints
 * (64-bit values).
 */
export const IbServiceId = {
  IB_IP_PS_MASK: 0xffffffffffff0000n,
  IB_IP_PORT_MASK: 0x000000000000ffffn,
  IB_IP_PS_TCP: 0x0000000001060000n,
  IB_IP_PS_UDP: 0x0000000001110000n,
  IB_PS_IB: 0x00000000013f0000n,
} as const;
Object.freeze(IbServiceId);

/** `RDMA_UDP_QKEY`: the Q_Key of UD ids in the `RDMA_PS_UDP` port space. */
export const RDMA_UDP_QKEY = 0x01234567;

/**
 * `RDMA_MAX_RESP_RES` and `RDMA_MAX_INIT_DEPTH`: passed as `responder_resources` /
 * `initiator_depth` of `rdma_conn_param`, they ask for the device's maximum.
 */
export const ConnParamMax = { MAX_RESP_RES: 0xff, MAX_INIT_DEPTH: 0xff } as const;
Object.freeze(ConnParamMax);

/** `RAI_*`: the `ai_flags` of `rdma_getaddrinfo` hints. */
export const RaiFlags = { PASSIVE: 0x1, NUMERICHOST: 0x2, NOROUTE: 0x4, FAMILY: 0x8 } as const;
Object.freeze(RaiFlags);
/** A bit of {@link RaiFlags}. */
export type RaiFlags = typeof RaiFlags[keyof typeof RaiFlags];

/** `RDMA_OPTION_ID` / `RDMA_OPTION_IB`: the `level` argument of `rdma_set_option`. */
export const OptionLevel = { ID: 0, IB: 1 } as const;
Object.freeze(OptionLevel);
/** A value of {@link OptionLevel}. */
export type OptionLevel = typeof OptionLevel[keyof typeof OptionLevel];

/**
 * `RDMA_OPTION_ID_*`: the options of level `RDMA_OPTION_ID`. `TOS` takes a `uint8_t`
 * (type of service), `REUSEADDR` and `AFONLY` an `int`, `ACK_TIMEOUT` a `uint8_t`
 * (the QP local ACK timeout exponent).
 */
export const OptionId = { TOS: 0, REUSEADDR: 1, AFONLY: 2, ACK_TIMEOUT: 3 } as const;
Object.freeze(OptionId);
/** A value of {@link OptionId}. */
export type OptionId = typeof OptionId[keyof typeof OptionId];

/** `RDMA_OPTION_IB_*`: the options of level `RDMA_OPTION_IB`; `PATH` takes an array of `struct ibv_path_data`. */
export const OptionIb = { PATH: 1 } as const;
Object.freeze(OptionIb);
/** A value of {@link OptionIb}. */
export type OptionIb = typeof OptionIb[keyof typeof OptionIb];

/**
 * `IBV_PATH_FLAG_*` (`<infiniband/sa.h>`): what a `struct ibv_path_data` of the
 * `RDMA_OPTION_IB_PATH` option describes. The kernel takes the first record flagged
 * `GMP | PRIMARY | BIDIRECTIONAL`.
 */
export const PathFlag = {
  GMP: 0x1,
  PRIMARY: 0x2,
  ALTERNATE: 0x4,
  OUTBOUND: 0x8,
  INBOUND: 0x10,
  INBOUND_REVERSE: 0x20,
  BIDIRECTIONAL: 0x28,
} as const;
Object.freeze(PathFlag);
/** A value of {@link PathFlag}. */
export type PathFlag = typeof PathFlag[keyof typeof PathFlag];

/** `enum rdma_cm_join_mc_attr_mask`: the valid fields of `rdma_cm_join_mc_attr_ex.comp_mask`. */
export const JoinMcAttrMask = { ADDRESS: 0x1, JOIN_FLAGS: 0x2, RESERVED: 0x4 } as const;
Object.freeze(JoinMcAttrMask);
/** A bit of {@link JoinMcAttrMask}. */
export type JoinMcAttrMask = typeof JoinMcAttrMask[keyof typeof JoinMcAttrMask];

/** `enum rdma_cm_mc_join_flags`: the kind of multicast membership `rdma_join_multicast_ex` asks for. */
export const McJoinFlag = { FULLMEMBER: 0, SENDONLY_FULLMEMBER: 1, RESERVED: 2 } as const;
Object.freeze(McJoinFlag);
/** A value of {@link McJoinFlag}. */
export type McJoinFlag = typeof McJoinFlag[keyof typeof McJoinFlag];

/**
 * `RDMA_MAX_PRIVATE_DATA` (`<rdma/rdma_user_cm.h>`): the size of the private-data
 * buffer of the kernel ABI. `rdma_conn_param.private_data_len` is a `uint8_t`, so a
 * caller can pass at most 255 bytes anyway.
 */
export const RDMA_MAX_PRIVATE_DATA = 256;

/**
 * Private-data limits, in bytes, of the connection manager by transport and
 * operation: the most a caller may pass to `rdma_connect`, `rdma_accept` and
 * `rdma_reject`. The kernel fails a longer one with `EINVAL`; the library checks
 * first so that the error names the limit.
 *
 * **InfiniBand and RoCE** (both use the IB CM, whose MADs have fixed-size private
 * data fields: REQ 92, REP 196, REJ 148, SIDR REQ 216, SIDR REP 136 bytes - the
 * `IB_CM_*_PRIVATE_DATA_SIZE` values of the kernel's `ib_cm.h`, from the
 * InfiniBand Architecture Specification vol. 1 ch. 12). For an id bound to an IP
 * address (`AF_INET`/`AF_INET6`) the kernel rdma_cm prepends its own 36-byte header
 * (`struct cma_hdr`: version 1, IP version 1, port 2, source and destination
 * address 16 + 16) to the private data of REQ and SIDR REQ only:
 * - `connect` 56 = 92 - 36 (`RDMA_PS_TCP`/`RDMA_PS_IB`, RC);
 * - `accept` 196 (REP), `reject` 148 (REJ);
 * - `udConnect` 180 = 216 - 36 (SIDR REQ, `RDMA_PS_UDP`/`RDMA_PS_IPOIB`);
 * - `udAccept` 136 and `udReject` 136 (both sent as a SIDR REP).
 *
 * An id with native IB addressing (`AF_IB`) carries no header, so `connect` may use
 * the whole 92 (`connectAfIb`) and `udConnect` 216 (`udConnectAfIb`), less any
 * header that `rdma_getaddrinfo` put in `ai_connect` (librdmacm sends it in front
 * of the caller's data). On receipt, a `CONNECT_REQUEST` event always reports
 * 92 - 36 = 56 bytes (the REQ field, zero-padded), whatever the peer sent.
 *
 * **iWARP** (MPA, RFC 5044; extended by RFC 6581). The MPA request/reply frame
 * carries up to 512 bytes of private data by the RFC, but the kernel's iWARP
 * drivers cap it at 256 (`MPA_MAX_PRIVATE_DATA` in cxgb4, `MPA_MAX_PRIVDATA` =
 * `RDMA_MAX_PRIVATE_DATA` in siw and erdma). The kernel's iWARP CM event reports the
 * private-data length - which, with MPA v2, includes the 4-byte IRD/ORD block - in a
 * `u8`, so 255 - 4 = 251 bytes is what reaches a peer (measured on siw: 251 arrive,
 * 252 are dropped and the connect ends in REJECTED). No rdma_cm header is added.
 * `connect`, `accept` and `reject` share the limit.
 */
export const PrivateDataLimits = {
  /** Size of the rdma_cm header that precedes REQ / SIDR REQ private data for IP-addressed ids. */
  cmaHeader: 36,
  /** IB/RoCE: the private data fields of the IB CM messages (IBTA vol. 1 ch. 12). */
  ibCm: { req: 92, rep: 196, rej: 148, dreq: 220, drep: 224, sidrReq: 216, sidrRep: 136 },
  /** IB/RoCE, IP-addressed ids (except the `AfIb` ones), as the caller sees them. */
  ib: {
    connect: 56,
    accept: 196,
    reject: 148,
    udConnect: 180,
    udAccept: 136,
    udReject: 136,
    connectAfIb: 92,
    udConnectAfIb: 216,
  },
  /** iWARP (MPA): the portable limit and its parts. */
  iwarp: {
    connect: 251,
    accept: 251,
    reject: 251,
    eventLengthMax: 255,
    mpaDriverMax: 256,
    mpaV2IrdOrd: 4,
    mpaRfcMax: 512,
  },
} as const;
Object.freeze(PrivateDataLimits.ibCm);
Object.freeze(PrivateDataLimits.ib);
Object.freeze(PrivateDataLimits.iwarp);
Object.freeze(PrivateDataLimits);
