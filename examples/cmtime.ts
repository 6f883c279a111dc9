/**
 * cmtime - librdmacm's `cmtime` over this library: how long each step of setting up and
 * tearing down `-c` RC connections takes (create id, bind, resolve address, resolve route,
 * create QP, connect, disconnect, destroy), all connections of a step started at once, with
 * `-r` retries of a failed resolution and `-t` its timeout. The client prints the C tool's
 * table (total, the slowest and the fastest connection, per connection); the server accepts
 * every connection and tears it down when the client disconnects, until it is stopped.
 * Either side can be the C `cmtime`.
 *
 * ```sh
 * deno run --allow-ffi jsr:@rdma/verbs/examples/cmtime -b 10.0.2.15             # server
 * bun examples/cmtime.ts -s 10.0.2.15 -c 100                                     # client
 * ```
 *
 * @module
 */

import {
  CmEventChannel,
  CmEventError,
  CmEventType,
  type CmId,
  type CompletionQueue,
  PortSpace,
  type ProtectionDomain,
  QpType,
} from "../cm.ts";
import { intOption, out, runTool, stringOption, type ToolSpec } from "./_common/cli.ts";
import {
  bindAndListen,
  cmOptions,
  GAI_FAILURE,
  getRdmaAddr,
  perror,
  type RdmaAddr,
} from "./_common/cm.ts";

const SPEC: ToolSpec = {
  name: "cmtime",
  synopsis: [
    "[-b bind_address] [-p port_number]   (server)",
    "-s server_address [-b bind_address] [-c connections] [-p port_number] [-r retries] [-t timeout_ms]",
  ],
  options: {
    ...cmOptions("server", "bind"),
    connections: { short: "c", type: "string", arg: "connections", help: "default 100" },
    port: { short: "p", type: "string", arg: "port_number", help: "default 7471" },
    retries: { short: "r", type: "string", arg: "retries", help: "default 2" },
    timeout: { short: "t", type: "string", arg: "timeout_ms", help: "default 2000" },
  },
  maxPositionals: 0,
  permissions: "--allow-ffi (libibverbs, librdmacm)",
};

const STEPS = [
  "create id",
  "bind addr",
  "resolve addr",
  "resolve route",
  "create qp",
  "connect",
  "disconnect",
  "destroy",
] as const;
type Step = typeof STEPS[number];

interface Settings {
  dst?: string;
  src?: string;
  port: number;
  connections: number;
  retries: number;
  timeout: number;
}

/** One connection: its id and the start and end (µs) of each step. */
interface Conn {
  id: CmId | null;
  times: Map<Step, [number, number]>;
  error: boolean;
}

const now = () => performance.now() * 1000;

/** The times of the run: each step's start and end over all connections. */
class Perf {
  readonly total = new Map<Step, [number, number]>();

  /** Runs `fn` for every connection that has no error, timing it per connection and in total. */
  async step(conns: Conn[], step: Step, fn: (c: Conn) => void | Promise<void>): Promise<void> {
    const t0 = now();
    await Promise.all(conns.map(async (c) => {
      if (c.error) return;
      const start = now();
      try {
        await fn(c);
        c.times.set(step, [start, now()]);
      } catch {
        c.error = true;
      }
    }));
    this.total.set(step, [t0, now()]);
  }

  /** The C tool's table: total ms, slowest ms, fastest µs and µs per connection of each step. */
  show(conns: Conn[], bound: boolean): void {
    out("step              total ms     max ms     min us  us / conn");
    const f = (v: number) => v.toFixed(2).padStart(11);
    for (const step of STEPS) {
      if (step === "bind addr" && !bound) continue;
      let max = 0, min = 999999999;
      for (const c of conns) {
        const t = c.times.get(step);
        if (!t) continue;
        max = Math.max(max, t[1] - t[0]);
        min = Math.min(min, t[1] - t[0]);
      }
      const [a, b] = this.total.get(step) ?? [0, 0];
      const us = b - a;
      out(`${step.padEnd(13)}: ${f(us / 1000)}${f(max / 1000)}${f(min)}${f(us / conns.length)}`);
    }
  }
}

/** Retries `attempt` on `failure` events up to `retries` times, then prints the C tool's line. */
async function withRetries(
  attempt: () => Promise<unknown>,
  failure: number,
  retries: number,
): Promise<void> {
  for (let left = retries;; left--) {
    try {
      await attempt();
      return;
    } catch (e) {
      if (!(e instanceof CmEventError) || e.event !== failure) throw e;
      if (left > 0) continue;
      out(`${e.eventName}, error: ${e.status}`);
      throw e;
    }
  }
}

/** The shared PD and CQ of the QPs on one device (the C tool lets librdmacm make them). */
class Verbs {
  #pd: ProtectionDomain | null = null;
  #cq: CompletionQueue | null = null;

  /** Creates an RC QP of one WR each way on `id` with the shared PD and CQ. */
  createQp(id: CmId): void {
    const ctx = id.context;
    this.#pd ??= ctx.allocPd();
    this.#cq ??= ctx.createCq({ cqe: 16 });
    id.createQp(this.#pd, {
      type: QpType.RC,
      sendCq: this.#cq,
      cap: { maxSendWr: 1, maxRecvWr: 1, maxSendSge: 1, maxRecvSge: 1 },
    });
  }

  /** Closes the CQ and PD (after every QP). */
  close(): void {
    this.#cq?.close();
    this.#pd?.close();
  }
}

async function runClient(s: Settings, channel: CmEventChannel): Promise<number> {
  const perf = new Perf();
  const conns: Conn[] = Array.from(
    { length: s.connections },
    () => ({ id: null, times: new Map(), error: false }),
  );
  const verbs = new Verbs();
  try {
    out("creating id");
    await perf.step(conns, "create id", (c) => void (c.id = channel.createId("TCP")));
    let addr: RdmaAddr;
    try {
      addr = getRdmaAddr(s.src, s.dst, s.port, { portSpace: PortSpace.TCP, qpType: QpType.RC });
      if (!addr.destination) throw new Error("no destination");
    } catch {
      out(`getaddrinfo error: ${GAI_FAILURE}`);
      return -1;
    }
    const report = (what: string) => (e: unknown) => {
      if (!(e instanceof CmEventError)) perror(what, e);
      throw e;
    };
    if (s.src) {
      out("binding source address");
      await perf.step(conns, "bind addr", (c) => {
        try {
          c.id!.bind(addr.source!);
        } catch (e) {
          report("failure bind addr")(e);
        }
      });
    }
    out("resolving address");
    await perf.step(conns, "resolve addr", (c) =>
      withRetries(
        () =>
          c.id!.resolveAddress(addr.destination!, {
            source: addr.source ?? undefined,
            timeoutMs: s.timeout,
          }),
        CmEventType.ADDR_ERROR,
        s.retries,
      ).catch(report("failure getting addr")));
    out("resolving route");
    await perf.step(conns, "resolve route", (c) =>
      withRetries(
        () => c.id!.resolveRoute({ timeoutMs: s.timeout }),
        CmEventType.ROUTE_ERROR,
        s.retries,
      ).catch(report("failure resolving route")));
    out("creating qp");
    await perf.step(conns, "create qp", (c) => {
      try {
        verbs.createQp(c.id!);
      } catch (e) {
        report("failure creating qp")(e);
      }
    });
    out("connecting");
    await perf.step(conns, "connect", async (c) => {
      try {
        await c.id!.connect({
          responderResources: 1,
          initiatorDepth: 1,
          retryCount: s.retries,
          privateData: addr.connectData,
        });
      } catch (e) {
        if (e instanceof CmEventError) out(`event: ${e.eventName}, error: ${e.status}`);
        else report("failure rconnecting")(e);
        throw e;
      }
    });
    out("disconnecting");
    await perf.step(conns, "disconnect", async (c) => {
      const done = c.id!.disconnect({ close: false, timeout: 30_000 });
      c.id!.qp?.close();
      await done;
    });
    return 0;
  } finally {
    out("destroying id");
    await perf.step(conns, "destroy", (c) => c.id?.close());
    verbs.close();
    perf.show(conns, s.src !== undefined);
  }
}

/** Accepts every connection; tears each down when the client disconnects. Runs until stopped. */
async function runServer(s: Settings, channel: CmEventChannel): Promise<number> {
  const listener = channel.createId("TCP");
  const verbs = new Verbs();
  try {
    if (!bindAndListen("", listener, s.src, s.port, { portSpace: PortSpace.TCP })) return -1;
    for await (const req of listener) {
      try {
        verbs.createQp(req);
      } catch (e) {
        perror("failure creating qp", e);
        out("failing connection request");
        req.reject();
        continue;
      }
      req.accept().then(
        () => req.waitDisconnected().then(() => req.disconnect()),
        (e) => {
          if (!(e instanceof CmEventError)) perror("failure accepting", e);
          if (!req.closed) {
            out("failing connection request");
            req.reject();
          }
        },
      );
    }
    return 0;
  } finally {
    listener.close();
    verbs.close();
  }
}

if (import.meta.main) {
  await runTool(SPEC, async ({ values }) => {
    const s: Settings = {
      dst: stringOption(values, "server"),
      src: stringOption(values, "bind"),
      port: intOption(values, "port", 7471, 0, 65535),
      connections: intOption(values, "connections", 100, 1, 1 << 16),
      retries: intOption(values, "retries", 2, 0, 7),
      timeout: intOption(values, "timeout", 2000, 1, 0x7fffffff),
    };
    const channel = new CmEventChannel();
    try {
      return s.dst ? await runClient(s, channel) : await runServer(s, channel);
    } finally {
      channel.close();
    }
  });
}
