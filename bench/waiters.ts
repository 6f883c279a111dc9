/**
 * The poller's waiting paths side by side, against a C thread blocked in `epoll_wait`, on the
 * host (no RDMA device): every candidate waits on an epoll set through a real {@link Poller}
 * (`useWaiter` swaps its waiter), a C writer thread writes an eventfd in the set at random gaps
 * (200–600 µs) and stamps each write, and the JS continuation after `await watch.readable()`
 * stamps the wake. Rounds are interleaved (the order rotates each round, C included) and every
 * candidate is compared with the C run of its own round: prints medians, p99 and ratios to C,
 * with their spread over the rounds.
 *
 * Candidates that are not the library's own waiters live here: Workers that tell the main
 * thread by postMessage, by `Atomics.notify` (main thread in `Atomics.waitAsync`) or by writing
 * a socket the main thread's event loop watches; a native thread (compiled at run time: Bun's
 * `cc()`, or the system compiler for Deno) calling a thread-safe callback, or (Deno) writing a
 * unix socket a `Deno.UnixConn` reads; and "floor" rows where the C writer writes straight into a
 * socket the runtime's own event loop watches (no epoll and no helper: the least any event-loop
 * path can cost).
 *
 *   deno run -A bench/waiters.ts [wakes-per-round=1000] [rounds=5] [only=regex]
 *   bun bench/waiters.ts [wakes-per-round=1000] [rounds=5] [only=regex]
 *
 * `only` keeps the candidates whose name matches (e.g. `'^(deno|floor)'`).
 */
import process from "node:process";
import os from "node:os";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { native } from "../ffi/native.ts";
import { NativeBlock } from "../ffi/memory.ts";
import {
  EFD_CLOEXEC,
  type EpollWaiter,
  useWaiter,
  type WaiterFactory,
  type WaiterOptions,
} from "../ffi/wait.ts";
import { Poller } from "../poller/mod.ts";
import type { NativePointer } from "../types/ctypes.ts";
import {
  buildC,
  isBun,
  latencies,
  numberArg,
  openLib,
  openWakeupLib,
  quantile,
  runtimeName,
} from "./wakeup-lib.ts";

const iters = numberArg(0, 1000);
const rounds = numberArg(1, 5);
const MIN = 200, MAX = 600;
const EFD_NONBLOCK = 0x800;
const AF_UNIX = 1, SOCK_STREAM = 1, SOCK_NONBLOCK = 0x800, SOCK_CLOEXEC = 0x80000;
const O_NONBLOCK = 0x800, O_CLOEXEC = 0x80000;

const lib = await openWakeupLib();
const n = native();

interface Sock {
  pipe2(fds: NativePointer, flags: number): number;
  socketpair(domain: number, type: number, protocol: number, sv: NativePointer): number;
  socket(domain: number, type: number, protocol: number): number;
  connect(fd: number, addr: NativePointer, len: number): number;
}
const sock = await openLib<Sock>("libc.so.6", {
  pipe2: { args: ["pointer", "i32"], result: "i32" },
  socketpair: { args: ["i32", "i32", "i32", "pointer"], result: "i32" },
  socket: { args: ["i32", "i32", "i32"], result: "i32" },
  connect: { args: ["i32", "pointer", "u32"], result: "i32" },
});

/** A connected pair of non-blocking unix stream sockets. */
function socketpair(): [number, number] {
  const sv = new NativeBlock(8, 8);
  const r = sock.socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv.ptr);
  const pair: [number, number] = [sv.view.getInt32(0, true), sv.view.getInt32(4, true)];
  sv.free();
  if (r !== 0) throw new Error("socketpair failed");
  return pair;
}

interface Adopted {
  ref(): void;
  unref(): void;
  close(): void;
}

/** Lets the runtime's event loop watch `fd` (a socket) and call `onData` when bytes arrive. */
async function adoptSocket(fd: number, onData: () => void): Promise<Adopted> {
  if (isBun) {
    type S = { ref(): void; unref(): void; terminate(): void };
    const bun = (globalThis as unknown as {
      Bun: { connect(o: { fd: number; socket: Record<string, unknown> }): Promise<S> };
    }).Bun;
    const s = await bun.connect({
      fd,
      socket: { open() {}, data: onData, close() {}, error() {}, drain() {} },
    });
    return { ref: () => s.ref(), unref: () => s.unref(), close: () => s.terminate() };
  }
  const s = new net.Socket({ fd, readable: true, writable: false });
  s.on("data", onData);
  return { ref: () => s.ref(), unref: () => s.unref(), close: () => s.destroy() };
}

// ---- candidates --------------------------------------------------------------------------

interface Runner {
  /** The waiter kind the poller reports (poller candidates). */
  backend?: string;
  /** One round of `iters` wakes; latencies are left in the helper library. */
  run(): Promise<void>;
  close(): void | Promise<void>;
}

interface Candidate {
  name: string;
  /** Helper thread, compiler, idle behaviour: what the row means. */
  how: string;
  setup(): Promise<Runner>;
}

/** A candidate waiting through a real Poller whose waiter comes from `factory`. */
function viaPoller(name: string, how: string, waiter: () => Promise<string | WaiterFactory>) {
  return {
    name,
    how,
    async setup(): Promise<Runner> {
      useWaiter(await waiter());
      const poller = new Poller();
      useWaiter();
      const efd = n.libc.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      const watch = poller.register(efd);
      const cell = new NativeBlock(8, 8);
      // one wake end to end before the rounds (a Worker takes a while to start)
      cell.view.setBigUint64(0, 1n, true);
      n.libc.write(efd, cell.ptr, 8);
      await watch.readable({ timeout: 10_000 });
      while (Number(n.libc.read(efd, cell.ptr, 8)) === 8) { /* drain */ }
      return {
        backend: poller.backend,
        async run() {
          lib.wk_start(efd, iters, MIN, MAX);
          for (let i = 0; i < iters; i++) {
            try {
              await watch.readable({ timeout: 10_000 });
            } catch (e) {
              throw new Error(`${name}: no wake for write ${i} within 10 s`, { cause: e });
            }
            lib.wk_stamp(i);
            // drain, then ack: the next write must not be drained with this one (its edge would
            // be gone), whatever delays this thread between the stamp and the drain
            while (Number(n.libc.read(efd, cell.ptr, 8)) === 8) { /* drain */ }
            lib.wk_ack(i);
          }
          lib.wk_join();
        },
        close() {
          watch.close();
          poller.close();
          n.libc.close(efd);
          cell.free();
        },
      };
    },
  } satisfies Candidate;
}

const STATE = 0, COUNT = 1, STOP = 2, FDS = 3;
type WorkerMode = "post" | "notify" | "socket";

interface AtomicsWithWaitAsync {
  waitAsync(
    a: Int32Array,
    index: number,
    value: number,
  ): { async: boolean; value: Promise<string> | string };
}

/** A Worker blocked in epoll_wait (`wakeup-worker.ts`) that tells the main thread by `mode`. */
class WorkerWaiter implements EpollWaiter {
  readonly kind: string;
  #o: WaiterOptions;
  #mode: WorkerMode;
  #worker: Worker & { ref?(): void; unref?(): void };
  #c: Int32Array;
  #fds: Int32Array;
  #one = new NativeBlock(8, 8);
  #socket: Adopted | undefined;
  #pair: [number, number] | undefined;
  #closed = false;
  #release: (() => void) | null = null;

  static async create(o: WaiterOptions, mode: WorkerMode): Promise<WorkerWaiter> {
    const w = new WorkerWaiter(o, mode);
    if (mode === "socket") {
      w.#pair = socketpair();
      w.#socket = await adoptSocket(w.#pair[0], () => w.#take());
    }
    w.#start();
    return w;
  }

  private constructor(o: WaiterOptions, mode: WorkerMode) {
    this.kind = `worker-${mode}`;
    this.#o = o;
    this.#mode = mode;
    this.#c = new Int32Array(new SharedArrayBuffer(4 * (FDS + o.maxEvents)));
    this.#fds = new Int32Array(o.maxEvents);
    this.#one.view.setBigUint64(0, 1n, true);
    this.#worker = new Worker(new URL("./wakeup-worker.ts", import.meta.url).href, {
      type: "module",
    });
    this.#worker.onmessage = (e: MessageEvent<number>) => {
      if (e.data === 0) this.#take();
      else this.#ended();
    };
  }

  #start(): void {
    if (this.#mode === "notify") this.#arm();
    this.#worker.postMessage({
      epfd: this.#o.epfd,
      control: this.#c.buffer,
      maxEvents: this.#o.maxEvents,
      eventSize: this.#o.eventSize,
      dataOffset: this.#o.dataOffset,
      mode: this.#mode,
      socketFd: this.#pair?.[1] ?? -1,
    });
  }

  #arm(): void {
    if (this.#closed) return;
    const r = (Atomics as unknown as AtomicsWithWaitAsync).waitAsync(this.#c, STATE, 0);
    if (r.async) (r.value as Promise<string>).then(() => this.#take());
    else queueMicrotask(() => this.#take());
  }

  #take(): void {
    if (this.#closed) return;
    const c = this.#c;
    if (Atomics.load(c, STATE) === 1) {
      const count = Atomics.load(c, COUNT);
      for (let i = 0; i < count; i++) this.#fds[i] = c[FDS + i];
      Atomics.store(c, STATE, 0);
      Atomics.notify(c, STATE);
      this.#o.onEvents(this.#fds, count);
    }
    if (this.#mode === "notify") this.#arm();
  }

  want(on: boolean): void {
    if (on) {
      this.#worker.ref?.();
      this.#socket?.ref();
    } else {
      this.#worker.unref?.();
      this.#socket?.unref();
    }
  }

  close(release: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#release = release;
    Atomics.store(this.#c, STOP, 1);
    Atomics.store(this.#c, STATE, 0);
    Atomics.notify(this.#c, STATE);
    n.libc.write(this.#o.wakeFd, this.#one.ptr, 8);
  }

  #ended(): void {
    this.#worker.terminate();
    this.#socket?.close();
    if (this.#pair) n.libc.close(this.#pair[1]);
    this.#one.free();
    this.#release?.();
    this.#release = null;
  }
}

interface WaiterThread {
  wt_start(
    epfd: number,
    events: NativePointer,
    maxEvents: number,
    ackFd: number,
    callback: NativePointer,
  ): number;
  wt_stop(): void;
  wt_start_fd(
    epfd: number,
    events: NativePointer,
    maxEvents: number,
    ackFd: number,
    notifyFd: number,
  ): number;
}

/**
 * A native thread (c/waiter-thread.c) blocked in `epoll_wait` on the poller's set: it leaves the
 * ready events in a buffer, tells the JS thread (how: the subclass's), and sleeps until the JS
 * thread has taken them ({@link PthreadWaiter.take} writes the ack eventfd).
 */
abstract class PthreadWaiter implements EpollWaiter {
  abstract readonly kind: string;
  protected readonly o: WaiterOptions;
  readonly #wt: WaiterThread;
  protected readonly events: NativeBlock;
  readonly #fds: Int32Array;
  protected readonly ack: number;
  readonly #one = new NativeBlock(8, 8);
  #closed = false;

  constructor(o: WaiterOptions, wt: WaiterThread) {
    this.o = o;
    this.#wt = wt;
    this.events = new NativeBlock(o.maxEvents * o.eventSize, 16);
    this.#fds = new Int32Array(o.maxEvents);
    this.ack = n.libc.eventfd(0, EFD_CLOEXEC); // blocking: the thread sleeps in read()
    this.#one.view.setBigUint64(0, 1n, true);
  }

  protected get closed(): boolean {
    return this.#closed;
  }

  /** The thread found `count` events: hand them to the poller and let the thread go on. */
  protected take(count: number): void {
    if (this.#closed) return;
    const { eventSize, dataOffset } = this.o;
    const view = this.events.view;
    for (let i = 0; i < count; i++) this.#fds[i] = view.getInt32(i * eventSize + dataOffset, true);
    n.libc.write(this.ack, this.#one.ptr, 8);
    if (count > 0) this.o.onEvents(this.#fds, count);
  }

  abstract want(on: boolean): void;

  /** What the subclass closes once the thread has left. */
  protected abstract release(): void;

  close(release: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#wt.wt_stop();
    n.libc.write(this.o.wakeFd, this.#one.ptr, 8);
    n.libc.write(this.ack, this.#one.ptr, 8);
    // the thread leaves at its next wake; give it a moment before the fds go away
    setTimeout(() => {
      this.release();
      n.libc.close(this.ack);
      this.events.free();
      this.#one.free();
      release();
    }, 20);
  }
}

/** A native thread calling a thread-safe JS callback. */
class NativeThreadWaiter extends PthreadWaiter {
  readonly kind = isBun ? "cc-thread" : "native-thread";
  #callback: { ref?(): void; unref?(): void; close(): void };

  constructor(o: WaiterOptions, wt: WaiterThread, callback: NativeThreadCallback) {
    super(o, wt);
    const made = callback((count) => this.take(count));
    this.#callback = made.handle;
    made.handle.unref?.();
    if (wt.wt_start(o.epfd, this.events.ptr, o.maxEvents, this.ack, made.pointer) !== 0) {
      throw new Error("pthread_create failed");
    }
  }

  want(on: boolean): void {
    if (on) this.#callback.ref?.();
    else this.#callback.unref?.();
  }

  /** The callback stays open (unref'd): a thread late to leave may still call it. */
  protected release(): void {}
}

type NativeThreadCallback = (
  fn: (count: number) => void,
) => { pointer: NativePointer; handle: { ref?(): void; unref?(): void; close(): void } };

const waiterThreadC = fileURLToPath(new URL("./c/waiter-thread.c", import.meta.url).href);
const WT_DEFS = {
  wt_start: { args: ["i32", "pointer", "i32", "i32", "pointer"], result: "i32" },
  wt_stop: { args: [], result: "void" },
  wt_start_fd: { args: ["i32", "pointer", "i32", "i32", "i32"], result: "i32" },
} as const;

/**
 * A native thread that relays each wake as 4 bytes written into a unix socket whose other end is a
 * `Deno.UnixConn` (the floor's path, one thread wake before it).
 */
class RelayWaiter extends PthreadWaiter {
  readonly kind = "native-relay";
  #conn: Deno.UnixConn;
  #relayFd: number;

  constructor(o: WaiterOptions, wt: WaiterThread, conn: Deno.UnixConn, relayFd: number) {
    super(o, wt);
    this.#conn = conn;
    this.#relayFd = relayFd;
    if (wt.wt_start_fd(o.epfd, this.events.ptr, o.maxEvents, this.ack, relayFd) !== 0) {
      throw new Error("pthread_create failed");
    }
    this.#loop();
  }

  async #loop(): Promise<void> {
    const buf = new Uint8Array(64);
    const counts = new DataView(buf.buffer);
    for (;;) {
      const got = await this.#conn.read(buf).catch(() => null);
      if (got === null || this.closed) return;
      for (let at = 0; at + 4 <= got; at += 4) this.take(counts.getInt32(at, true));
    }
  }

  /** The read stays ref'd (the round keeps the process busy anyway); `close` ends it. */
  want(_on: boolean): void {}

  protected release(): void {
    this.#conn.close();
    n.libc.close(this.#relayFd);
  }
}

/**
 * A connected unix stream socket pair across the runtime: a native end (`fd`, for a C thread to
 * write) and a `Deno.UnixConn` (Deno's own reads), through a listener at `path` (a file, or an
 * abstract name starting with NUL) closed once they are connected.
 */
async function unixConnPair(path: string): Promise<{ conn: Deno.UnixConn; fd: number }> {
  const listener = Deno.listen({ transport: "unix", path });
  const fd = sock.socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const addr = new NativeBlock(110, 8);
  addr.view.setUint16(0, AF_UNIX, true);
  const { written } = new TextEncoder().encodeInto(path, addr.bytes.subarray(2));
  const accepted = listener.accept();
  const connected = sock.connect(fd, addr.ptr, 2 + written);
  addr.free();
  if (connected !== 0) throw new Error(`connect to ${JSON.stringify(path)} failed`);
  const conn = await accepted;
  listener.close();
  return { conn, fd };
}

/** The relay thread, writing into a pair's native end. */
async function relayFactory(): Promise<WaiterFactory> {
  const wt = await openLib<WaiterThread>(buildC("waiter-thread"), WT_DEFS);
  const { conn, fd } = await unixConnPair(`\0rdma-relay-${Deno.pid}`);
  return (o) => new RelayWaiter(o, wt, conn, fd);
}

/** Compiles the waiter thread (Bun: `cc()`, i.e. TinyCC; Deno: the system compiler). */
async function nativeThreadFactory(): Promise<WaiterFactory> {
  let wt: WaiterThread;
  let callback: NativeThreadCallback;
  if (isBun) {
    const ffi = await import("bun:ffi");
    const symbols: Record<string, { args: string[]; returns: string }> = {};
    for (const [k, v] of Object.entries(WT_DEFS)) {
      symbols[k] = { args: [...v.args], returns: v.result };
    }
    wt = ffi.cc({ source: waiterThreadC, symbols: symbols as never })
      .symbols as unknown as WaiterThread;
    callback = (fn) => {
      const cb = new ffi.JSCallback(fn, { args: ["i32"], returns: "void", threadsafe: true });
      return { pointer: cb.ptr as unknown as NativePointer, handle: cb };
    };
  } else {
    wt = await openLib<WaiterThread>(buildC("waiter-thread"), WT_DEFS);
    callback = (fn) => {
      const cb = Deno.UnsafeCallback.threadSafe({ parameters: ["i32"], result: "void" }, fn);
      return { pointer: cb.pointer as unknown as NativePointer, handle: cb };
    };
  }
  return (o) => new NativeThreadWaiter(o, wt, callback);
}

/** Worker waiters need an await (the socket's adoption): the poller gets a stand-in. */
function workerFactory(mode: WorkerMode): () => Promise<WaiterFactory> {
  return () =>
    Promise.resolve((o: WaiterOptions): EpollWaiter => {
      let made: WorkerWaiter | undefined;
      let wanted = false;
      let release: (() => void) | undefined;
      WorkerWaiter.create(o, mode).then((w) => {
        made = w;
        w.want(wanted);
        if (release) w.close(release);
      });
      return {
        kind: `worker-${mode}`,
        want(on) {
          wanted = on;
          made?.want(on);
        },
        close(r) {
          if (made) made.close(r);
          else release = r;
        },
      };
    });
}

/** A floor row: the C writer writes straight into a socket the runtime's event loop watches. */
function floor(
  name: string,
  how: string,
  kind: "adopt" | "unixconn" | "bunfile" | "sigio" | "nbcall",
): Candidate {
  return {
    name,
    how,
    async setup(): Promise<Runner> {
      if (kind === "sigio") return sigioRunner();
      if (kind === "nbcall") return nonblockingCallRunner();
      if (kind === "bunfile") {
        // a pipe whose read end Bun's own I/O reads: Bun.file(fd).stream()
        const fds = new NativeBlock(8, 8);
        if (sock.pipe2(fds.ptr, O_NONBLOCK | O_CLOEXEC) !== 0) throw new Error("pipe2 failed");
        const [r, w] = [fds.view.getInt32(0, true), fds.view.getInt32(4, true)];
        fds.free();
        const bun = (globalThis as unknown as {
          Bun: { file(fd: number): { stream(): ReadableStream<Uint8Array> } };
        }).Bun;
        const reader = bun.file(r).stream().getReader();
        return {
          async run() {
            lib.wk_start(w, iters, MIN, MAX);
            for (let i = 0; i < iters;) {
              const { value } = await reader.read();
              // one chunk per write (the writer waits for each stamp), unless a read raced ahead
              for (let k = 0; k < Math.max(1, Math.floor((value?.length ?? 8) / 8)); k++) {
                if (i < iters) lib.wk_woken(i++);
              }
            }
            lib.wk_join();
          },
          close() {
            reader.cancel().catch(() => {});
            n.libc.close(w);
          },
        };
      }
      if (kind === "unixconn") {
        const dir = Deno.makeTempDirSync();
        const { conn, fd } = await unixConnPair(`${dir}/s`);
        const buf = new Uint8Array(64);
        return {
          async run() {
            lib.wk_start(fd, iters, MIN, MAX);
            for (let i = 0; i < iters; i++) {
              await conn.read(buf);
              lib.wk_woken(i);
            }
            lib.wk_join();
          },
          close() {
            conn.close();
            n.libc.close(fd);
            Deno.removeSync(dir, { recursive: true });
          },
        };
      }
      const [a, b] = socketpair();
      let i = 0;
      let done: () => void = () => {};
      const s = await adoptSocket(a, () => {
        lib.wk_woken(i);
        if (++i === iters) done();
      });
      s.unref();
      return {
        async run() {
          i = 0;
          s.ref();
          const finished = new Promise<void>((r) => done = r);
          lib.wk_start(b, iters, MIN, MAX);
          let stall: ReturnType<typeof setTimeout> | undefined;
          const stalled = new Promise<never>((_, reject) => {
            stall = setTimeout(() => reject(new Error(`${name}: stalled at write ${i}`)), 60_000);
          });
          await Promise.race([finished, stalled]);
          clearTimeout(stall);
          lib.wk_join();
          s.unref();
        },
        close() {
          s.close();
          n.libc.close(b);
        },
      };
    },
  };
}

/**
 * Deno's nonblocking call with no poller: a `nonblocking: true` `epoll_wait` on a set holding only
 * the eventfd the C writer writes, awaited by the loop itself. Against the library's default waiter
 * (the same call through a poller and a watch) it splits the default's cost into Deno's hand-back
 * of the call and the poller's own work.
 */
function nonblockingCallRunner(): Runner {
  const nb = Deno.dlopen(
    "libc.so.6",
    {
      epoll_wait: {
        parameters: ["i32", "pointer", "i32", "i32"],
        result: "i32",
        nonblocking: true,
      },
    } as const,
  );
  const EPOLL_CTL_ADD = 1, EPOLLIN = 1, EPOLLET = 1 << 31;
  const epfd = n.libc.epoll_create1(0);
  const efd = n.libc.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const ev = new NativeBlock(16, 8);
  ev.view.setUint32(0, (EPOLLIN | EPOLLET) >>> 0, true);
  ev.view.setInt32(4, efd, true);
  if (n.libc.epoll_ctl(epfd, EPOLL_CTL_ADD, efd, ev.ptr) !== 0) throw new Error("epoll_ctl failed");
  const cell = new NativeBlock(8, 8);
  const events = ev.ptr as unknown as Deno.PointerValue;
  return {
    async run() {
      lib.wk_start(efd, iters, MIN, MAX);
      for (let i = 0; i < iters; i++) {
        await nb.symbols.epoll_wait(epfd, events, 1, -1);
        lib.wk_stamp(i);
        while (Number(n.libc.read(efd, cell.ptr, 8)) === 8) { /* drain */ }
        lib.wk_ack(i);
      }
      lib.wk_join();
    },
    close() {
      n.libc.close(efd);
      n.libc.close(epfd);
      ev.free();
      cell.free();
      nb.close();
    },
  };
}

/**
 * The runtime's signal path: the C writer writes a pipe whose read end has `O_ASYNC` (owner: this
 * process), so the kernel sends SIGIO at each write, and the runtime's own SIGIO listener drains
 * the pipe. The listener is installed before `O_ASYNC` is set (SIGIO's default action ends the
 * process). The completion channel's fd supports `O_ASYNC` too (uverbs' `fasync`); an epoll fd,
 * an eventfd and the rdma_cm fd do not.
 */
function sigioRunner(): Runner {
  const F_SETFL = 4, F_SETOWN = 8, O_ASYNC = 0x2000;
  const fds = new NativeBlock(8, 8);
  if (sock.pipe2(fds.ptr, O_NONBLOCK | O_CLOEXEC) !== 0) throw new Error("pipe2 failed");
  const [r, w] = [fds.view.getInt32(0, true), fds.view.getInt32(4, true)];
  fds.free();
  const buf = new NativeBlock(256, 8);
  let i = 0;
  let done: () => void = () => {};
  const onSignal = () => {
    for (let got = Number(n.libc.read(r, buf.ptr, 256)); got > 0;) {
      for (let k = 0; k < got >> 3; k++) {
        if (i < iters) lib.wk_woken(i++);
      }
      if (i === iters) done();
      got = Number(n.libc.read(r, buf.ptr, 256));
    }
  };
  const proc = process as unknown as {
    on(s: string, f: () => void): void;
    off(s: string, f: () => void): void;
  };
  if (isBun) proc.on("SIGIO", onSignal);
  else Deno.addSignalListener("SIGIO", onSignal);
  if (n.libc.fcntl(r, F_SETOWN, n.libc.getpid()) !== 0) throw new Error("F_SETOWN failed");
  if (n.libc.fcntl(r, F_SETFL, O_NONBLOCK | O_ASYNC) !== 0) throw new Error("F_SETFL failed");
  return {
    async run() {
      i = 0;
      const finished = new Promise<void>((res) => done = res);
      lib.wk_start(w, iters, MIN, MAX);
      await finished;
      lib.wk_join();
    },
    close() {
      n.libc.fcntl(r, F_SETFL, O_NONBLOCK);
      if (isBun) proc.off("SIGIO", onSignal);
      else Deno.removeSignalListener("SIGIO", onSignal);
      n.libc.close(r);
      n.libc.close(w);
      buf.free();
    },
  };
}

const only = new RegExp((isBun ? process.argv.slice(2) : Deno.args)[2] ?? "");

const candidates: Candidate[] = (isBun
  ? [
    viaPoller(
      "bun-socket (default)",
      "no helper thread: Bun.connect({ fd }) adopts a dup of the epoll fd, again after each wake",
      () => Promise.resolve("bun-socket"),
    ),
    viaPoller(
      "bun-uring",
      "no helper thread: io_uring polls the epoll fd, sends a byte to a socket Bun.connect adopted",
      () => Promise.resolve("bun-uring"),
    ),
    viaPoller(
      "bun-worker (previous default, fallback)",
      "Worker in epoll_wait, postMessage",
      () => Promise.resolve("bun-worker"),
    ),
    viaPoller(
      "worker + Atomics.waitAsync",
      "Worker in epoll_wait, Atomics.notify",
      workerFactory("notify"),
    ),
    viaPoller(
      "worker + socketpair (Bun.connect)",
      "Worker in epoll_wait writes a socket Bun watches",
      workerFactory("socket"),
    ),
    viaPoller(
      "cc() thread + threadsafe JSCallback",
      "pthread compiled at run time by cc() (TinyCC)",
      nativeThreadFactory,
    ),
    floor(
      "floor: C writes a socket Bun.connect watches",
      "no epoll, no helper, no poller",
      "adopt",
    ),
    floor(
      "floor: C writes a pipe, Bun.file(fd).stream()",
      "no epoll, no helper, no poller",
      "bunfile",
    ),
    floor("sigio: C writes a pipe with O_ASYNC, process.on('SIGIO')", "the signal path", "sigio"),
  ]
  : [
    viaPoller(
      "deno-nonblocking (default, as before)",
      "one nonblocking epoll_wait in flight (Deno's blocking pool)",
      () => Promise.resolve("deno-nonblocking"),
    ),
    viaPoller(
      "deno-uring",
      "no helper thread: io_uring polls the epoll fd, sends a byte to a socket node:net watches",
      () => Promise.resolve("deno-uring"),
    ),
    viaPoller(
      "worker + postMessage",
      "Worker in epoll_wait (cannot be unref'd)",
      workerFactory("post"),
    ),
    viaPoller(
      "worker + Atomics.waitAsync",
      "Worker in epoll_wait (cannot be unref'd)",
      workerFactory("notify"),
    ),
    viaPoller(
      "worker + socketpair (node:net)",
      "Worker in epoll_wait writes a socket node:net watches",
      workerFactory("socket"),
    ),
    viaPoller(
      "native thread + UnsafeCallback.threadSafe",
      "pthread built by the system compiler",
      nativeThreadFactory,
    ),
    viaPoller(
      "native relay thread + Deno.UnixConn",
      "pthread built by the system compiler writes a unix socket Deno reads",
      relayFactory,
    ),
    floor(
      "nonblocking epoll_wait, no poller",
      "the default waiter's call awaited by the loop itself: Deno's hand-back alone",
      "nbcall",
    ),
    floor(
      "floor: C writes a socket node:net watches",
      "no epoll, no helper, no poller",
      "adopt",
    ),
    floor(
      "floor: C writes a unix socket, Deno.UnixConn.read",
      "no epoll, no helper, no poller",
      "unixconn",
    ),
    floor(
      "sigio: C writes a pipe with O_ASYNC, Deno.addSignalListener",
      "the signal path",
      "sigio",
    ),
  ]).filter((c) => only.test(c.name));

// ---- run -----------------------------------------------------------------------------------

interface Row {
  medians: number[];
  p99s: number[];
  ratios: number[];
  p99ratios: number[];
}

const runners: Runner[] = [];
for (const c of candidates) runners.push(await c.setup());
const rows: Row[] = candidates.map(() => ({ medians: [], p99s: [], ratios: [], p99ratios: [] }));
const cRow: Row = { medians: [], p99s: [], ratios: [], p99ratios: [] };

const version = isBun
  ? `bun ${(globalThis as unknown as { Bun: { version: string } }).Bun.version}`
  : `deno ${Deno.version.deno} (V8 ${Deno.version.v8})`;
console.log(
  `waiters: ${iters} wakes per round, ${rounds} interleaved rounds, gaps ${MIN}-${MAX} µs; ` +
    `${version}; ${os.cpus()[0]?.model ?? "?"} x${os.cpus().length}; ` +
    `Linux ${os.release()}; ${new Date().toISOString().slice(0, 10)}`,
);

for (let r = 0; r < rounds; r++) {
  const order = [-1, ...candidates.map((_, i) => i)];
  const shift = r % order.length;
  const rotated = [...order.slice(shift), ...order.slice(0, shift)];
  const roundMedian = new Map<number, { median: number; p99: number }>();
  for (const k of rotated) {
    process.stderr.write(`round ${r + 1}/${rounds}: ${k < 0 ? "C" : candidates[k].name}\n`);
    if (k < 0) lib.wk_c_baseline(iters, MIN, MAX);
    else await runners[k].run();
    const xs = latencies(lib, iters);
    roundMedian.set(k, { median: quantile(xs, 0.5), p99: quantile(xs, 0.99) });
  }
  const c = roundMedian.get(-1)!;
  cRow.medians.push(c.median);
  cRow.p99s.push(c.p99);
  for (let k = 0; k < candidates.length; k++) {
    const m = roundMedian.get(k)!;
    rows[k].medians.push(m.median);
    rows[k].p99s.push(m.p99);
    rows[k].ratios.push(m.median / c.median);
    rows[k].p99ratios.push(m.p99 / c.p99);
  }
}

for (const r of runners) await r.close();

const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const span = (xs: number[], d: number) =>
  `${Math.min(...xs).toFixed(d)}–${Math.max(...xs).toFixed(d)}`;
const line = (name: string, row: Row, ratio: boolean) =>
  `| ${name} | ${med(row.medians).toFixed(1)} (${span(row.medians, 1)}) | ` +
  `${med(row.p99s).toFixed(0)} | ` +
  (ratio
    ? `${med(row.ratios).toFixed(2)}× (${span(row.ratios, 2)}) | ${
      med(row.p99ratios).toFixed(2)
    }× |`
    : `1 | 1 |`);

console.log(
  `\n| ${runtimeName} waiter | median µs (rounds' range) | p99 µs | median / C (range) | p99 / C |`,
);
console.log("|---|---|---|---|---|");
console.log(line("C thread in epoll_wait", cRow, false));
candidates.forEach((c, k) => {
  const backend = runners[k].backend ? ` [${runners[k].backend}]` : "";
  console.log(line(`${c.name}${backend}`, rows[k], true));
});
console.log("");
candidates.forEach((c) => console.log(`- ${c.name}: ${c.how}`));
process.exit(0);
