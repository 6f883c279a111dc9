/**
 * Checks of caller-supplied values, with messages that can print any value (a Symbol, a BigInt,
 * an object) without themselves throwing: every caller mistake becomes an
 * {@link InvalidArgumentError}, never a `TypeError` from building its message.
 *
 * @module
 */

import { InvalidArgumentError } from "./errors.ts";

/** A short, safe description of any value for an error message. */
export function describe(v: unknown): string {
  switch (typeof v) {
    case "string":
      return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v);
    case "bigint":
      return `${v}n`;
    case "symbol":
      return v.toString();
    case "function":
      return "a function";
    case "object":
      if (v === null) return "null";
      if (Array.isArray(v)) return `an array of ${v.length}`;
      if (ArrayBuffer.isView(v)) return `a ${v.constructor.name} of ${v.byteLength} bytes`;
      return "an object";
    default:
      return String(v);
  }
}

/** `v` when it is an integer in `min..max`; else an InvalidArgumentError naming `name`. */
export function checkInteger(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
    throw new InvalidArgumentError(`${name} must be an integer ${min}..${max}, got ${describe(v)}`);
  }
  return v;
}

/** `v` when it is a non-null object; else an InvalidArgumentError naming `name`. */
export function checkObject<T extends object>(name: string, v: unknown): T {
  if (typeof v !== "object" || v === null) {
    throw new InvalidArgumentError(`${name} must be an object, got ${describe(v)}`);
  }
  return v as T;
}

/** `v` when it is a string; else an InvalidArgumentError naming `name`. */
export function checkString(name: string, v: unknown): string {
  if (typeof v !== "string") {
    throw new InvalidArgumentError(`${name} must be a string, got ${describe(v)}`);
  }
  return v;
}
