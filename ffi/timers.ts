/**
 * Timers and event-loop turns of the running runtime, touched only when first used. Since Deno
 * 2.8 the global timers are Node's (a `Timeout` object with `ref()`/`unref()`, as in Bun), so in
 * Deno importing `node:timers`, or merely reading the global `setTimeout`, sets up Node's
 * compatibility layer, which costs start-up time (bench/startup-phases.ts prints it): no module of
 * the library does either at import. Older Deno returns a numeric id that
 * `Deno.refTimer`/`Deno.unrefTimer` take, so the handle's type decides. Both runtimes have a
 * global `setImmediate`.
 *
 * @module
 */

/** A running timer of this runtime (a timer object; a numeric id in Deno before 2.8). */
export type TimerHandle = { readonly __timer: unique symbol };

interface DenoTimers {
  refTimer(id: number): void;
  unrefTimer(id: number): void;
}
interface NodeTimer {
  ref(): unknown;
  unref(): unknown;
}

const deno = (globalThis as { Deno?: DenoTimers }).Deno;

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
  if (typeof t === "number") deno!.refTimer(t);
  else (t as unknown as NodeTimer).ref();
}

/** Stops the timer from keeping the process alive (it still fires while the process runs). */
export function unrefTimer(t: TimerHandle): void {
  if (typeof t === "number") deno!.unrefTimer(t);
  else (t as unknown as NodeTimer).unref();
}

/** Calls `fn` in a later turn of the event loop (after pending I/O callbacks). */
export function nextTurn(fn: () => void): void {
  setImmediate(fn);
}
