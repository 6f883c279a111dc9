/**
 * The one lifetime base of every native-backed object in the library (verbs objects, connection
 * manager ids and channels, stream connections): an object is owned by the objects it depends on
 * (its owners), closing an owner closes its dependents first (newest first), `close()` is
 * idempotent, `Symbol.dispose` aliases it, and a FinalizationRegistry only reports a leak: of an
 * object without owners (a context, an event channel, a connection, a listener), the only kind
 * that can be collected while open, since every owner holds its open dependents.
 *
 * @module
 */

import { ClosedError, InvalidArgumentError } from "../types/errors.ts";
import { countBorn, countDied } from "./census.ts";

/** A class, by its prototype (private constructors included). */
type AnyClass<T> = { readonly prototype: T; readonly name: string };

/**
 * Whether `value` was constructed as `Class` or a subclass, or as an object of kind `Class`: reads
 * private fields set once by the constructor (a look-alike object has none, and `kind` is only
 * their getter). Allocates nothing: argument checks call it per post.
 */
let hasBrand: (value: object, Class: AnyClass<unknown> | string) => boolean;

/**
 * The token library code passes as the last argument to the constructor of an object that only
 * the library makes (a QP from `pd.createQp()`, a CM id from `channel.createId()`, ...). It is
 * module-private: `mod.ts` does not export it, and a constructor called without it throws.
 */
export const CONSTRUCT: unique symbol = Symbol("@rdma/verbs construct");

/** Throws {@link InvalidArgumentError} with `message` (who makes the object) unless `token` is {@link CONSTRUCT}. */
export function checkConstruct(token: unknown, message: string): void {
  if (token !== CONSTRUCT) throw new InvalidArgumentError(message);
}

const NO_OWNERS: NativeResource[] = [];
const leakedKinds = new Set<string>();
const leaks = new FinalizationRegistry<string>((kind) => {
  if (leakedKinds.has(kind)) return;
  leakedKinds.add(kind);
  console.warn(
    `@rdma/verbs: a ${kind} was garbage-collected without close(); its native resources leak ` +
      "(close RDMA objects explicitly or with `using`)",
  );
});

/**
 * The base class of every object that owns a native resource. Subclasses release the resource
 * in {@link NativeResource.destroy}, which runs exactly once.
 */
export abstract class NativeResource implements Disposable {
  #closed = false;
  #closing = false;
  // made on the first dependent: most objects (MRs, QPs, prepared WRs) never have one
  #dependents: Set<NativeResource> | null = null;
  readonly #owners: readonly NativeResource[];
  readonly #class: AnyClass<unknown>;
  readonly #kind: string;

  static {
    hasBrand = (value, Class) => {
      if (!(#class in value)) return false;
      const r = value as NativeResource;
      if (typeof Class === "string") return r.#kind === Class;
      const c = r.#class;
      return c === Class ||
        Object.prototype.isPrototypeOf.call(Class.prototype, c.prototype as object);
    };
  }

  /**
   * Registers the object with the objects it depends on: each must be open, and each closes
   * this object before itself.
   */
  protected constructor(kind: string, owners: readonly (NativeResource | null | undefined)[]) {
    this.#class = new.target as unknown as AnyClass<unknown>;
    this.#kind = kind;
    // indexed loops and an array of the exact size: constructors mostly run unoptimized, where
    // an iterator and a growing array are allocations
    let count = 0;
    for (let i = 0; i < owners.length; i++) {
      const o = owners[i];
      if (!o) continue;
      o.assertOpen();
      count++;
    }
    const mine: NativeResource[] = count === 0 ? NO_OWNERS : new Array(count);
    for (let i = 0, j = 0; i < owners.length; i++) {
      const o = owners[i];
      if (!o) continue;
      (o.#dependents ??= new Set()).add(this);
      mine[j++] = o;
    }
    this.#owners = mine;
    // Only an object without owners can become garbage while open: an owner holds its open
    // dependents, so an unclosed child is reported with the unclosed root that leaks with it.
    if (count === 0) leaks.register(this, kind, this);
    countBorn(kind);
  }

  /** The kind of object, for error messages (`QueuePair`, `CmId`, ...); set by the constructor. */
  get kind(): string {
    return this.#kind;
  }

  /** True once closed (directly or through an owner). */
  get closed(): boolean {
    return this.#closed;
  }

  /** Throws {@link ClosedError} when closed. */
  assertOpen(): void {
    if (this.#closed) throw new ClosedError(this.kind);
  }

  /** The open dependents, oldest first. */
  protected dependents(): NativeResource[] {
    return this.#dependents === null ? [] : [...this.#dependents];
  }

  /**
   * Why a direct `close()` must not happen now (e.g. work requests still use the memory), or
   * null. Closing an owner closes the object regardless.
   */
  protected closeRefusal(): string | null {
    return null;
  }

  /**
   * Closes the dependents (newest first), then releases the native resource. Idempotent and
   * re-entrancy safe. A failing dependent or destroy still leaves this object closed; the
   * first error is thrown once everything was attempted. Throws {@link InvalidArgumentError}
   * (and stays open) when the object refuses to close now (see each class).
   */
  close(): void {
    if (this.#closed || this.#closing) return;
    const refusal = this.closeRefusal();
    if (refusal !== null) throw new InvalidArgumentError(`${this.kind}: ${refusal}`);
    this.#closeNow();
  }

  #closeNow(): void {
    if (this.#closed || this.#closing) return;
    this.#closing = true;
    let first: unknown;
    let failed = false;
    try {
      this.beforeClose();
    } catch (e) {
      first = e;
      failed = true;
    }
    if (this.#dependents !== null && this.#dependents.size > 0) {
      const deps = [...this.#dependents];
      for (let i = deps.length - 1; i >= 0; i--) {
        try {
          deps[i].#closeNow();
        } catch (e) {
          if (!failed) first = e;
          failed = true;
        }
      }
    }
    this.#closed = true;
    if (this.#owners.length === 0) leaks.unregister(this);
    countDied(this.kind);
    for (let i = 0; i < this.#owners.length; i++) this.#owners[i].#dependents?.delete(this);
    try {
      this.destroy();
    } catch (e) {
      if (!failed) first = e;
      failed = true;
    }
    if (failed) throw first;
  }

  /**
   * Runs first when the object closes (directly or through an owner), before its dependents
   * close: e.g. a connection sends its disconnect. The default does nothing.
   */
  protected beforeClose(): void {}

  /** Releases the native resource; called once by {@link NativeResource.close}. */
  protected abstract destroy(): void;

  /** Alias of {@link NativeResource.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * True when `value` was constructed as `Class` (or a subclass of it), or - given a kind name such
 * as `"ProtectionDomain"` - as an object of that kind (subclasses keep their base's kind). The
 * check reads module-private state that only the constructor sets, so a look-alike object never
 * passes.
 * Kind names let a module check an argument without importing its class (which keeps the
 * modules free of import cycles).
 */
export function isInstance<T extends NativeResource>(
  value: unknown,
  Class: AnyClass<T> | string,
): value is T {
  if (typeof value !== "object" || value === null) return false;
  return hasBrand(value, Class);
}

/**
 * Returns `value` when it is an open `Class`; throws {@link InvalidArgumentError} when it is not
 * one (`what` names the argument) and {@link ClosedError} when it is closed.
 */
export function checkResource<T extends NativeResource>(
  value: unknown,
  Class: AnyClass<T> | string,
  what: string,
): T {
  if (!isInstance<T>(value, Class)) {
    const name = typeof Class === "string" ? Class : Class.name;
    throw new InvalidArgumentError(`${what} must be a ${name} made by this library`);
  }
  value.assertOpen();
  return value;
}
