/**
 * Bun's epoll worker: blocks in `epoll_wait` on the poller's set, copies the ready fds into
 * shared memory, posts to the JS thread and sleeps until the JS thread took them. Started by
 * `wait-bun.ts` from {@link EPOLL_WORKER_SOURCE}: the worker's code travels as text (a Blob
 * URL), so it starts from any file layout the package is installed in - JSR's npm
 * compatibility layer ships transpiled `.js` files, where a `./epoll-worker.ts` URL would not
 * exist. Not part of the public API.
 *
 * Shared control words (Int32Array over a SharedArrayBuffer): [state, count, stop, fds...];
 * state 1 = fds published and not yet taken.
 *
 * @module
 */

/** The first message the worker gets. */
export interface EpollWorkerStart {
  /** The epoll set. */
  epfd: number;
  /** The shared control words. */
  control: SharedArrayBuffer;
  /** Ready fds per wake. */
  maxEvents: number;
  /** `sizeof(struct epoll_event)`. */
  eventSize: number;
  /** `offsetof(struct epoll_event, data)`. */
  dataOffset: number;
  /** libc sonames to try. */
  libc: string[];
}

interface WorkerScope {
  onmessage: ((e: MessageEvent<EpollWorkerStart>) => void) | null;
  postMessage(m: unknown): void;
}

interface BunFfi {
  dlopen: typeof import("bun:ffi").dlopen;
  FFIType: typeof import("bun:ffi").FFIType;
  ptr: typeof import("bun:ffi").ptr;
  read: typeof import("bun:ffi").read;
}

/**
 * The worker's whole program. It must not refer to anything outside itself: it is turned into
 * text with `Function.prototype.toString` and run in the worker.
 */
function epollWorkerMain(self: WorkerScope, ffi: BunFfi): void {
  const STATE = 0;
  const COUNT = 1;
  const STOP = 2;
  const FDS = 3;
  const EINTR = 4;
  const bind = (paths: string[]) => {
    let last: unknown;
    for (const path of paths) {
      try {
        return ffi.dlopen(path, {
          epoll_wait: {
            args: [ffi.FFIType.i32, ffi.FFIType.ptr, ffi.FFIType.i32, ffi.FFIType.i32],
            returns: ffi.FFIType.i32,
          },
          __errno_location: { args: [], returns: ffi.FFIType.ptr },
        }).symbols;
      } catch (e) {
        last = e;
      }
    }
    throw last;
  };
  const run = (s: EpollWorkerStart) => {
    const lib = bind(s.libc);
    const control = new Int32Array(s.control);
    const buf = new Uint8Array(s.maxEvents * s.eventSize);
    const view = new DataView(buf.buffer);
    const at = ffi.ptr(buf);
    const errnoAt = lib.__errno_location();
    for (;;) {
      const n = lib.epoll_wait(s.epfd, at, s.maxEvents, -1);
      if (Atomics.load(control, STOP) !== 0) break;
      if (n < 0) {
        // EINTR is the only expected failure; anything else (EBADF: the set is gone) ends it
        if (errnoAt && ffi.read.i32(errnoAt, 0) === EINTR) continue;
        break;
      }
      for (let i = 0; i < n; i++) {
        control[FDS + i] = view.getInt32(i * s.eventSize + s.dataOffset, true);
      }
      Atomics.store(control, COUNT, n);
      Atomics.store(control, STATE, 1);
      self.postMessage(0);
      while (Atomics.load(control, STATE) === 1 && Atomics.load(control, STOP) === 0) {
        Atomics.wait(control, STATE, 1);
      }
      if (Atomics.load(control, STOP) !== 0) break;
    }
    self.postMessage(1);
  };
  self.onmessage = (e) => run(e.data);
}

/** The worker's module source: its program, given `self` and `bun:ffi`. */
export const EPOLL_WORKER_SOURCE: string =
  `import * as ffi from "bun:ffi";\n(${epollWorkerMain.toString()})(self, ffi);\n`;
