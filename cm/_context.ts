/**
 * The device contexts of librdmacm as verbs {@link Context}s. librdmacm opens
 * one `ibv_context` per device and binds every CM id to it; a QP created on an
 * id must use a PD (and CQs) from that same context, so `id.context` hands it
 * out wrapped. Closing the wrapper closes what was made from it (PDs, CQs,
 * ...) but never the device, which librdmacm owns.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { CONSTRUCT } from "../ffi/resource.ts";
import { Context } from "../verbs/context.ts";

/** A verbs context that belongs to librdmacm: closing it leaves the device open. */
class CmContext extends Context {
  /** Releases the native object (called once by `close()`). */
  protected override destroy(): void {
    // librdmacm owns the device: only this wrapper's children were closed
  }
}

const contexts = new Map<bigint, Context>();

/** The verbs {@link Context} for librdmacm's `struct ibv_context *` (one wrapper per device while open). */
export function cmContext(verbs: NativePointer): Context {
  const n = native();
  const key = n.address(verbs);
  let ctx = contexts.get(key);
  if (!ctx || ctx.closed) {
    const dev = n.readPointer(verbs, layouts().ibv_context.fields.device.offset);
    const name = (dev && n.cstring(n.ibverbs.ibv_get_device_name(dev))) ?? "";
    ctx = new CmContext(verbs, name, CONSTRUCT);
    contexts.set(key, ctx);
  }
  return ctx;
}

/**
 * librdmacm keeps a context open on every device it has used, a removed one too, until it next
 * syncs its device list; the kernel finishes a removal only once every context of the device is
 * closed. Syncing (`rdma_get_devices`) once an id that saw DEVICE_REMOVAL is destroyed lets
 * librdmacm close the removed device's context when no id uses it any more (module-private:
 * a closing id that saw DEVICE_REMOVAL).
 */
export function releaseRemovedDevices(): void {
  const cm = native().rdmacm;
  const list = cm.rdma_get_devices(null);
  if (list !== null) cm.rdma_free_devices(list);
}
