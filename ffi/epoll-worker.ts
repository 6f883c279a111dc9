/**
 * Bun's epoll worker: blocks in `epoll_wait` on the poller's set, copies the ready fds
 * into shared memory, posts to the JS thread and sleeps until the JS thread took them.
 * Started by `wait-bun.ts`; not part of the public API.
 *
 * Shared control words (Int32Array over a SharedArrayBuffer): [state, count, stop, fds...];
 * state 1 = fds published and not yet taken.
 *
 * @module
 */

import { dlopen, FFIType, ptr, read } from "bun:ffi";

const STATE = 0;
const COUNT = 1;
const STOP = 2;
const FDS = 3;

interface Start {
  epfd: number;
  control: SharedArrayBuffer;
  maxEvents: number;
  eventSize: number;
  dataOffset: number;
  libc: string[];
}

declare const self: {
  onmessage: ((e: MessageEvent<Start>) => void) | null;
  postMessage(m: unknown): void;
};

function bind(paths: string[]) {
  let last: unknown;
  for (const path of paths) {
    try {
      return dlopen(path, {
        epoll_wait: {
          args: [FFIType.i32, FFIType.ptr, FFIType.i32, FFIType.i32],
          returns: FFIType.i32,
        },
        __errno_location: { args: [], returns: FFIType.ptr },
      }).symbols;
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

function run(s: Start): void {
  const lib = bind(s.libc);
  const control = new Int32Array(s.control);
  const buf = new Uint8Array(s.maxEvents * s.eventSize);
  const view = new DataView(buf.buffer);
  const at = ptr(buf);
  const EINTR = 4;
  const errnoAt = lib.__errno_location();
  for (;;) {
    const n = lib.epoll_wait(s.epfd, at, s.maxEvents, -1);
    if (Atomics.load(control, STOP) !== 0) break;
    if (n < 0) {
      // EINTR is the only expected failure; anything else (EBADF: the set is gone) ends the loop
      if (errnoAt && read.i32(errnoAt, 0) === EINTR) continue;
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
}

self.onmessage = (e) => run(e.data);
