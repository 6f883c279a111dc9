/**
 * Runs a peer script in a separate process with the same runtime binary as the
 * test, and reads its JSON-line reports from stdout.
 */

import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";

/** A running peer process. */
export interface Peer {
  /** The next report matching `pred` (rejects after `timeoutMs` or when the peer exits). */
  next(pred?: (msg: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<
    Record<string, unknown>
  >;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  /** Everything the peer wrote to stderr so far. */
  stderr(): string;
  /** Kills the peer (SIGKILL) if it still runs. */
  kill(): void;
  /** The child process. */
  child: ChildProcess;
}

/** Spawns `script` (a path relative to this folder) with `args` in the test's runtime. */
export function spawnPeer(script: string, args: string[]): Peer {
  const path = new URL(`./${script}`, import.meta.url).pathname;
  const isBun = "Bun" in globalThis;
  const argv = isBun ? [path, ...args] : ["run", "-A", path, ...args];
  const child = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "pipe"] });
  const msgs: Record<string, unknown>[] = [];
  const waiters: (() => void)[] = [];
  let buf = "";
  let err = "";
  let done = false;
  const wake = () => {
    for (const w of waiters.splice(0)) w();
  };
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (d: string) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line) continue;
      try {
        msgs.push(JSON.parse(line));
      } catch {
        err += `[stdout] ${line}\n`;
      }
    }
    wake();
  });
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (d: string) => {
    err += d;
  });
  const exited = new Promise<number | null>((resolve) => {
    child.on("exit", (code) => {
      done = true;
      if (code !== 0) process.stderr.write(`peer ${script} exited with ${code}; stderr:\n${err}\n`);
      wake();
      resolve(code);
    });
  });
  return {
    child,
    exited,
    stderr: () => err,
    kill() {
      if (!done) child.kill("SIGKILL");
    },
    async next(pred = () => true, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const i = msgs.findIndex(pred);
        if (i >= 0) return msgs.splice(i, 1)[0];
        if (done) throw new Error(`peer exited before the expected report; stderr:\n${err}`);
        const left = deadline - Date.now();
        if (left <= 0) {
          throw new Error(`peer: no expected report within ${timeoutMs} ms; stderr:\n${err}`);
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, left);
          waiters.push(() => {
            clearTimeout(t);
            resolve();
          });
        });
      }
    },
  };
}

/** Writes one JSON report line (peer side). */
export function report(msg: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(msg) + "\n");
}

/** Private data as text (trailing zero padding removed). */
export function text(data: Uint8Array | null): string {
  if (!data) return "";
  let end = data.length;
  while (end > 0 && data[end - 1] === 0) end--;
  return new TextDecoder().decode(data.subarray(0, end));
}
