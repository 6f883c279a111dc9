/**
 * {@link SharedByKey}: native objects the stream connections share, one per key, each made by the
 * first connection that needs it and closed when the last one releases it.
 *
 * @module
 */

/** One use of a shared object; `release()` ends it (later calls do nothing). */
export interface Lease<T> {
  /** The shared object. */
  readonly value: T;
  /** Ends this use; the last use's release closes the object. */
  release(): void;
}

/** What can be shared: closed once, and seen closed when something else closed it. */
interface Closable {
  close(): void;
  readonly closed: boolean;
}

/** Shared objects by key: {@link SharedByKey.lease} makes one when none is open for the key. */
export class SharedByKey<K, T extends Closable> {
  readonly #entries = new Map<K, { value: T; users: number }>();
  readonly #make: (key: K) => T;

  /** `make` opens the object for a key. */
  constructor(make: (key: K) => T) {
    this.#make = make;
  }

  /** A use of the key's object (made now if none is open: e.g. its device's context closed it). */
  lease(key: K): Lease<T> {
    let e = this.#entries.get(key);
    if (e === undefined || e.value.closed) {
      e = { value: this.#make(key), users: 0 };
      this.#entries.set(key, e);
    }
    const entry = e;
    entry.users++;
    let released = false;
    return {
      value: entry.value,
      release: () => {
        if (released) return;
        released = true;
        if (--entry.users > 0) return;
        if (this.#entries.get(key) === entry) this.#entries.delete(key);
        entry.value.close();
      },
    };
  }
}
