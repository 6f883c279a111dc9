/**
 * Internal: the CM ids of each event channel by the address of their `struct rdma_cm_id`, so the
 * channel routes every event it reads to the object of its id. The channel registers the ids it
 * creates and receives; `id.migrate()` registers the id it moves onto another channel.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { CmEventChannel } from "./channel.ts";
import type { CmId } from "./id.ts";

const idsOf = new WeakMap<CmEventChannel, Map<bigint, CmId>>();

/** Routes the events of `channel` for the `rdma_cm_id` at `ptr` to `id`. */
export function registerId(channel: CmEventChannel, ptr: NativePointer, id: CmId): CmId {
  let ids = idsOf.get(channel);
  if (!ids) idsOf.set(channel, ids = new Map());
  ids.set(native().address(ptr), id);
  return id;
}

/** The open id of `channel` at `ptr`, if it has one. */
export function idAt(channel: CmEventChannel, ptr: NativePointer): CmId | undefined {
  const ids = idsOf.get(channel);
  const key = native().address(ptr);
  const id = ids?.get(key);
  if (id?.closed) {
    // its pointer was freed; librdmacm may hand out the same address again
    ids!.delete(key);
    return undefined;
  }
  return id;
}

/**
 * Forgets `id` at `ptr` (it closed; a listener's channel would otherwise hold every connection it
 * accepted until librdmacm reused the address), unless another id is registered there now.
 */
export function forgetId(channel: CmEventChannel, ptr: NativePointer, id: CmId): void {
  const ids = idsOf.get(channel);
  const key = native().address(ptr);
  if (ids?.get(key) === id) ids.delete(key);
}

/** Forgets the ids of a closed channel. */
export function forgetIds(channel: CmEventChannel): void {
  idsOf.delete(channel);
}
