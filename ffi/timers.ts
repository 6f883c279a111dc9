/**
 * Timers and event-loop turns of the running runtime, touched only when first used: in Deno,
 * importing `node:timers`, or merely reading the global `setTimeout`, sets up Node's
 * compatibility layer, which costs start-up time (bench/startup-phases.ts prints it), so no
 * module of the library does either at import. Deno's `setTimeout` returns an id that
 * `Deno.refTimer`/`Deno.unrefTimer` take; Bun's returns a timer object with `ref()`/`unref()`.
 * Both runtimes have a global `setImmediate`.
 *
 * @module
 */

/** A running timer of this runtime (an id in Deno, a timer object in Bun). */
export type TimerHandle = { readonly __timer: unique symbol };

interface DenoTimers {
  refTimer(id: number): void;
  unrefTimer(id: number): void;
}
interface BunTimer {
  ref(): unknown;
  unref(): unknown;
}

const deno = (globalThis as { Deno?: DenoTimers }).Deno;
const isBun = "Bun" in globalThis;

/**
 * Starts a one-shot timer that calls `fn` after `ms` milliseconds; it keeps the process alive
 * until it fires, unless `keepsAlive` is false (then it never does).
 */
export function startTimer(fn: () => void, ms: number, keepsAlive = true): TimerHandle {
  const t = setTimeout(fn, ms) as unknown as TimerHandle;
  if (!keepsAlive) unrefTimer(t);
  return t;
}

/** Stops a timer that has not fired (a no-op for one that has). */
export function stopTimer(t: TimerHandle): void {
  clearTimeout(t as never);
}

/** Makes the timer keep the process alive again. */
export function refTimer(t: TimerHandle): void {
  if (isBun || !deno) (t as unknown as BunTimer).ref();
  else deno.refTimer(t as unknown as number);
}

/** Stops the timer from keeping the process alive (it still fires while the process runs). */
export function unrefTimer(t: TimerHandle): void {
  if (isBun || !deno) (t as unknown as BunTimer).unref();
  else deno.unrefTimer(t as unknown as number);
}

/** Calls `fn` in a later turn of the event loop (after pending I/O callbacks). */
export function nextTurn(fn: () => void): void {
  setImmediate(fn);
}
