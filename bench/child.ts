/**
 * A benchmark's child process (a C tool, or one of our roles in another process): its output
 * collected as it comes, killed after a bound, its end as a promise that always settles.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";

/** What a child printed and how it ended (`code` -1: it could not start; null: killed). */
export interface ChildRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** How to run a child. */
export interface ChildOptions {
  /** Killed with SIGKILL after this many milliseconds (default 300,000). */
  timeoutMs?: number;
  /** Variables added to this process's environment. */
  env?: Record<string, string>;
  /** The working directory (default this process's). */
  cwd?: string;
  /** Called with each non-empty line of its standard output as it comes. */
  onLine?: (line: string) => void;
}

/** A running child. */
export interface Child {
  /** The process. */
  readonly child: ChildProcess;
  /** Settles when it ended. */
  readonly done: Promise<ChildRun>;
  /** Its standard output so far. */
  stdout(): string;
  /** Kills it (SIGKILL). */
  kill(): void;
}

/** Starts `argv` with its output piped and collected. */
export function runChild(argv: string[], options: ChildOptions = {}): Child {
  const { timeoutMs = 300_000, env, cwd, onLine } = options;
  const child = spawn(argv[0], argv.slice(1), {
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
    env: env ? { ...process.env, ...env } : undefined,
  });
  let stdout = "", stderr = "";
  child.stdout!.on("data", (d) => {
    stdout += d;
    if (onLine) { for (const l of String(d).split("\n")) if (l) onLine(l); }
  });
  child.stderr!.on("data", (d) => (stderr += d));
  const done = new Promise<ChildRun>((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: -1, stdout, stderr: stderr + e.message });
    });
  });
  return { child, done, stdout: () => stdout, kill: () => void child.kill("SIGKILL") };
}
