/**
 * The tools' process interface without Node's compatibility layer: the arguments, the exit, and
 * a strict option parser in the manner of `node:util` `parseArgs` (long `--name`/`--name=value`,
 * short `-n value`/`-nvalue`, grouped switches `-vV`, repeated switches, `--` ending the options).
 * In Deno, importing `node:process` or `node:util` sets up that layer and costs a
 * rdma_cm tool most of its start-up above the library's own (bench/startup-phases.ts), so the
 * tools take `Deno.args`/`Deno.exit` there and Bun's native `process`.
 *
 * @module
 */

interface DenoProcess {
  readonly args: string[];
  readonly env: { get(name: string): string | undefined };
  exit(code: number): never;
}
interface BunProcess {
  readonly argv: string[];
  readonly env: Record<string, string | undefined>;
  exit(code: number): never;
}

const deno = (globalThis as { Deno?: DenoProcess }).Deno;

/** This process's arguments after the script. */
export function processArgs(): string[] {
  if (deno) return deno.args;
  return (globalThis as unknown as { process: BunProcess }).process.argv.slice(2);
}

/** An environment variable of this process (Deno: needs `--allow-env` for it). */
export function processEnv(name: string): string | undefined {
  if (deno) return deno.env.get(name);
  return (globalThis as unknown as { process: BunProcess }).process.env[name];
}

/** Ends the process with `code`. */
export function exitProcess(code: number): never {
  if (deno) return deno.exit(code);
  return (globalThis as unknown as { process: BunProcess }).process.exit(code);
}

/** One option of {@link parseOptions}. */
export interface ParseOption {
  /** `string` takes a value; `boolean` is a switch. */
  readonly type: "string" | "boolean";
  /** One-letter form. */
  readonly short?: string;
  /** May be given more than once (the values are collected in an array). */
  readonly multiple?: boolean;
}

/** What {@link parseOptions} found. */
export interface ParsedOptions {
  /** Values by long name: a string, `true`, or an array of them for `multiple` options. */
  readonly values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  /** The arguments that are not options. */
  readonly positionals: string[];
}

/** Parses `args` against `options` (by long name); throws an `Error` naming the mistake. */
export function parseOptions(
  args: readonly string[],
  options: Readonly<Record<string, ParseOption>>,
): ParsedOptions {
  const byShort = new Map<string, string>();
  for (const [long, o] of Object.entries(options)) if (o.short) byShort.set(o.short, long);
  const values: ParsedOptions["values"] = {};
  const positionals: string[] = [];
  const set = (long: string, v: string | boolean) => {
    if (options[long].multiple) ((values[long] ??= []) as (string | boolean)[]).push(v);
    else values[long] = v;
  };
  const name = (long: string) => {
    const s = options[long].short;
    return s ? `'-${s}, --${long}'` : `'--${long}'`;
  };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--") {
      positionals.push(...args.slice(i + 1));
      break;
    }
    if (a.startsWith("--")) {
      const eq = a.indexOf("=");
      const long = eq < 0 ? a.slice(2) : a.slice(2, eq);
      const o = Object.hasOwn(options, long) ? options[long] : undefined;
      if (!o) throw new Error(`Unknown option '--${long}'`);
      if (o.type === "boolean") {
        if (eq >= 0) throw new Error(`Option ${name(long)} does not take a value`);
        set(long, true);
      } else if (eq >= 0) set(long, a.slice(eq + 1));
      else if (i + 1 < args.length) set(long, args[++i]);
      else throw new Error(`Option ${name(long)} needs a value`);
    } else if (a.startsWith("-") && a.length > 1) {
      for (let j = 1; j < a.length; j++) {
        const long = byShort.get(a[j]);
        if (long === undefined) throw new Error(`Unknown option '-${a[j]}'`);
        if (options[long].type === "boolean") {
          set(long, true);
          continue;
        }
        if (j + 1 < a.length) set(long, a.slice(j + 1));
        else if (i + 1 < args.length) set(long, args[++i]);
        else throw new Error(`Option ${name(long)} needs a value`);
        break;
      }
    } else positionals.push(a);
  }
  return { values, positionals };
}
