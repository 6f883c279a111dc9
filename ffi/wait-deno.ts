/**
 * Deno's epoll waiters:
 *
 * - `deno-nonblocking` (default): exactly one `nonblocking: true` `epoll_wait` in flight, and
 *   only while the poller wants events (an in-flight call keeps the process alive and holds one
 *   of the blocking pool's threads). Cancelled by writing the poller's eventfd.
 * - `deno-uring`: a private io_uring polls the epoll fd and sends one byte into a socketpair
 *   whose other end `node:net` watches (`wait-uring.ts`; Deno's `node:net` adopts socket fds but
 *   refuses an epoll fd or an eventfd). Falls back to `deno-nonblocking` if the link fails.
 *
 * The nonblocking call wakes two threads; the io_uring path wakes one, but loads `node:net` with
 * the first poller and needs io_uring. Neither wins on every host, so the nonblocking call stays
 * the default (no dependency, no start-up cost). Deno Workers cannot be unref'd, so none is used.
 * `poller/README.md` compares every waiter tried, and `bench/waiters.ts` measures them (figures
 * in `bench/results/`).
 *
 * @module
 */

import type { EpollWaiter, WaiterOptions } from "./wait.ts";
import { native } from "./native.ts";
import { LIBC } from "../types/symbols/libc.ts";
import { LIBRARIES } from "./library.ts";
import { NativeBlock } from "./memory.ts";
import { RdmaError } from "../types/errors.ts";
import type { NativePointer } from "../types/ctypes.ts";
import { EpollLink, type UringCalls, UringWaiter } from "./wait-uring.ts";
import { deliverEvents } from "./epoll-ready.ts";

type WaitFn = (
  epfd: number,
  events: Deno.PointerValue,
  maxEvents: number,
  timeout: number,
) => Promise<number>;

let epollWaitAsync: WaitFn | undefined;

function asyncEpollWait(): WaitFn {
  if (epollWaitAsync) return epollWaitAsync;
  const spec = LIBC.epoll_wait;
  let last: unknown;
  for (const path of LIBRARIES.libc.sonames) {
    try {
      const lib = Deno.dlopen(
        path,
        {
          epoll_wait: {
            parameters: ["i32", "pointer", "i32", "i32"],
            result: "i32",
            nonblocking: true,
          },
        } as const,
      );
      return epollWaitAsync = lib.symbols.epoll_wait as WaitFn;
    } catch (e) {
      last = e;
    }
  }
  throw new RdmaError(`cannot bind ${spec.c} as a nonblocking call: ${last}`);
}

class DenoWaiter implements EpollWaiter {
  readonly kind = "deno-nonblocking";
  #o: WaiterOptions;
  #wait = asyncEpollWait();
  #buf: NativeBlock;
  #fds: Int32Array;
  #one: NativeBlock;
  #inFlight = false;
  #wanted = false;
  #release: (() => void) | null = null;
  #closed = false;
  #done = (n: number) => this.#finished(n);

  constructor(o: WaiterOptions) {
    this.#o = o;
    this.#buf = new NativeBlock(o.maxEvents * o.eventSize, 16);
    this.#fds = new Int32Array(o.maxEvents);
    this.#one = new NativeBlock(8, 8);
    this.#one.view.setBigUint64(0, 1n, true);
  }

  want(on: boolean): void {
    if (this.#closed) return;
    this.#wanted = on;
    if (on) {
      if (!this.#inFlight) this.#start();
    } else if (this.#inFlight) this.#kick();
  }

  close(release: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#wanted = false;
    this.#release = release;
    if (this.#inFlight) this.#kick();
    else this.#free();
  }

  #start(): void {
    this.#inFlight = true;
    this.#wait(this.#o.epfd, this.#buf.ptr as unknown as Deno.PointerValue, this.#o.maxEvents, -1)
      .then(this.#done);
  }

  #kick(): void {
    native().libc.write(this.#o.wakeFd, this.#one.ptr, 8);
  }

  #finished(n: number): void {
    this.#inFlight = false;
    if (this.#closed) return this.#free();
    // n < 0: EINTR (errno is not readable for calls made on another thread); retry.
    deliverEvents(this.#o, this.#buf.view, this.#fds, n);
    if (this.#wanted && !this.#inFlight && !this.#closed) this.#start();
  }

  #free(): void {
    this.#buf.free();
    this.#one.free();
    const release = this.#release;
    this.#release = null;
    release?.();
  }
}

let uringCalls: UringCalls | null | undefined;

/** The raw calls of the io_uring link, bound once (null if libc cannot be opened). */
export function bindUring(): UringCalls | null {
  if (uringCalls !== undefined) return uringCalls;
  for (const path of LIBRARIES.libc.sonames) {
    try {
      const lib = Deno.dlopen(
        path,
        {
          syscall: { parameters: ["i64", "i64", "i64", "i64", "i64", "i64", "i64"], result: "i64" },
          mmap: { parameters: ["pointer", "usize", "i32", "i32", "i32", "i64"], result: "pointer" },
          munmap: { parameters: ["pointer", "usize"], result: "i32" },
          socketpair: { parameters: ["i32", "i32", "i32", "pointer"], result: "i32" },
        } as const,
      ).symbols;
      const PROT_RW = 3, MAP_SHARED_POPULATE = 0x01 | 0x8000;
      const AF_UNIX = 1, SOCK_STREAM_NONBLOCK_CLOEXEC = 1 | 0x800 | 0x80000;
      return uringCalls = {
        syscall: (nr, a, b, c, d, e, f) =>
          Number(
            lib.syscall(
              BigInt(nr),
              BigInt(a),
              BigInt(b),
              BigInt(c),
              BigInt(d),
              BigInt(e),
              BigInt(f),
            ),
          ),
        mmap(length, fd, offset) {
          const p = lib.mmap(
            null,
            BigInt(length),
            PROT_RW,
            MAP_SHARED_POPULATE,
            fd,
            BigInt(offset),
          );
          return p === null || Deno.UnsafePointer.value(p) === 0xffffffffffffffffn
            ? null
            : p as unknown as NativePointer;
        },
        munmap: (p, length) => lib.munmap(p as unknown as Deno.PointerValue, BigInt(length)),
        socketpair: (sv) =>
          lib.socketpair(
            AF_UNIX,
            SOCK_STREAM_NONBLOCK_CLOEXEC,
            0,
            sv as unknown as Deno.PointerValue,
          ),
      };
    } catch {
      // try the next soname
    }
  }
  return uringCalls = null;
}

/** The part of a `node:net` Socket used here. */
interface NetSocket {
  on(event: "data" | "error" | "close", listener: () => void): unknown;
  ref(): unknown;
  unref(): unknown;
  destroy(): unknown;
}
type NetSocketClass = new (
  options: { fd: number; readable: boolean; writable: boolean },
) => NetSocket;

let netSocket: NetSocketClass | null | undefined;

/** `node:net`'s Socket, loaded on first use (it costs tens of ms to load; null if missing). */
function socketClass(): NetSocketClass | null {
  if (netSocket !== undefined) return netSocket;
  try {
    const p = (globalThis as {
      process?: { getBuiltinModule?(id: string): { Socket?: NetSocketClass } | undefined };
    }).process;
    return netSocket = p?.getBuiltinModule?.("node:net")?.Socket ?? null;
  } catch {
    return netSocket = null;
  }
}

/**
 * The io_uring path: no helper thread. A private io_uring polls the epoll fd and, when the set
 * is ready, sends one byte into a socketpair whose other end Deno's own event loop watches
 * (through `node:net`, which adopts socket fds; it refuses an epoll fd or an eventfd). The
 * kernel does the send in the JS thread's own context and wakes it from its event loop's
 * `epoll_wait`; the JS thread then takes the ready fds with `epoll_wait(..., 0)` and re-arms the
 * poll while events are wanted. The socket is ref'd only while events are wanted, so an idle
 * process exits; the ring itself never keeps the process alive. If anything fails (no io_uring,
 * a refused submission), the waiter falls back to the nonblocking path and `kind` says so.
 */
class DenoUringWaiter extends UringWaiter {
  readonly #socket: NetSocket;

  constructor(o: WaiterOptions, link: EpollLink, Socket: NetSocketClass) {
    super(o, link);
    this.#socket = new Socket({ fd: link.readFd, readable: true, writable: false });
    this.#socket.on("data", () => this.ready());
    this.#socket.on("error", () => this.fail());
    this.#socket.unref();
  }

  protected get name(): string {
    return "deno-uring";
  }

  protected socket(): NetSocket {
    return this.#socket;
  }

  protected closeReadEnd(): void {
    this.#socket.destroy(); // closes the read end
  }

  /** The nonblocking path. */
  protected fallbackWaiter(o: WaiterOptions): EpollWaiter {
    return new DenoWaiter(o);
  }
}

/** The io_uring waiter, or the nonblocking one where io_uring or `node:net` is missing. */
function uringOrNonblocking(o: WaiterOptions): EpollWaiter {
  const calls = bindUring();
  const Socket = socketClass();
  const link = calls && Socket ? EpollLink.open(calls, o.epfd) : null;
  if (!link || !Socket) return new DenoWaiter(o);
  try {
    return new DenoUringWaiter(o, link, Socket);
  } catch {
    link.close();
    native().libc.close(link.readFd);
    return new DenoWaiter(o);
  }
}

/** Deno's waiters by kind, the default first. */
export const WAITERS: Readonly<Record<string, (options: WaiterOptions) => EpollWaiter>> = {
  "deno-nonblocking": (o) => new DenoWaiter(o),
  "deno-uring": uringOrNonblocking,
};

/** Creates Deno's default waiter (the nonblocking path: see the measurements above). */
export function createWaiter(options: WaiterOptions): EpollWaiter {
  return new DenoWaiter(options);
}
