/**
 * The string functions of libibverbs re-implemented in TypeScript: `ibv_wc_status_str`,
 * `ibv_event_type_str`, `ibv_node_type_str`, `ibv_port_state_str`. Their texts are data: they
 * must equal what the C library returns, byte for byte (`tests/enums.test.ts` compares them).
 *
 * @module
 */

const WC_STATUS_STR: readonly string[] = Object.freeze([
  "success",
  "local length error",
  "local QP operation error",
  "local EE context operation error",
  "local protection error",
  "Work Request Flushed Error",
  "memory management operation error",
  "bad response error",
  "local access error",
  "remote invalid request error",
  "remote access error",
  "remote operation error",
  "transport retry counter exceeded",
  "RNR retry counter exceeded",
  "local RDD violation error",
  "remote invalid RD request",
  "aborted error",
  "invalid EE context number",
  "invalid EE context state",
  "fatal error",
  "response timeout error",
  "general error",
  "TM error",
  "TM software rendezvous",
]);

const EVENT_TYPE_STR: readonly string[] = Object.freeze([
  "CQ error",
  "local work queue catastrophic error",
  "invalid request local work queue error",
  "local access violation work queue error",
  "communication established",
  "send queue drained",
  "path migrated",
  "path migration request error",
  "local catastrophic error",
  "port active",
  "port error",
  "LID change",
  "P_Key change",
  "SM change",
  "SRQ catastrophic error",
  "SRQ limit reached",
  "last WQE reached",
  "client reregistration",
  "GID table change",
  "WQ fatal",
]);

const NODE_TYPE_STR: readonly string[] = Object.freeze([
  "unknown",
  "InfiniBand channel adapter",
  "InfiniBand switch",
  "InfiniBand router",
  "iWARP NIC",
  "usNIC",
  "usNIC UDP",
  "unspecified",
]);

const PORT_STATE_STR: readonly string[] = Object.freeze([
  "no state change (NOP)",
  "down",
  "init",
  "armed",
  "active",
  "active defer",
]);

function lookup(table: readonly string[], v: number): string {
  return Number.isInteger(v) && v >= 0 && v < table.length ? table[v] : "unknown";
}

/** `ibv_wc_status_str`: the text of a {@link WcStatus} ("unknown" for any other value). */
export function wcStatusStr(status: number): string {
  return lookup(WC_STATUS_STR, status);
}

/** `ibv_event_type_str`: the text of an {@link EventType} ("unknown" for any other value). */
export function eventTypeStr(event: number): string {
  return lookup(EVENT_TYPE_STR, event);
}

/** `ibv_node_type_str`: the text of a {@link NodeType} ("unknown" for any other value). */
export function nodeTypeStr(nodeType: number): string {
  return lookup(NODE_TYPE_STR, nodeType);
}

/** `ibv_port_state_str`: the text of a {@link PortState} ("unknown" for any other value). */
export function portStateStr(state: number): string {
  return lookup(PORT_STATE_STR, state);
}
