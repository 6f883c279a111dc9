/**
 * Deno's epoll waiter: exactly one `nonblocking: true` `epoll_wait` in flight, and only
 * while the poller wants events (an in-flight call keeps the process alive and holds one
 * of the blocking pool's threads). Cancelled by writing the poller's eventfd.
 *
 * @module
 */

import type { EpollWaiter, WaiterOptions } from "./wait.ts";
import { native } from "./native.ts";
import { LIBC } from "../types/symbols/libc.ts";
import { LIBRARIES } from "./library.ts";
import { NativeBlock } from "./memory.ts";
import { RdmaError } from "../types/errors.ts";

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
    const { eventSize, dataOffset } = this.#o;
    const fds = this.#fds;
    const view = this.#buf.view;
    // n < 0: EINTR (errno is not readable for calls made on another thread); retry.
    for (let i = 0; i < n; i++) fds[i] = view.getInt32(i * eventSize + dataOffset, true);
    if (n > 0) this.#o.onEvents(fds, n);
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

/** Creates Deno's waiter. */
export function createWaiter(options: WaiterOptions): EpollWaiter {
  return new DenoWaiter(options);
}
