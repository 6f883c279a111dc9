/**
 * Runs a peer script in a separate process with the same runtime binary as the
 * test, and reads its JSON-line reports from stdout. Under
 * `scripts/softroce-vm --hosts 2` (env `RDMA_HOSTS=2` on guest A) the process
 * runs on the other guest, through its peer agent; otherwise on this machine.
 *
 * The agent's protocol (see scripts/README.md, "Two guests"): a job is a
 * directory `$RDMA_JOB_DIR/jobs/<id>` holding `argv`, `env` (NUL-separated
 * `NAME=VALUE`) and `cwd`, made complete under `$RDMA_JOB_DIR/new/<id>` and
 * renamed into place. The agent writes `pgid` when the job runs, `stdout` and
 * `stderr` as they are produced, and `status` (`exit N` or `signal NAME`) at
 * the end; a signal name written to `kill` is sent to the job's process group.
 */

import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import process from "node:process";

/** A running process, local or on the peer guest. */
export interface Proc {
  /** `remote` when it runs on the peer guest. */
  where: "local" | "remote";
  /** Resolves with the exit code, or null when a signal ended it. */
  exited: Promise<number | null>;
  /** Everything the process wrote to stdout so far. */
  stdout(): string;
  /** Everything the process wrote to stderr so far. */
  stderr(): string;
  /**
   * Resolves with the first match of `re` in stdout (or stderr with
   * `stream: "stderr"`); rejects after `timeoutMs` or when the process ends first.
   */
  waitFor(
    re: RegExp,
    options?: { stream?: "stdout" | "stderr"; timeoutMs?: number },
  ): Promise<RegExpMatchArray>;
  /** Resolves at the next output or the exit, or after `timeoutMs`. */
  changed(timeoutMs: number): Promise<void>;
  /** Sends a signal (default SIGKILL) if it still runs; remote: through the agent. */
  kill(signal?: "SIGKILL" | "SIGTERM" | "SIGINT" | "SIGHUP"): void;
  /** The child process (null when remote). */
  child: ChildProcess | null;
}

/** A running peer process (JSON-line reports on stdout). */
export interface Peer {
  /** The next report matching `pred` (rejects after `timeoutMs` or when the peer exits). */
  next(pred?: (msg: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<
    Record<string, unknown>
  >;
  /** Resolves with the exit code (null when a signal ended it). */
  exited: Promise<number | null>;
  /** Everything the peer wrote to stderr so far. */
  stderr(): string;
  /** Kills the peer (SIGKILL) if it still runs. */
  kill(): void;
  /** The child process (null when the peer runs on the other guest). */
  child: ChildProcess | null;
  /** `remote` when the peer runs on the other guest. */
  where: "local" | "remote";
}

/** Where a spawned process runs. */
export interface SpawnOptions {
  /** Extra environment (remote: added to the peer guest's own environment). */
  env?: Record<string, string>;
  /** Working directory (default: this process's). */
  cwd?: string;
  /** Run on this machine even when a peer guest exists. */
  local?: boolean;
}

const env = process.env;

/** True on guest A of a two-guest run: spawnPeer/spawnRemote run on guest B. */
export function hasRemotePeer(): boolean {
  return env.RDMA_HOSTS === "2" && env.RDMA_HOST_INDEX === "0" && !!env.RDMA_JOB_DIR;
}

/**
 * The address a peer process listens on: the peer guest's (`RDMA_PEER_IP`, or
 * `RDMA_PEER_SIW_IP` for soft-iWARP) when peers run remotely, else this
 * machine's (`RDMA_GUEST_IP`/`RDMA_ADDR`, or `RDMA_SIW_IP`).
 */
export function peerAddress(transport: "rxe" | "siw" = "rxe"): string {
  if (hasRemotePeer()) {
    return (transport === "siw" ? env.RDMA_PEER_SIW_IP : env.RDMA_PEER_IP) ?? "";
  }
  if (transport === "siw" && env.RDMA_SIW_IP) return env.RDMA_SIW_IP;
  return env.RDMA_GUEST_IP ?? env.RDMA_ADDR ?? "";
}

/**
 * Where a server started through {@link spawnRemote} or {@link spawnPeer} listens: the peer
 * guest's address for the device's transport in a two-guest run, else the device's own address.
 */
export function serverAddress(device: { transport: "ib" | "iwarp"; address: string }): string {
  return hasRemotePeer()
    ? peerAddress(device.transport === "iwarp" ? "siw" : "rxe")
    : device.address;
}

/**
 * Runs `argv` on the peer guest when there is one (see {@link hasRemotePeer}),
 * else here. Same paths on both guests: they share the host's root and the
 * working directory.
 */
export function spawnRemote(argv: string[], options: SpawnOptions = {}): Proc {
  if (argv.length === 0) throw new Error("spawnRemote: empty argv");
  return hasRemotePeer() && !options.local ? remoteProc(argv, options) : localProc(argv, options);
}

/** Spawns `script` (a path relative to this folder) with `args` in the test's runtime. */
export function spawnPeer(script: string, args: string[], options: SpawnOptions = {}): Peer {
  const path = new URL(`./${script}`, import.meta.url).pathname;
  const isBun = "Bun" in globalThis;
  const argv = isBun ? [process.execPath, path, ...args] : [
    process.execPath,
    "run",
    "-A",
    path,
    ...args,
  ];
  const p = spawnRemote(argv, options);
  const msgs: Record<string, unknown>[] = [];
  let parsed = 0; // characters of stdout already split into lines
  let noise = ""; // stdout lines that are not JSON
  const stderr = () => noise + p.stderr();
  let done = false;
  p.exited.then((code) => {
    done = true;
    if (code !== 0) {
      process.stderr.write(
        `peer ${script} (${p.where}) exited with ${code}; stderr:\n${stderr()}\n`,
      );
    }
  });
  const collect = () => {
    const out = p.stdout();
    let i;
    while ((i = out.indexOf("\n", parsed)) >= 0) {
      const line = out.slice(parsed, i).trim();
      parsed = i + 1;
      if (!line) continue;
      try {
        msgs.push(JSON.parse(line));
      } catch {
        noise += `[stdout] ${line}\n`;
      }
    }
  };
  return {
    child: p.child,
    where: p.where,
    exited: p.exited,
    stderr,
    kill: () => p.kill("SIGKILL"),
    async next(pred = () => true, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        collect();
        const i = msgs.findIndex(pred);
        if (i >= 0) return msgs.splice(i, 1)[0];
        if (done) throw new Error(`peer exited before the expected report; stderr:\n${stderr()}`);
        const left = deadline - Date.now();
        if (left <= 0) {
          throw new Error(`peer: no expected report within ${timeoutMs} ms; stderr:\n${stderr()}`);
        }
        if (p.stdout().indexOf("\n", parsed) < 0) await p.changed(left);
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

// ------------------------------------------------------------------ shared output state

/** Output buffers, waiters and the exit, shared by both kinds of process. */
class Output {
  out = "";
  err = "";
  ended = false;
  #waiters = new Set<() => void>();
  wake(): void {
    for (const w of [...this.#waiters]) w();
  }
  changed(timeoutMs: number): Promise<void> {
    if (this.ended) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.#waiters.add(done);
    });
  }
  waitFor(
    re: RegExp,
    { stream = "stdout", timeoutMs = 60_000 }: {
      stream?: "stdout" | "stderr";
      timeoutMs?: number;
    } = {},
  ): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const m = (stream === "stdout" ? this.out : this.err).match(re);
        if (m) return finish(() => resolve(m));
        if (this.ended) {
          return finish(() =>
            reject(
              new Error(`process ended before ${re} appeared on ${stream}; stderr:\n${this.err}`),
            )
          );
        }
      };
      const finish = (f: () => void) => {
        clearTimeout(timer);
        this.#waiters.delete(check);
        f();
      };
      const timer = setTimeout(
        () =>
          finish(() =>
            reject(new Error(`no ${re} on ${stream} within ${timeoutMs} ms; stderr:\n${this.err}`))
          ),
        timeoutMs,
      );
      this.#waiters.add(check);
      check();
    });
  }
}

function localProc(argv: string[], options: SpawnOptions): Proc {
  const child = spawn(argv[0], argv.slice(1), {
    cwd: options.cwd,
    env: options.env ? { ...env, ...options.env } : undefined,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const o = new Output();
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (d: string) => {
    o.out += d;
    o.wake();
  });
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (d: string) => {
    o.err += d;
    o.wake();
  });
  const exited = new Promise<number | null>((resolve) => {
    child.on("error", (e) => {
      o.err += `spawn ${argv[0]}: ${e.message}\n`;
      o.ended = true;
      o.wake();
      resolve(127);
    });
    child.on("close", (code) => {
      o.ended = true;
      o.wake();
      resolve(code);
    });
  });
  return {
    where: "local",
    child,
    exited,
    stdout: () => o.out,
    stderr: () => o.err,
    waitFor: (re, opts) => o.waitFor(re, opts),
    changed: (ms) => o.changed(ms),
    kill(signal = "SIGKILL") {
      if (!o.ended) child.kill(signal);
    },
  };
}

// ------------------------------------------------------------------ remote: the peer agent's job files

let jobCounter = 0;
const POLL_MS = 20;

function remoteProc(argv: string[], options: SpawnOptions): Proc {
  const dir = env.RDMA_JOB_DIR!;
  const id = `${os.hostname()}-${process.pid}-${++jobCounter}-${
    Math.random().toString(36).slice(2, 8)
  }`;
  const staging = `${dir}/new/${id}`;
  const job = `${dir}/jobs/${id}`;
  const nul = (xs: string[]) => xs.map((x) => x + "\0").join("");
  fs.mkdirSync(staging, { recursive: true });
  fs.mkdirSync(`${dir}/jobs`, { recursive: true });
  fs.writeFileSync(`${staging}/argv`, nul(argv));
  if (options.env) {
    fs.writeFileSync(
      `${staging}/env`,
      nul(Object.entries(options.env).map(([k, v]) => `${k}=${v}`)),
    );
  }
  fs.writeFileSync(`${staging}/cwd`, (options.cwd ?? process.cwd()) + "\0");
  fs.renameSync(staging, job); // complete when the agent sees it

  const o = new Output();
  const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  const fds: { stdout?: number; stderr?: number } = {};
  const buf = new Uint8Array(65536);
  let killed = false;
  // Reads what the agent appended since the last call (the files live on the
  // shared 9p mount, read without caching, so growth is seen at once).
  const drain = (name: "stdout" | "stderr", final: boolean): boolean => {
    if (fds[name] === undefined) {
      try {
        fds[name] = fs.openSync(`${job}/${name}`, "r");
      } catch {
        return false; // not started yet
      }
    }
    let got = false;
    for (;;) {
      const n = fs.readSync(fds[name]!, buf, 0, buf.length, null);
      if (n <= 0) break;
      const s = decoders[name].decode(buf.subarray(0, n), { stream: true });
      if (name === "stdout") o.out += s;
      else o.err += s;
      got = true;
    }
    if (final) {
      const rest = decoders[name].decode();
      if (name === "stdout") o.out += rest;
      else o.err += rest;
      fs.closeSync(fds[name]!);
      fds[name] = undefined;
    }
    return got;
  };
  const exited = new Promise<number | null>((resolve) => {
    const tick = () => {
      let status: string | undefined;
      try {
        status = fs.readFileSync(`${job}/status`, "utf8").trim();
      } catch { /* still running */ }
      const gone = status === undefined && fs.existsSync(`${dir}/agent.gone`);
      const got = drain("stdout", false) || drain("stderr", false);
      if (got) o.wake();
      if (status === undefined && !gone) {
        setTimeout(tick, POLL_MS);
        return;
      }
      drain("stdout", true);
      drain("stderr", true);
      if (gone) o.err += "spawnRemote: the peer guest stopped\n";
      o.ended = true;
      o.wake();
      if (!env.RDMA_JOB_KEEP) fs.rmSync(job, { recursive: true, force: true });
      const [kind, value] = (status ?? "exit 125").split(" ");
      resolve(kind === "signal" ? null : Number(value));
    };
    tick();
  });
  return {
    where: "remote",
    child: null,
    exited,
    stdout: () => o.out,
    stderr: () => o.err,
    waitFor: (re, opts) => o.waitFor(re, opts),
    changed: (ms) => o.changed(ms),
    kill(signal = "SIGKILL") {
      if (o.ended || killed) return;
      killed = true;
      try {
        fs.writeFileSync(`${job}/kill`, signal.replace(/^SIG/, "") + "\n");
      } catch { /* it just ended */ }
    },
  };
}
