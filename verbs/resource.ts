/**
 * The lifetime rules shared by every verbs object: an object is owned by the
 * objects it depends on (its parents), closing a parent closes its dependents
 * first, `close()` is idempotent, `Symbol.dispose` aliases it, and a
 * FinalizationRegistry only reports a leak.
 *
 * @module
 */

import { ClosedError } from "../types/errors.ts";

let leakWarned = false;
const leaks = new FinalizationRegistry<string>((what) => {
  if (leakWarned) return;
  leakWarned = true;
  console.warn(
    `@rdma/verbs: a ${what} was garbage-collected without close(); its native resources leak ` +
      "(close RDMA objects explicitly or with `using`)",
  );
});

/** The base class of every verbs object that owns a native resource. */
export abstract class Resource implements Disposable {
  /** The kind of object, for error messages (`QueuePair`, ...). */
  readonly kind: string;
  #closed = false;
  readonly #dependents = new Set<Resource>();
  readonly #owners: Resource[] = [];

  /** Registers the object with the objects it depends on (they close it first). */
  protected constructor(kind: string, owners: readonly (Resource | undefined)[]) {
    this.kind = kind;
    for (const o of owners) {
      if (!o) continue;
      o.assertOpen();
      o.#dependents.add(this);
      this.#owners.push(o);
    }
    leaks.register(this, kind, this);
  }

  /** True once closed (directly or through a parent). */
  get closed(): boolean {
    return this.#closed;
  }

  /** Throws {@link ClosedError} when closed. */
  assertOpen(): void {
    if (this.#closed) throw new ClosedError(this.kind);
  }

  /** Makes `dependent` close before this object (e.g. an MW bound to this MR). */
  protected addDependent(dependent: Resource): void {
    this.#dependents.add(dependent);
    dependent.#owners.push(this);
  }

  /**
   * Closes the dependents (newest first), then releases the native resource.
   * Idempotent. A failing destroy still marks the object closed and throws.
   */
  close(): void {
    if (this.#closed) return;
    const deps = [...this.#dependents].reverse();
    for (const d of deps) d.close();
    this.#closed = true;
    leaks.unregister(this);
    for (const o of this.#owners) o.#dependents.delete(this);
    this.destroy();
  }

  /** Releases the native resource; called once by {@link Resource.close}. */
  protected abstract destroy(): void;

  /** Alias of {@link Resource.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}
