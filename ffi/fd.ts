/**
 * File-descriptor helpers: channels and the async-event fd are made non-blocking
 * so that reading them never blocks the event loop.
 *
 * @module
 */

import { native } from "./native.ts";
import { throwErrno } from "./errors.ts";

const F_GETFL = 3;
const F_SETFL = 4;
const O_NONBLOCK = 0o4000; // x86-64 and aarch64 Linux

/** Sets `O_NONBLOCK` on `fd`. */
export function setNonBlocking(fd: number, what: string): void {
  const libc = native().libc;
  const flags = libc.fcntl(fd, F_GETFL, 0);
  if (flags < 0) throwErrno("fcntl(F_GETFL)", what);
  if (libc.fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throwErrno("fcntl(F_SETFL)", what);
}
