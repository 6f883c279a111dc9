/**
 * The Worker of the Worker-based candidates in `waiters.ts`, for both runtimes: blocks in
 * `epoll_wait` on the poller's set, copies the ready fds into shared memory, tells the JS thread
 * (`post`: postMessage; `notify`: Atomics.notify for a main thread in Atomics.waitAsync;
 * `socket`: writes one byte to a socket the main thread's event loop watches) and sleeps until
 * the JS thread took them. Shared words: [state, count, stop, fds...]; state 1 = fds published.
 */

/** The first message. */
export interface WorkerStart {
  /** The epoll set. */
  epfd: number;
  /** The shared words. */
  control: SharedArrayBuffer;
  /** Ready fds per wake. */
  maxEvents: number;
  /** `sizeof(struct epoll_event)`. */
  eventSize: number;
  /** `offsetof(struct epoll_event, data)`. */
  dataOffset: number;
  /** How to tell the main thread. */
  mode: "post" | "notify" | "socket";
  /** The socket to write in `socket` mode. */
  socketFd: number;
}

interface Scope {
  onmessage: ((e: MessageEvent<WorkerStart>) => void) | null;
  postMessage(m: unknown): void;
}

type EpollWait = (epfd: number, events: Uint8Array, max: number, timeout: number) => number;
type Write = (fd: number, buf: Uint8Array, n: number) => number;

async function bind(): Promise<{ epollWait: EpollWait; write: Write }> {
  if ("Bun" in globalThis) {
    const ffi = await import("bun:ffi");
    const lib = ffi.dlopen("libc.so.6", {
      epoll_wait: { args: ["i32", "ptr", "i32", "i32"], returns: "i32" },
      write: { args: ["i32", "ptr", "u64"], returns: "i64" },
    }).symbols;
    return {
      epollWait: (e, b, m, t) => lib.epoll_wait(e, ffi.ptr(b), m, t),
      write: (fd, b, n) => Number(lib.write(fd, ffi.ptr(b), n)),
    };
  }
  const lib = Deno.dlopen("libc.so.6", {
    epoll_wait: { parameters: ["i32", "buffer", "i32", "i32"], result: "i32" },
    write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  }).symbols;
  return {
    epollWait: (e, b, m, t) => lib.epoll_wait(e, b, m, t),
    write: (fd, b, n) => Number(lib.write(fd, b, BigInt(n))),
  };
}

const STATE = 0, COUNT = 1, STOP = 2, FDS = 3;
const scope = self as unknown as Scope;

scope.onmessage = async (e) => {
  const s = e.data;
  const { epollWait, write } = await bind();
  const control = new Int32Array(s.control);
  const buf = new Uint8Array(s.maxEvents * s.eventSize);
  const view = new DataView(buf.buffer);
  const byte = new Uint8Array(1);
  for (;;) {
    const n = epollWait(s.epfd, buf, s.maxEvents, -1);
    if (Atomics.load(control, STOP) !== 0) break;
    if (n <= 0) continue; // EINTR
    for (let i = 0; i < n; i++) {
      control[FDS + i] = view.getInt32(i * s.eventSize + s.dataOffset, true);
    }
    Atomics.store(control, COUNT, n);
    Atomics.store(control, STATE, 1);
    if (s.mode === "post") scope.postMessage(0);
    else if (s.mode === "notify") Atomics.notify(control, STATE);
    else write(s.socketFd, byte, 1);
    while (Atomics.load(control, STATE) === 1 && Atomics.load(control, STOP) === 0) {
      Atomics.wait(control, STATE, 1);
    }
    if (Atomics.load(control, STOP) !== 0) break;
  }
  scope.postMessage(1);
};
