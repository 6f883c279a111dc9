/**
 * Bun's epoll waiters. Bun has no nonblocking FFI calls, but its event loop adopts any fd with
 * `Bun.connect({ fd })`, so the JS thread itself can be woken by the kernel, with no helper
 * thread:
 *
 * - `bun-socket` (default): Bun adopts a duplicate of the epoll fd itself; when the set is
 *   ready Bun's `recv` on it fails (ENOTSOCK) and Bun closes it - the `close` handler is the
 *   wake-up - the JS thread takes the ready fds with `epoll_wait(..., 0)`, and a fresh duplicate
 *   is adopted while events are wanted.
 * - `bun-uring`: a private io_uring polls the epoll fd and, when the set is ready, sends one
 *   byte into a socketpair whose other end Bun adopted once (`wait-uring.ts`). Falls back to
 *   `bun-socket` where io_uring is missing or forbidden.
 * - `bun-worker` (where `Bun.connect` cannot adopt an fd; the previous default): a Worker
 *   blocks in `epoll_wait` and posts to the JS thread (`epoll-worker.ts`, its source inlined).
 *
 * The adopted socket (or the Worker) is ref'd only while the poller wants events, so an idle
 * process exits by itself; the ring never keeps it alive.
 *
 * Which waiter wakes fastest depends on the host and its load: `poller/README.md` compares every
 * waiter tried, and `bench/waiters.ts` measures them (figures in `bench/results/`). `bun-socket`
 * is the default because it needs nothing but Bun.
 *
 * @module
 */

import type { EpollWaiter, WaiterOptions } from "./wait.ts";
import { native } from "./native.ts";
import { LIBRARIES } from "./library.ts";
import { EPOLL_WORKER_SOURCE } from "./epoll-worker.ts";
import { NativeBlock } from "./memory.ts";
import { EpollLink, type UringCalls, UringWaiter } from "./wait-uring.ts";
import { takeReady } from "./epoll-ready.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { dlopen, FFIType } from "bun:ffi";

const STATE = 0;
const COUNT = 1;
const STOP = 2;
const FDS = 3;

interface BunWorker extends Worker {
  ref(): void;
  unref(): void;
}

let url: string | undefined;

/** One Blob URL of the worker's source per process. */
function workerUrl(): string {
  return url ??= URL.createObjectURL(
    new Blob([EPOLL_WORKER_SOURCE], { type: "application/javascript" }),
  );
}

/** The Worker path: a Worker blocked in `epoll_wait` posts to the JS thread. */
class BunWorkerWaiter implements EpollWaiter {
  readonly kind = "bun-worker";
  #o: WaiterOptions;
  #worker: BunWorker;
  #control: Int32Array;
  #fds: Int32Array;
  #one: NativeBlock;
  #wanted = false;
  #closed = false;
  #release: (() => void) | null = null;

  constructor(o: WaiterOptions) {
    this.#o = o;
    this.#control = new Int32Array(new SharedArrayBuffer(4 * (FDS + o.maxEvents)));
    this.#fds = new Int32Array(o.maxEvents);
    this.#one = new NativeBlock(8, 8);
    this.#one.view.setBigUint64(0, 1n, true);
    this.#worker = new Worker(workerUrl()) as BunWorker;
    this.#worker.onmessage = (e: MessageEvent<number>) => this.#message(e.data);
    this.#worker.unref();
    this.#worker.postMessage({
      epfd: o.epfd,
      control: this.#control.buffer,
      maxEvents: o.maxEvents,
      eventSize: o.eventSize,
      dataOffset: o.dataOffset,
      libc: [...LIBRARIES.libc.sonames],
    });
  }

  want(on: boolean): void {
    if (this.#closed || on === this.#wanted) return;
    this.#wanted = on;
    if (on) this.#worker.ref();
    else this.#worker.unref();
  }

  close(release: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#release = release;
    this.#worker.ref(); // until the worker confirms it left epoll_wait
    Atomics.store(this.#control, STOP, 1);
    Atomics.store(this.#control, STATE, 0);
    Atomics.notify(this.#control, STATE);
    native().libc.write(this.#o.wakeFd, this.#one.ptr, 8);
  }

  #message(kind: number): void {
    if (kind === 1) {
      // the worker left its loop: the fds are ours to close
      this.#worker.terminate();
      this.#one.free();
      const release = this.#release;
      this.#release = null;
      release?.();
      return;
    }
    if (this.#closed) return;
    const c = this.#control;
    const n = Atomics.load(c, COUNT);
    const fds = this.#fds;
    for (let i = 0; i < n; i++) fds[i] = c[FDS + i];
    Atomics.store(c, STATE, 0);
    Atomics.notify(c, STATE);
    if (n > 0) this.#o.onEvents(fds, n);
  }
}

/** A socket adopted by `Bun.connect({ fd })` (the part of Bun's `Socket` used here). */
interface AdoptedSocket {
  ref(): void;
  unref(): void;
  terminate(): void;
}

/** The handlers `Bun.connect` calls (`open` runs inside the call for an adopted fd). */
interface AdoptHandlers {
  open(socket: AdoptedSocket): void;
  data(socket: AdoptedSocket, data: unknown): void;
  drain(socket: AdoptedSocket): void;
  close(socket: AdoptedSocket, error?: unknown): void;
  error(socket: AdoptedSocket, error: unknown): void;
  end(socket: AdoptedSocket): void;
}

interface BunConnect {
  connect(options: { fd: number; socket: AdoptHandlers }): Promise<AdoptedSocket>;
}

const F_DUPFD_CLOEXEC = 1030;
/** Consecutive wakes with nothing ready after which the socket path is given up. */
const MAX_EMPTY_WAKES = 64;

/** `Bun` with `connect`, when this Bun has it. */
function bunConnect(): BunConnect | undefined {
  const bun = (globalThis as unknown as { Bun?: Partial<BunConnect> }).Bun;
  return typeof bun?.connect === "function" ? bun as BunConnect : undefined;
}

/**
 * The socket path: no helper thread. Bun's own event loop watches a duplicate of the epoll fd,
 * adopted with `Bun.connect({ fd })` (Bun adopts any fd; an epoll fd is readable while its
 * ready list is not empty). When the set becomes ready, Bun's `recv` on it fails (ENOTSOCK)
 * and Bun closes the duplicate; its `close` handler is the wake-up: the JS thread takes the
 * ready fds with `epoll_wait(..., 0)` and adopts a fresh duplicate while events are still
 * wanted. The adopted socket is ref'd only while events are wanted. If this Bun cannot adopt
 * the fd, the waiter falls back to the Worker path (its `kind` says which path is active).
 */
class BunSocketWaiter implements EpollWaiter {
  #o: WaiterOptions;
  #bun: BunConnect;
  #events: NativeBlock;
  #fds: Int32Array;
  #socket: AdoptedSocket | null = null;
  #adopting = false;
  #wanted = false;
  #closed = false;
  readonly #stopped = (): boolean => this.#closed;
  #fallback: EpollWaiter | null = null;
  #handlers: AdoptHandlers;
  #emptyWakes = 0;

  constructor(o: WaiterOptions, bun: BunConnect) {
    this.#o = o;
    this.#bun = bun;
    this.#events = new NativeBlock(o.maxEvents * o.eventSize, 16);
    this.#fds = new Int32Array(o.maxEvents);
    const ready = (socket: AdoptedSocket) => this.#ready(socket);
    this.#handlers = {
      open: (socket) => {
        if (this.#adopting) this.#socket = socket;
      },
      data() {},
      drain() {},
      close: ready,
      error: ready,
      end: ready,
    };
  }

  get kind(): string {
    return this.#fallback?.kind ?? "bun-socket";
  }

  want(on: boolean): void {
    if (this.#closed) return;
    if (this.#fallback) return this.#fallback.want(on);
    this.#wanted = on;
    const s = this.#socket;
    if (s) {
      if (on) s.ref();
      else s.unref();
    } else if (on && !this.#adopting) this.#adopt();
  }

  close(release: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#wanted = false;
    this.#events.free();
    if (this.#fallback) return this.#fallback.close(release);
    const s = this.#socket;
    this.#socket = null;
    s?.terminate(); // closes the duplicate now
    release();
  }

  #adopt(): void {
    const libc = native().libc;
    const fd = libc.fcntl(this.#o.epfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return this.#fail();
    this.#adopting = true;
    let pending: Promise<AdoptedSocket>;
    try {
      pending = this.#bun.connect({ fd, socket: this.#handlers });
    } catch {
      this.#adopting = false;
      libc.close(fd);
      return this.#fail();
    }
    if (this.#socket) {
      this.#adopting = false;
      pending.catch(this.#refused);
    } else pending.then(this.#openedLate, this.#refused);
  }

  /** A Bun that opens adopted sockets later than inside `connect()`. */
  #openedLate = (socket: AdoptedSocket): void => {
    if (!this.#adopting) return;
    this.#adopting = false;
    if (this.#closed || this.#fallback) return void socket.terminate();
    this.#socket = socket;
    if (!this.#wanted) socket.unref();
  };

  #refused = (): void => {
    this.#adopting = false;
    this.#fail();
  };

  /** The adopted duplicate became readable (and Bun closed it), or Bun gave up on it. */
  #ready(socket: AdoptedSocket): void {
    if (socket !== this.#socket) return;
    this.#socket = null;
    socket.terminate(); // already closed by Bun when its recv failed: a no-op then
    if (this.#closed) return;
    const total = takeReady(this.#o, this.#events, this.#fds, this.#stopped);
    // a wake with nothing ready happens (an fd drained meanwhile), but not many in a row: if Bun
    // closed adopted fds without their being readable, adopting again would spin
    if (total > 0) this.#emptyWakes = 0;
    else if (++this.#emptyWakes > MAX_EMPTY_WAKES) return this.#fail();
    if (this.#wanted && !this.#closed && !this.#socket && !this.#adopting) this.#adopt();
  }

  /** This Bun cannot adopt the fd: wait through a Worker from now on. */
  #fail(): void {
    if (this.#fallback || this.#closed) return;
    const s = this.#socket;
    this.#socket = null;
    s?.terminate();
    this.#fallback = new BunWorkerWaiter(this.#o);
    if (this.#wanted) this.#fallback.want(true);
  }
}

let uringCalls: UringCalls | null | undefined;

/** The raw calls of the io_uring link, bound once (null if libc cannot be opened). */
export function bindUring(): UringCalls | null {
  if (uringCalls !== undefined) return uringCalls;
  const { i64, i32, u64, ptr } = FFIType;
  for (const path of LIBRARIES.libc.sonames) {
    try {
      const lib = dlopen(path, {
        syscall: { args: [i64, i64, i64, i64, i64, i64, i64], returns: i64 },
        mmap: { args: [ptr, u64, i32, i32, i32, i64], returns: i64 },
        munmap: { args: [ptr, u64], returns: i32 },
        socketpair: { args: [i32, i32, i32, ptr], returns: i32 },
      }).symbols;
      const PROT_RW = 3, MAP_SHARED_POPULATE = 0x01 | 0x8000;
      const AF_UNIX = 1, SOCK_STREAM_NONBLOCK_CLOEXEC = 1 | 0x800 | 0x80000;
      return uringCalls = {
        syscall: (nr, a, b, c, d, e, f) => Number(lib.syscall(nr, a, b, c, d, e, f)),
        mmap(length, fd, offset) {
          const at = Number(lib.mmap(null, length, PROT_RW, MAP_SHARED_POPULATE, fd, offset));
          return at <= 0 ? null : at as unknown as NativePointer; // MAP_FAILED is -1
        },
        munmap: (p, length) => lib.munmap(p as never, length),
        socketpair: (sv) => lib.socketpair(AF_UNIX, SOCK_STREAM_NONBLOCK_CLOEXEC, 0, sv as never),
      };
    } catch {
      // try the next soname
    }
  }
  return uringCalls = null;
}

/**
 * The io_uring path (see `wait-uring.ts`): a private io_uring polls the epoll fd and sends one
 * byte into a socketpair whose other end Bun adopted once with `Bun.connect({ fd })`; no helper
 * thread and no adoption per wake. The socket is ref'd only while events are wanted. Falls back
 * to the Worker path if the link fails.
 */
class BunUringWaiter extends UringWaiter {
  #socket: AdoptedSocket | null = null;
  readonly #readFd: number;

  constructor(o: WaiterOptions, link: EpollLink, bun: BunConnect) {
    super(o, link);
    this.#readFd = link.readFd;
    const fail = () => this.fail();
    bun.connect({
      fd: link.readFd,
      socket: {
        open: (socket) => {
          this.#socket = socket;
          socket.unref();
        },
        data: () => this.ready(),
        drain() {},
        close: fail,
        error: fail,
        end: fail,
      },
    }).catch(fail);
  }

  protected get name(): string {
    return "bun-uring";
  }

  protected socket(): AdoptedSocket | null {
    return this.#socket;
  }

  protected closeReadEnd(): void {
    const s = this.#socket;
    this.#socket = null;
    if (s) s.terminate(); // closes the read end
    else native().libc.close(this.#readFd);
  }

  /** The socket waiter, else the Worker. */
  protected fallbackWaiter(o: WaiterOptions): EpollWaiter {
    return socketOrWorker(o);
  }
}

/** The socket waiter, or the Worker one where `Bun.connect` is missing. */
function socketOrWorker(o: WaiterOptions): EpollWaiter {
  const bun = bunConnect();
  return bun ? new BunSocketWaiter(o, bun) : new BunWorkerWaiter(o);
}

/** The io_uring waiter, else the socket waiter, else the Worker one. */
function uringOrSocket(o: WaiterOptions): EpollWaiter {
  const bun = bunConnect();
  const calls = bun ? bindUring() : null;
  const link = bun && calls ? EpollLink.open(calls, o.epfd) : null;
  return link && bun ? new BunUringWaiter(o, link, bun) : socketOrWorker(o);
}

/** Bun's waiters by kind, the default first. */
export const WAITERS: Readonly<Record<string, (options: WaiterOptions) => EpollWaiter>> = {
  "bun-socket": socketOrWorker,
  "bun-uring": uringOrSocket,
  "bun-worker": (o) => new BunWorkerWaiter(o),
};

/** Creates Bun's default waiter: the adopted epoll fd, else the Worker. */
export function createWaiter(options: WaiterOptions): EpollWaiter {
  return socketOrWorker(options);
}
