/**
 * The poller: one epoll set per poller holding every watched fd (completion channels,
 * rdma_cm event channels, device async-event fds, any O_NONBLOCK fd) and a wake eventfd,
 * waited on by the runtime's backend (`ffi/wait.ts`) without blocking the JS thread.
 *
 * Fds are registered **edge-triggered** (`EPOLLIN | EPOLLET`): a watch is notified once per
 * edge, so whoever is notified must read the fd until EAGAIN (a later edge is reported only
 * after new data arrives). Readiness that arrives while nothing waits stays on epoll's ready
 * list and is reported by the next wait; an fd that is already readable when registered is
 * reported by the first wait.
 *
 * The poller waits only while something is awaited (a pending {@link FdWatch.readable}, or a
 * {@link Poller.ref}/{@link FdWatch.ref}); otherwise nothing keeps the process alive and no
 * thread is busy. Notifications (callbacks) are delivered while the poller is waiting. Waits of
 * unref'd objects (a {@link PollerHold} with `keepsAlive` off, e.g. an `unref()`'d connection)
 * are weak holds: they are served while the process stays alive for other reasons (the
 * waiter when anything else waits, otherwise a check of the set every {@link WEAK_CHECK_MS} ms
 * by an unref'd timer) and never keep it alive themselves.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { startTimer, stopTimer, type TimerHandle } from "../ffi/timers.ts";
import { takeReady } from "../ffi/epoll-ready.ts";
import {
  createWaiter,
  EFD_CLOEXEC,
  EFD_NONBLOCK,
  EPOLL_CLOEXEC,
  EPOLL_CTL_ADD,
  EPOLL_CTL_DEL,
  EPOLLET,
  EPOLLIN,
  type EpollWaiter,
  type WaiterOptions,
} from "../ffi/wait.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { ClosedError, InvalidArgumentError } from "../types/errors.ts";
import { type HoldCounter, WaitList, type WaitOptions } from "./wait.ts";
import { errnoError } from "../ffi/errors.ts";
import { describe } from "../types/check.ts";
import { costs, COUNTING } from "../ffi/cost.ts";
import { countBorn, countDied } from "../ffi/census.ts";

/** Options of a {@link Poller}. */
export interface PollerOptions {
  /** Ready fds taken per wake (default 64). */
  maxEvents?: number;
}

let shared: Poller | undefined;

/** How often the epoll set is checked while only weak holds wait (ms). */
export const WEAK_CHECK_MS = 5;

/**
 * One epoll set, a wake eventfd and the runtime's waiting backend. Most programs use the
 * lazily created {@link Poller.default}; create more only to isolate groups of fds.
 */
export class Poller implements HoldCounter {
  #epfd: number;
  #wakeFd: number;
  #waiter: EpollWaiter;
  #watches = new Map<number, FdWatch>();
  #holds = 0;
  #weakHolds = 0;
  #weakTimer: TimerHandle | null = null;
  #weakEvents: NativeBlock | null = null;
  #weakFds: Int32Array | null = null;
  readonly #weakCheck = () => this.#checkWeak();
  readonly #waiterOptions: WaiterOptions;
  #closed = false;
  #closeListeners = new Set<(error: ClosedError) => void>();
  #event: NativeBlock;
  #eventsOffset: number;
  #dataOffset: number;
  #scratch: NativeBlock;

  /** The shared poller of this process, created on first use (again after it was closed). */
  static default(): Poller {
    if (!shared || shared.closed) shared = new Poller();
    return shared;
  }

  /** Creates an epoll set with its wake eventfd. */
  constructor(options: PollerOptions = {}) {
    const maxEvents = options.maxEvents ?? 64;
    if (!Number.isInteger(maxEvents) || maxEvents < 1) {
      throw new InvalidArgumentError(
        `maxEvents must be a positive integer, got ${describe(maxEvents)}`,
      );
    }
    const n = native();
    const layout = layouts().epoll_event;
    this.#eventsOffset = layout.fields.events.offset;
    this.#dataOffset = layout.fields["data.u64"].offset;
    const epfd = n.libc.epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) throw errnoError("epoll_create1");
    const wakeFd = n.libc.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wakeFd < 0) {
      const e = errnoError("eventfd");
      n.libc.close(epfd);
      throw e;
    }
    this.#epfd = epfd;
    this.#wakeFd = wakeFd;
    this.#event = new NativeBlock(layout.size, 8);
    this.#scratch = new NativeBlock(8, 8);
    this.#ctl(EPOLL_CTL_ADD, wakeFd);
    this.#waiterOptions = {
      epfd,
      wakeFd,
      maxEvents,
      eventSize: layout.size,
      dataOffset: this.#dataOffset,
      onEvents: (fds, count) => this.#dispatch(fds, count),
    };
    this.#waiter = createWaiter(this.#waiterOptions);
    countBorn("Poller");
  }

  /**
   * The waiting path in use (see `poller/README.md`, "Waiters"): by default
   * `"deno-nonblocking"` in Deno and `"bun-socket"` in Bun (`"bun-worker"` where Bun cannot
   * adopt the epoll fd); `"deno-uring"` and `"bun-uring"` when chosen. A waiter that had to fall
   * back reports the path it fell back to.
   */
  get backend(): string {
    return this.#waiter.kind;
  }

  /** True once {@link Poller.close} ran. */
  get closed(): boolean {
    return this.#closed;
  }

  /** How many fds are watched. */
  get size(): number {
    return this.#watches.size;
  }

  /** How many waits (and refs) currently keep the poller waiting. */
  get pending(): number {
    return this.#holds;
  }

  /**
   * Watches an O_NONBLOCK fd for readability (edge-triggered). `onReadable`, when given, runs
   * on the JS thread on every edge and must read the fd until EAGAIN. Throws
   * {@link InvalidArgumentError} if the fd is already watched by this poller.
   */
  register(fd: number, onReadable?: () => void): FdWatch {
    if (this.#closed) throw new ClosedError("Poller");
    if (!Number.isInteger(fd) || fd < 0) {
      throw new InvalidArgumentError(`fd must be a non-negative integer, got ${describe(fd)}`);
    }
    if (this.#watches.has(fd) || fd === this.#wakeFd) {
      throw new InvalidArgumentError(`fd ${fd} is already watched by this poller`);
    }
    this.#ctl(EPOLL_CTL_ADD, fd);
    const watch = new FdWatch(this, fd, onReadable, (w) => this.#unregister(w));
    this.#watches.set(fd, watch);
    return watch;
  }

  /**
   * Watches the fd of a native object that owns it (a completion channel, an rdma_cm event
   * channel, a device context): like {@link Poller.register}, and the watch is closed by
   * {@link closeWatchesOf}`(owner)`, which the owner calls before it closes the fd. A watch of the
   * same fd number that no live owner closed is stale (its fd was closed and the number reused
   * for `owner`'s fd): it is closed first.
   */
  registerOwned(owner: object, fd: number, onReadable?: () => void): FdWatch {
    const stale = this.#watches.get(fd);
    if (stale && !ownedBy.get(owner)?.has(stale)) stale.close();
    const watch = this.register(fd, onReadable);
    ownWatch(owner, watch);
    return watch;
  }

  /** The watch of `fd`, if any. */
  watchOf(fd: number): FdWatch | undefined {
    return this.#watches.get(fd);
  }

  /**
   * Runs `listener` when the poller closes (to settle waits that are not fd watches, e.g.
   * completion waits). Returns a function that removes it.
   */
  onClose(listener: (error: ClosedError) => void): () => void {
    this.#closeListeners.add(listener);
    return () => this.#closeListeners.delete(listener);
  }

  /** Keeps the poller waiting (and the process alive) until a matching {@link Poller.unref}. */
  ref(): void {
    if (this.#closed) return;
    if (this.#holds++ === 0) {
      this.#waiter.want(true);
      this.#stopWeakChecks();
    }
  }

  /** Ends one {@link Poller.ref}; with none left, the poller stops waiting. */
  unref(): void {
    if (this.#holds === 0) return;
    if (--this.#holds === 0) {
      this.#waiter.want(false);
      if (this.#weakHolds > 0) this.#startWeakChecks();
    }
  }

  /**
   * A weak hold: the poller serves it while the process stays alive for other reasons, and it
   * does not keep the process alive. Ended by {@link Poller.unrefWeak}.
   */
  refWeak(): void {
    if (this.#closed) return;
    if (this.#weakHolds++ === 0 && this.#holds === 0) this.#startWeakChecks();
  }

  /** Ends one {@link Poller.refWeak}. */
  unrefWeak(): void {
    if (this.#weakHolds === 0) return;
    if (--this.#weakHolds === 0) this.#stopWeakChecks();
  }

  #startWeakChecks(): void {
    if (this.#weakTimer !== null) return;
    this.#weakTimer = startTimer(this.#weakCheck, WEAK_CHECK_MS, false);
  }

  #stopWeakChecks(): void {
    if (this.#weakTimer === null) return;
    stopTimer(this.#weakTimer);
    this.#weakTimer = null;
  }

  #checkWeak(): void {
    this.#weakTimer = null;
    if (this.#closed || this.#holds > 0 || this.#weakHolds === 0) return;
    const o = this.#waiterOptions;
    this.#weakEvents ??= new NativeBlock(o.maxEvents * o.eventSize, 16);
    this.#weakFds ??= new Int32Array(o.maxEvents);
    takeReady(o, this.#weakEvents, this.#weakFds, () => this.#closed);
    if (this.#holds === 0 && this.#weakHolds > 0) this.#startWeakChecks();
  }

  /**
   * Closes every watch (their pending waits reject with {@link ClosedError}), stops the
   * backend and closes the epoll set and the eventfd. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    for (const w of [...this.#watches.values()]) w.close();
    const error = new ClosedError("Poller");
    for (const l of [...this.#closeListeners]) l(error);
    this.#closeListeners.clear();
    this.#closed = true;
    countDied("Poller");
    this.#holds = 0;
    this.#weakHolds = 0;
    this.#stopWeakChecks();
    const { libc } = native();
    this.#waiter.close(() => {
      libc.close(this.#epfd);
      libc.close(this.#wakeFd);
      this.#event.free();
      this.#scratch.free();
      this.#weakEvents?.free();
    });
  }

  /** Alias of {@link Poller.close}. */
  [Symbol.dispose](): void {
    this.close();
  }

  #ctl(op: number, fd: number): void {
    const v = this.#event.view;
    v.setUint32(this.#eventsOffset, EPOLLIN | EPOLLET, true);
    v.setBigUint64(this.#dataOffset, BigInt(fd), true);
    if (native().libc.epoll_ctl(this.#epfd, op, fd, this.#event.ptr) !== 0) {
      throw errnoError("epoll_ctl", `fd ${fd}`);
    }
  }

  #unregister(w: FdWatch): void {
    const owner = ownerOf.get(w);
    if (owner) {
      ownerOf.delete(w);
      ownedBy.get(owner)?.delete(w);
    }
    if (this.#watches.get(w.fd) !== w) return;
    this.#watches.delete(w.fd);
    // the owner may already have closed the fd (epoll forgot it then): ignore failures
    native().libc.epoll_ctl(this.#epfd, EPOLL_CTL_DEL, w.fd, this.#event.ptr);
  }

  #dispatch(fds: Int32Array, count: number): void {
    if (COUNTING) costs.wakes++;
    for (let i = 0; i < count; i++) {
      const fd = fds[i];
      if (fd === this.#wakeFd) {
        // drain the eventfd (reads until EAGAIN: one read resets the counter)
        native().libc.read(fd, this.#scratch.ptr, 8);
        continue;
      }
      this.#watches.get(fd)?.notify();
    }
  }
}

/**
 * One watched fd. Await {@link FdWatch.readable} (or iterate the watch) for the next edge,
 * then read the fd until EAGAIN. Closing the watch unregisters the fd (it does not close it).
 */
export class FdWatch {
  /** The watched fd. */
  readonly fd: number;
  /** The poller it is registered with. */
  readonly poller: Poller;
  #onReadable: (() => void) | undefined;
  #unregister: (w: FdWatch) => void;
  #waits: WaitList;
  #edge = false;
  #refs = 0;
  #closed = false;

  /** @internal Use {@link Poller.register}. */
  constructor(
    poller: Poller,
    fd: number,
    onReadable: (() => void) | undefined,
    unregister: (w: FdWatch) => void,
  ) {
    this.poller = poller;
    this.fd = fd;
    this.#onReadable = onReadable;
    this.#unregister = unregister;
    this.#waits = new WaitList(poller);
    countBorn("FdWatch");
  }

  /** True once closed (by itself or by its poller). */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Resolves at the next readability edge, or at once if an edge arrived since the last
   * `readable()` took one. Rejects with AbortedError on abort/timeout, ClosedError on close.
   */
  readable(options?: WaitOptions): Promise<void> {
    if (this.#closed) return Promise.reject(new ClosedError("FdWatch"));
    if (this.#edge) {
      this.#edge = false;
      return Promise.resolve();
    }
    return this.#waits.add(options);
  }

  /**
   * Edges as an async iterable; ends when the watch closes. Each step means "read until EAGAIN".
   */
  async *edges(options?: WaitOptions): AsyncGenerator<void, void, undefined> {
    for (;;) {
      try {
        await this.readable(options);
      } catch (e) {
        if (e instanceof ClosedError && this.#closed) return;
        throw e;
      }
      yield;
    }
  }

  /** Same as {@link FdWatch.edges} without options. */
  [Symbol.asyncIterator](): AsyncGenerator<void, void, undefined> {
    return this.edges();
  }

  /** Keeps the poller waiting for this fd (so `onReadable` runs) until {@link FdWatch.unref}. */
  ref(): void {
    if (this.#closed) return;
    this.#refs++;
    this.poller.ref();
  }

  /** Ends one {@link FdWatch.ref}. */
  unref(): void {
    if (this.#refs === 0) return;
    this.#refs--;
    this.poller.unref();
  }

  /** Unregisters the fd; pending waits reject with ClosedError. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    countDied("FdWatch");
    this.#unregister(this);
    while (this.#refs > 0) this.unref();
    this.#waits.rejectAll(() => new ClosedError("FdWatch"));
  }

  /** Alias of {@link FdWatch.close}. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** @internal Called by the poller on an edge. */
  notify(): void {
    if (this.#closed) return;
    const cb = this.#onReadable;
    if (cb) {
      try {
        cb();
      } catch (e) {
        console.error(`poller: onReadable of fd ${this.fd} threw`, e);
      }
    }
    if (this.#waits.size > 0) this.#waits.resolveAll();
    else this.#edge = true;
  }
}

/**
 * The holds of one object on a poller (its pending waits), switchable between keeping the
 * process alive (`keepsAlive`, the default) and weak holds that do not ({@link Poller.refWeak}):
 * what `ref()`/`unref()` of a connection or listener change. Switching moves the pending holds.
 */
export class PollerHold implements HoldCounter {
  /** The poller held. */
  readonly poller: Poller;
  #count = 0;
  #alive = true;

  /** Creates a hold on `poller` (none held yet). */
  constructor(poller: Poller) {
    this.poller = poller;
  }

  /** Whether the holds keep the process alive. */
  get keepsAlive(): boolean {
    return this.#alive;
  }

  set keepsAlive(on: boolean) {
    if (on === this.#alive) return;
    for (let i = 0; i < this.#count; i++) this.#take();
    this.#alive = on;
    for (let i = 0; i < this.#count; i++) this.#give();
  }

  /** How many holds are taken. */
  get count(): number {
    return this.#count;
  }

  /** Takes one hold. */
  ref(): void {
    this.#count++;
    this.#give();
  }

  /** Releases one hold. */
  unref(): void {
    if (this.#count === 0) return;
    this.#count--;
    this.#take();
  }

  /** Releases every hold. */
  release(): void {
    while (this.#count > 0) this.unref();
  }

  #give(): void {
    if (this.#alive) this.poller.ref();
    else this.poller.refWeak();
  }

  #take(): void {
    if (this.#alive) this.poller.unref();
    else this.poller.unrefWeak();
  }
}

/**
 * The watches each fd owner holds (see {@link Poller.registerOwned}), and the owner of each owned
 * watch. Entries go when the watch or its owner closes, not when the engine collects them: V8's
 * young-generation collector keeps a weak map's value - and all it reaches - alive until a full
 * collection (docs/06-lifetimes.md).
 */
const ownedBy = new WeakMap<object, Set<FdWatch>>();
const ownerOf = new WeakMap<FdWatch, object>();

/** Records `watch` as held by `owner` until either {@link closeWatchesOf} or the watch closes. */
export function ownWatch(owner: object, watch: FdWatch): void {
  let set = ownedBy.get(owner);
  if (!set) ownedBy.set(owner, set = new Set());
  set.add(watch);
  ownerOf.set(watch, owner);
}

/** The open watches `owner` holds. */
export function watchesOf(owner: object): ReadonlySet<FdWatch> {
  return ownedBy.get(owner) ?? new Set();
}

/**
 * Closes every watch `owner` holds, in every poller: their waits reject with ClosedError and
 * streams over them end. The owner of an fd calls it before it closes the fd (whose number may
 * then be reused). Idempotent.
 */
export function closeWatchesOf(owner: object): void {
  const set = ownedBy.get(owner);
  ownedBy.delete(owner);
  for (const w of set ?? []) w.close();
}
