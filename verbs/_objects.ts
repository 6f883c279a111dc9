/**
 * The native objects of each device context by address, so that async events and completion
 * events find the library object they concern. A leaf module (it imports no verbs class), so
 * every verbs object can use it without an import cycle through the context.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import type { NativePointer } from "../types/ctypes.ts";
import type { NativeResource } from "../ffi/resource.ts";

const byContext = new WeakMap<object, Map<bigint, NativeResource>>();

function objectsOf(ctx: object): Map<bigint, NativeResource> {
  let m = byContext.get(ctx);
  if (!m) byContext.set(ctx, m = new Map());
  return m;
}

/** Remembers the object at `ptr` of context `ctx` (module-private to the library). */
export function rememberObject(ctx: object, ptr: NativePointer, obj: NativeResource): void {
  objectsOf(ctx).set(native().address(ptr), obj);
}

/** Forgets the object at `ptr` (module-private to the library). */
export function forgetObject(ctx: object, ptr: NativePointer): void {
  objectsOf(ctx).delete(native().address(ptr));
}

/** The object at `address`, if `ctx` made one there (module-private to the library). */
export function objectAt(ctx: object, address: bigint): NativeResource | undefined {
  return objectsOf(ctx).get(address);
}

/** Every object `ctx` remembers (module-private to the library). */
export function contextObjects(ctx: object): Iterable<NativeResource> {
  return objectsOf(ctx).values();
}

/** Forgets every object of `ctx` (it closed). */
export function forgetContext(ctx: object): void {
  byContext.delete(ctx);
}
