/**
 * The library's clock: monotonic milliseconds, read by every spin (several times per message on
 * the hot paths) and by every deadline, so all of them compare times of one clock. It is libc's
 * `clock_gettime(CLOCK_MONOTONIC)` through the FFI, which costs Deno a seventh of
 * `performance.now()` in the emulated guest and Bun about half
 * (bench/results/2026-11-28-library-clock.md). Its
 * origin is its first read, not the runtime's time origin: compare its times only with each
 * other. Bound on the first read (that opens libc, as any native call does).
 *
 * @module
 */

import { native } from "./native.ts";

const CLOCK_MONOTONIC = 1;

/**
 * `struct timespec`: two 64-bit fields, of which the clock reads the low 32 bits (seconds since
 * boot and nanoseconds both fit). Its own ArrayBuffer, which neither engine moves (a small typed
 * array made by length may live in the moving heap).
 */
const timespec = new Int32Array(new ArrayBuffer(16));

let read: () => number = bind;

/** Binds the clock on its first read and reads it. */
function bind(): number {
  const n = native();
  const clockGettime = n.libc.clock_gettime;
  const at = n.pointerOf(timespec);
  clockGettime(CLOCK_MONOTONIC, at);
  const origin = timespec[0];
  read = () => {
    clockGettime(CLOCK_MONOTONIC, at);
    return (timespec[0] - origin) * 1000 + timespec[2] / 1e6;
  };
  return read();
}

/** Now, in milliseconds on the library's monotonic clock (fractional, nanosecond resolution). */
export function now(): number {
  return read();
}
