/**
 * Command-line handling shared by the example tools: the strict option parser of `args.ts`
 * (no Node compatibility layer at start-up), `--help`, numbers written like C's `strtol(..., 0)` (decimal,
 * `0x` hex, leading-zero octal), and a `main` wrapper that turns bad arguments into the
 * usage text with exit code 1 and library errors into one line, never a stack trace.
 *
 * @module
 */

import { exitProcess, type ParseOption, parseOptions, processArgs } from "./args.ts";

/** One command-line option. */
export interface OptionSpec {
  /** One-letter form (`-d`). */
  readonly short?: string;
  /** `string` takes a value; `boolean` is a switch. */
  readonly type: "string" | "boolean";
  /** The value's name in the usage text (`<dev>`). */
  readonly arg?: string;
  /** One line of help. */
  readonly help: string;
  /** Switches that may be given more than once (e.g. `-v -v`). */
  readonly multiple?: boolean;
}

/** A tool's command line. */
export interface ToolSpec {
  /** The program name in messages (`rc_pingpong`). */
  readonly name: string;
  /** Usage lines after the program name, e.g. `["  start a server", "<host>  connect"]`. */
  readonly synopsis: readonly string[];
  /** Options by long name. `help` is added. */
  readonly options: Readonly<Record<string, OptionSpec>>;
  /** Most positional arguments accepted. */
  readonly maxPositionals: number;
  /** The Deno permissions the tool needs (shown in `--help`). */
  readonly permissions: string;
  /** Extra lines at the end of `--help`. */
  readonly notes?: readonly string[];
}

/** A caller mistake on the command line: shows the usage and exits with 1. */
export class UsageError extends Error {}

/** Parsed options: strings, booleans, or counts of repeated switches. */
export type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** The result of {@link parseCommandLine}. */
export interface CommandLine {
  /** Option values by long name. */
  readonly values: Values;
  /** Positional arguments. */
  readonly positionals: string[];
}

/** The usage text of a tool. */
export function usage(spec: ToolSpec): string {
  const lines = ["Usage:"];
  for (const s of spec.synopsis) lines.push(`  ${spec.name} ${s}`);
  lines.push("", "Options:");
  const rows: [string, string][] = [];
  for (const [long, o] of Object.entries(spec.options)) {
    const short = o.short ? `-${o.short}, ` : "    ";
    const arg = o.type === "string" ? `=<${o.arg ?? "value"}>` : "";
    rows.push([`${short}--${long}${arg}`, o.help]);
  }
  rows.push(["-h, --help", "print this help and exit"]);
  const width = Math.max(...rows.map(([l]) => l.length)) + 2;
  for (const [l, h] of rows) lines.push(`  ${l.padEnd(width)}${h}`);
  lines.push("", `Deno permissions: ${spec.permissions}`);
  if (spec.notes) lines.push(...spec.notes);
  return lines.join("\n") + "\n";
}

/** Parses `argv` (default: this process's arguments) or throws {@link UsageError}. */
export function parseCommandLine(
  spec: ToolSpec,
  argv: string[] = processArgs(),
): CommandLine {
  const options: Record<string, ParseOption> = {
    help: { type: "boolean", short: "h" },
    ...spec.options,
  };
  let parsed;
  try {
    parsed = parseOptions(argv, options);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (parsed.values.help) {
    console.log(usage(spec).trimEnd());
    exitProcess(0);
  }
  if (parsed.positionals.length > spec.maxPositionals) {
    throw new UsageError(`unexpected argument "${parsed.positionals[spec.maxPositionals]}"`);
  }
  return { values: parsed.values, positionals: parsed.positionals };
}

const C_INTEGER = /^\s*[-+]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$/;

/** Parses an integer like `strtol(text, NULL, 0)`, but rejects trailing junk. */
export function parseInteger(text: string, what: string): number {
  if (!C_INTEGER.test(text)) throw new UsageError(`${what}: not a number: "${text}"`);
  const t = text.trim();
  const neg = t.startsWith("-");
  const body = t.replace(/^[-+]/, "");
  const v = /^0[xX]/.test(body)
    ? parseInt(body.slice(2), 16)
    : body.length > 1 && body.startsWith("0")
    ? parseInt(body, 8)
    : parseInt(body, 10);
  return neg ? -v : v;
}

/** The integer option `name`, or `fallback`; checked against `[min, max]`. */
export function intOption(
  values: Values,
  name: string,
  fallback: number,
  min = -Infinity,
  max = Infinity,
): number {
  const raw = values[name];
  if (raw === undefined) return fallback;
  const v = parseInteger(String(raw), `--${name}`);
  if (v < min || v > max) {
    throw new UsageError(`--${name}: ${v} is out of range ${min}..${max}`);
  }
  return v;
}

/** The string option `name`, or `fallback`. */
export function stringOption(values: Values, name: string): string | undefined;
export function stringOption(values: Values, name: string, fallback: string): string;
export function stringOption(values: Values, name: string, fallback?: string): string | undefined {
  const raw = values[name];
  return raw === undefined ? fallback : String(raw);
}

/** How many times the switch `name` was given. */
export function countOption(values: Values, name: string): number {
  const raw = values[name];
  if (Array.isArray(raw)) return raw.length;
  return raw ? 1 : 0;
}

/**
 * Runs a tool: parses its command line, calls `body`, and exits with its result
 * (0 when it returns nothing). Bad arguments print the usage on stderr and exit 1;
 * any other failure prints `name: message` and exits 1.
 */
export async function runTool(
  spec: ToolSpec,
  body: (cl: CommandLine) => Promise<number | void> | number | void,
): Promise<never> {
  let code = 1;
  try {
    const cl = parseCommandLine(spec);
    code = (await body(cl)) ?? 0;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`${spec.name}: ${e.message}\n${usage(spec).trimEnd()}`);
    } else {
      const err = e as Error;
      console.error(`${spec.name}: ${err?.message ?? String(e)}`);
    }
    code = 1;
  }
  return exitProcess(code);
}

/** `printf("%.2f")` of a number. */
export function fixed2(v: number): string {
  return v.toFixed(2);
}

/** A line on stdout. */
export function out(line: string): void {
  console.log(line);
}

/** A line on stderr. */
export function err(line: string): void {
  console.error(line);
}
