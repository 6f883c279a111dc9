/**
 * The library as the device tests and their peers see it, from one root: the public API
 * (`mod.ts`, and the `node:net` layer as `net`) and the few internals they check directly — the native loader, the device list, the
 * inline verbs' signatures, the layout table, and cancelling the completion waits of a CQ.
 */
export * from "../mod.ts";
export * as net from "../net/mod.ts";
export { native } from "../ffi/native.ts";
export { withDeviceList } from "../verbs/devices.ts";
export { IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
export { layoutFor } from "../types/layouts/mod.ts";
export { cancelCompletionWaits } from "../poller/completions.ts";
