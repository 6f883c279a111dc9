/**
 * Bun's epoll waiter: Bun has no nonblocking FFI calls, so a Worker blocks in
 * `epoll_wait` and posts to the JS thread (see `epoll-worker.ts`; its source is inlined). The Worker is ref'd
 * only while the poller wants events, so an idle process exits by itself.
 *
 * @module
 */

import type { EpollWaiter, WaiterOptions } from "./wait.ts";
import { native } from "./native.ts";
import { LIBRARIES } from "./library.ts";
import { EPOLL_WORKER_SOURCE } from "./epoll-worker.ts";
import { NativeBlock } from "./memory.ts";

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

class BunWaiter implements EpollWaiter {
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

/** Creates Bun's waiter. */
export function createWaiter(options: WaiterOptions): EpollWaiter {
  return new BunWaiter(options);
}
