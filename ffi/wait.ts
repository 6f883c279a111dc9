/**
 * The per-runtime "wait for epoll" backend behind one interface. The poller owns an epoll set
 * and a wake eventfd; a waiter learns when the set is ready without blocking the JS thread and
 * hands the ready fds to the JS thread. The kinds (measurements and reasons: `poller/README.md`,
 * "Waiters"; `Poller.backend` says which one is active):
 *
 * - `bun-socket` (Bun's default): Bun's event loop watches a duplicate of the epoll fd itself,
 *   adopted with `Bun.connect({ fd })`; no helper thread.
 * - `bun-uring`: a private io_uring polls the epoll fd and sends one byte into a socketpair
 *   whose other end Bun's event loop watches (`wait-uring.ts`); no helper thread either.
 * - `bun-worker` (Bun's fallback): a Worker blocked in `epoll_wait` posts to the JS thread.
 * - `deno-nonblocking` (Deno's default): one `nonblocking: true` `epoll_wait` call (Deno's
 *   blocking pool), in flight only while the poller wants events; cancelled through the eventfd.
 * - `deno-uring`: the io_uring path, the socket read through `node:net`.
 *
 * Whatever the kind, nothing keeps the process alive while no event is wanted, and `close`
 * releases every fd the waiter opened. Selected by runtime with a top-level dynamic import, like
 * `native.ts`; {@link useWaiter} picks another kind for pollers created afterwards.
 *
 * @module
 */

import type { UringCalls } from "./wait-uring.ts";
import { InvalidArgumentError } from "../types/errors.ts";

/** `EPOLLIN` (readable). */
export const EPOLLIN = 0x001;
/** `EPOLLET` (edge-triggered). */
export const EPOLLET = 0x80000000;
/** `EPOLL_CTL_ADD`. */
export const EPOLL_CTL_ADD = 1;
/** `EPOLL_CTL_DEL`. */
export const EPOLL_CTL_DEL = 2;
/** `EPOLL_CLOEXEC` (= `O_CLOEXEC`). */
export const EPOLL_CLOEXEC = 0x80000;
/** `EFD_NONBLOCK` (= `O_NONBLOCK`). */
export const EFD_NONBLOCK = 0x800;
/** `EFD_CLOEXEC` (= `O_CLOEXEC`). */
export const EFD_CLOEXEC = 0x80000;

/** What a waiter needs from the poller. */
export interface WaiterOptions {
  /** The epoll set; every fd is registered with its own fd number in `data`. */
  readonly epfd: number;
  /** The poller's eventfd (in the set); writing it ends a pending `epoll_wait`. */
  readonly wakeFd: number;
  /** Maximum ready fds per wake. */
  readonly maxEvents: number;
  /** `sizeof(struct epoll_event)` and `offsetof(struct epoll_event, data)` on this machine. */
  readonly eventSize: number;
  /** See {@link WaiterOptions.eventSize}. */
  readonly dataOffset: number;
  /**
   * Called on the JS thread with the ready fds (`fds[0..count)`); the array is reused,
   * read it before returning.
   */
  onEvents(fds: Int32Array, count: number): void;
}

/** One runtime's way of waiting on the epoll set without blocking the JS thread. */
export interface EpollWaiter {
  /** The path in use, e.g. `"deno-nonblocking"`, `"bun-socket"` or `"bun-worker"`. */
  readonly kind: string;
  /**
   * Whether events are wanted now. While wanted, a wait is in flight and keeps the process
   * alive; when not, nothing keeps the process alive (Deno cancels the wait via the eventfd).
   */
  want(on: boolean): void;
  /** Stops waiting for good; `release` runs once the backend no longer uses the fds. */
  close(release: () => void): void;
}

/** Makes a waiter for one poller. */
export type WaiterFactory = (options: WaiterOptions) => EpollWaiter;

interface Backend {
  /** The raw calls of the io_uring link (`wait-uring.ts`), or null. */
  bindUring(): UringCalls | null;
  /** Every waiter this runtime offers, by kind, the default first. */
  readonly WAITERS: Readonly<Record<string, WaiterFactory>>;
  /** The default waiter (it may fall back to another kind when a runtime lacks something). */
  createWaiter(options: WaiterOptions): EpollWaiter;
}

const backend: Backend = "Bun" in globalThis
  ? await import("./wait-bun.ts")
  : await import("./wait-deno.ts");

let chosen: WaiterFactory | undefined;

/** The waiter kinds the running runtime offers, the default first. */
export function waiterKinds(): string[] {
  return Object.keys(backend.WAITERS);
}

/**
 * Chooses how pollers created from now on wait: a kind from {@link waiterKinds}, a factory
 * (benchmarks compare candidates this way), or `undefined` for the runtime's default. Pollers
 * that exist keep their waiter. Throws `InvalidArgumentError` for an unknown kind.
 */
export function useWaiter(kind?: string | WaiterFactory): void {
  if (kind === undefined || typeof kind === "function") {
    chosen = kind;
    return;
  }
  const factory = backend.WAITERS[kind];
  if (!factory) {
    throw new InvalidArgumentError(
      `unknown waiter "${kind}" (this runtime has ${waiterKinds().join(", ")})`,
    );
  }
  chosen = factory;
}

/** The running runtime's raw calls for `wait-uring.ts` (null if libc cannot be bound). */
export function uringCalls(): UringCalls | null {
  return backend.bindUring();
}

/** Creates the waiter of the running runtime (or the one chosen by {@link useWaiter}). */
export function createWaiter(options: WaiterOptions): EpollWaiter {
  return chosen ? chosen(options) : backend.createWaiter(options);
}
