/**
 * The seeded fuzz driver shared by the fuzz test and `bench/fuzz.ts`: random calls against the
 * public module with valid and invalid arguments mixed, every thrown error classified.
 */
import type * as Rdma from "../lib.ts";
import type { DeviceEnv } from "../harness.ts";

type Lib = typeof Rdma;

/** What a run saw. */
export interface FuzzReport {
  /** Calls made. */
  calls: number;
  /** Calls that returned normally (or whose promise resolved). */
  succeeded: number;
  /** Calls that threw (or rejected with) one of the library's error classes. */
  typedErrors: number;
  /** Typed errors by class name. */
  byClass: Record<string, number>;
  /** Promises returned by calls that settled before the end. */
  promises: number;
  /** Errors that are not the library's: `call #n action: error`. */
  foreign: string[];
}

/** A small seeded PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Runs `calls` random calls against `lib` on the device of `env`. */
export async function fuzzRun(
  lib: Lib,
  env: DeviceEnv,
  seed: number,
  calls: number,
): Promise<FuzzReport> {
  const rand = prng(seed);
  const int = (n: number) => Math.floor(rand() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)];
  const chance = (p: number) => rand() < p;

  const report: FuzzReport = {
    calls: 0,
    succeeded: 0,
    typedErrors: 0,
    byClass: {},
    promises: 0,
    foreign: [],
  };
  const pending: Promise<void>[] = [];
  let current = "";

  const classify = (e: unknown, where: string) => {
    if (e instanceof lib.RdmaError) {
      report.typedErrors++;
      report.byClass[e.name] = (report.byClass[e.name] ?? 0) + 1;
    } else {
      const text = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      if (report.foreign.length < 50) report.foreign.push(`${where}: ${text}`);
    }
  };

  const JUNK: readonly unknown[] = [
    undefined,
    null,
    NaN,
    -1,
    0,
    1,
    1.5,
    2 ** 31,
    2 ** 32,
    2 ** 53,
    Number.MAX_VALUE,
    Infinity,
    -Infinity,
    "5",
    "",
    "fe80::1",
    true,
    {},
    [],
    [null],
    -1n,
    2n ** 70n,
    Symbol("x"),
    () => 0,
    new Uint8Array(3),
  ];
  const junk = () => pick(JUNK);
  /** Mostly a plausible value, sometimes junk. */
  const num = (valid: () => number) => chance(0.8) ? valid() : junk();

  const ctx = lib.openDevice(env.device);
  const pds: Rdma.ProtectionDomain[] = [];
  const mrs: Rdma.MemoryRegion[] = [];
  const cqs: Rdma.CompletionQueue[] = [];
  const channels: Rdma.CompletionChannel[] = [];
  const qps: Rdma.QueuePair[] = [];
  const srqs: Rdma.SharedReceiveQueue[] = [];
  const ahs: Rdma.AddressHandle[] = [];
  const mws: Rdma.MemoryWindow[] = [];
  const cmChannels: Rdma.CmEventChannel[] = [];
  const ids: Rdma.CmId[] = [];
  const gid = ctx.queryGid(env.port, env.gidIndex);
  const mtu = ctx.queryPort(env.port).activeMtu;
  const ALL = lib.AccessFlags.LOCAL_WRITE | lib.AccessFlags.REMOTE_WRITE |
    lib.AccessFlags.REMOTE_READ | lib.AccessFlags.REMOTE_ATOMIC | lib.AccessFlags.MW_BIND;

  const some = <T extends { closed: boolean }>(xs: T[]): T | undefined => {
    // mostly open objects, sometimes a closed one (use after close must be a ClosedError)
    const open = xs.filter((x) => !x.closed);
    if (open.length && chance(0.9)) return pick(open);
    return xs.length ? pick(xs) : undefined;
  };
  const lookAlike = (o: unknown) => o && typeof o === "object" ? { ...o } : o;
  /** An object argument: mostly real, sometimes closed, a look-alike copy, or junk. */
  const obj = <T extends { closed: boolean }>(xs: T[]): unknown => {
    const r = rand();
    if (r < 0.8) return some(xs);
    if (r < 0.9) return lookAlike(some(xs));
    return junk();
  };

  const pd = () => some(pds) ?? ctx.allocPd();
  const sge = (): unknown => {
    const mr = obj(mrs) as Rdma.MemoryRegion | undefined;
    const len = mr && typeof mr === "object" && typeof mr.length === "number" ? mr.length : 64;
    return {
      mr,
      offset: chance(0.7) ? undefined : num(() => int(len + 8)),
      length: chance(0.5) ? undefined : num(() => int(len + 8)),
    };
  };
  const sgList = (): unknown => chance(0.9) ? Array.from({ length: int(4) }, sge) : junk();
  const remote = (): unknown =>
    chance(0.9)
      ? {
        addr: chance(0.8) ? (some(mrs)?.addr ?? 0n) + BigInt(int(64)) : junk(),
        rkey: num(() => some(mrs)?.rkey ?? 0),
      }
      : junk();
  const opcodes = Object.values(lib.WrOpcode);
  const sendWr = (): unknown => ({
    wrId: chance(0.8) ? int(1000) : junk(),
    opcode: chance(0.9) ? pick(opcodes) : junk(),
    flags: chance(0.8) ? int(16) : junk(),
    sg: sgList(),
    imm: chance(0.5) ? undefined : num(() => int(2 ** 32)),
    remote: chance(0.5) ? undefined : remote(),
    compareAdd: chance(0.7) ? undefined : num(() => int(100)),
    swap: chance(0.7) ? undefined : num(() => int(100)),
    invalidateRkey: chance(0.8) ? undefined : num(() => int(2 ** 32)),
    ud: chance(0.8)
      ? undefined
      : { ah: obj(ahs), remoteQpn: num(() => int(2 ** 24)), remoteQkey: num(() => int(2 ** 32)) },
    bind: chance(0.9) ? undefined : {
      mw: obj(mws),
      mr: obj(mrs),
      offset: num(() => int(64)),
      length: num(() => int(64)),
      access: num(() => int(32)),
    },
  });
  const recvWr = (): unknown => ({ wrId: chance(0.8) ? int(1000) : junk(), sg: sgList() });
  const qpTypes = [lib.QpType.RC, lib.QpType.UC, lib.QpType.UD];
  const qpAttr = (): unknown => {
    if (chance(0.1)) return junk();
    const keys = [
      "qpState",
      "pathMtu",
      "qkey",
      "rqPsn",
      "sqPsn",
      "destQpNum",
      "accessFlags",
      "pkeyIndex",
      "port",
      "maxRdAtomic",
      "maxDestRdAtomic",
      "minRnrTimer",
      "timeout",
      "retryCnt",
      "rnrRetry",
    ];
    const a: Record<string, unknown> = {};
    for (let i = int(4); i >= 0; i--) a[pick(keys)] = num(() => int(8));
    if (chance(0.2)) a.ahAttr = ahAttr();
    return a;
  };
  const ahAttr = (): unknown =>
    chance(0.9)
      ? {
        port: num(() => env.port),
        dlid: chance(0.7) ? undefined : num(() => int(65536)),
        sl: chance(0.7) ? undefined : num(() => int(16)),
        grh: chance(0.8)
          ? { dgid: chance(0.8) ? gid : junk(), sgidIndex: num(() => env.gidIndex) }
          : junk(),
      }
      : junk();
  const address = (): unknown =>
    chance(0.8)
      ? {
        address: chance(0.7) ? env.address : pick(["::1", "300.1.1.1", "fe80::1%2", "x", ""]),
        port: num(() => int(65536)),
      }
      : junk();
  const waitOpts = (): unknown =>
    chance(0.5) ? { timeout: chance(0.7) ? 50 : junk() } : chance(0.5) ? undefined : junk();

  const track = (p: unknown, where: string) => {
    if (!(p instanceof Promise)) return;
    pending.push(
      p.then(
        () => {
          report.promises++;
          report.succeeded++;
        },
        (e) => {
          report.promises++;
          classify(e, `${where} (promise)`);
        },
      ),
    );
  };

  type Action = [string, () => unknown];
  const actions: Action[] = [
    ["allocPd", () => pds.push(ctx.allocPd())],
    ["allocBuffer", () => {
      const p = some(pds) ?? pd();
      mrs.push(
        p.allocBuffer(num(() => 1 + int(4096)) as number, { access: num(() => ALL) } as never),
      );
    }],
    ["registerMemory", () => {
      const arr = chance(0.9) ? new Uint8Array(1 + int(256)) : junk();
      mrs.push(pd().registerMemory(arr as Uint8Array, { access: num(() => ALL) } as never));
    }],
    ["createCompChannel", () => channels.push(ctx.createCompChannel())],
    ["createCq", () =>
      cqs.push(
        ctx.createCq({
          cqe: num(() => 1 + int(256)),
          channel: chance(0.5) ? undefined : obj(channels),
          pollBatch: chance(0.7) ? undefined : num(() => 1 + int(64)),
          compVector: chance(0.8) ? undefined : num(() => 0),
        } as never),
      )],
    ["createQp", () => {
      const cq = some(cqs) ?? ctx.createCq({ cqe: 64 });
      qps.push(
        pd().createQp({
          type: chance(0.9) ? pick(qpTypes) : junk(),
          sendCq: chance(0.9) ? cq : obj(cqs),
          recvCq: chance(0.7) ? undefined : obj(cqs),
          srq: chance(0.9) ? undefined : obj(srqs),
          cap: chance(0.8)
            ? { maxSendWr: num(() => 1 + int(32)), maxInlineData: num(() => int(128)) }
            : junk(),
        } as never),
      );
    }],
    ["activate", () => {
      const qp = some(qps);
      const peer = some(qps);
      qp?.activate(
        chance(0.8)
          ? { qpNum: peer?.qpNum ?? 1, psn: num(() => 0), gid } as never
          : junk() as never,
        { port: env.port, sgidIndex: env.gidIndex, pathMtu: mtu, accessFlags: ALL },
      );
    }],
    ["modify", () => some(qps)?.modify(qpAttr() as never)],
    ["query", () => some(qps)?.query()],
    ["toError", () => some(qps)?.toError()],
    [
      "postSend",
      () => some(qps)?.postSend(chance(0.8) ? sendWr() as never : [sendWr(), sendWr()] as never),
    ],
    ["postRecv", () => some(qps)?.postRecv(recvWr() as never)],
    ["send", () => track(some(qps)?.send(sendWr() as never, waitOpts() as never), "send")],
    ["recv", () => track(some(qps)?.recv(recvWr() as never, { timeout: 20 }), "recv")],
    ["prepareSend", () => some(qps)?.prepareSend(sendWr() as never)?.close()],
    ["poll", () => some(cqs)?.poll(num(() => 1 + int(8)) as number)],
    ["completion", () => some(cqs)?.completion(num(() => 0) as number).status],
    ["resize", () => some(cqs)?.resize(num(() => 1 + int(512)) as number)],
    ["requestNotify", () => some(cqs)?.requestNotify(junk() as boolean)],
    ["wait", () => {
      const cq = some(cqs);
      if (!cq) return;
      track(
        cq.wait({
          strategy: chance(0.8) ? pick(["busy", "event", "adaptive"]) : junk(),
          spinMicros: chance(0.5) ? undefined : num(() => int(50)),
          timeout: chance(0.9) ? 5 : junk(),
          max: chance(0.8) ? undefined : junk(),
        } as never),
        "cq.wait",
      );
    }],
    ["createSrq", () =>
      srqs.push(
        pd().createSrq({ maxWr: num(() => 1 + int(64)), maxSge: num(() => 1 + int(2)) } as never),
      )],
    ["srq.postRecv", () => some(srqs)?.postRecv(recvWr() as never)],
    ["srq.setLimit", () => some(srqs)?.setLimit(num(() => int(8)) as number)],
    ["createAh", () => ahs.push(pd().createAh(ahAttr() as never))],
    ["allocMw", () => mws.push(pd().allocMw(chance(0.9) ? lib.MwType.TYPE_2 : junk() as never))],
    [
      "mr.remote",
      () => some(mrs)?.remote(num(() => int(64)) as number, num(() => int(64)) as number),
    ],
    ["mr.buffer", () => {
      const mr = some(mrs);
      if (mr) return mr.buffer[int(mr.buffer.length + 1)];
    }],
    ["queryPort", () => ctx.queryPort(num(() => env.port) as number)],
    [
      "queryGid",
      () => ctx.queryGid(num(() => env.port) as number, num(() => env.gidIndex) as number),
    ],
    ["queryPkey", () => ctx.queryPkey(num(() => env.port) as number, num(() => 0) as number)],
    ["parseGid", () => lib.parseGid((chance(0.5) ? gid : junk()) as string)],
    ["encodeSockaddr", () => lib.encodeSockaddr(address() as never)],
    ["getAddrInfo", () =>
      lib.getAddrInfo(
        (chance(0.7) ? env.address : junk()) as string,
        (chance(0.7) ? num(() => int(65536)) : junk()) as number,
        (chance(0.8) ? { numericHost: true } : junk()) as never,
      )],
    ["cm.channel", () => cmChannels.push(new lib.CmEventChannel())],
    ["cm.createId", () => {
      const ch = some(cmChannels);
      if (ch) ids.push(ch.createId((chance(0.8) ? pick(["TCP", "UDP"]) : junk()) as never));
    }],
    ["cm.bind", () => some(ids)?.bind(address() as never)],
    [
      "cm.resolveAddress",
      () =>
        track(some(ids)?.resolveAddress(address() as never, waitOpts() as never), "resolveAddress"),
    ],
    ["cm.resolveRoute", () => track(some(ids)?.resolveRoute(waitOpts() as never), "resolveRoute")],
    ["cm.listen", () => some(ids)?.listen(num(() => int(8)) as number)],
    ["cm.options", () => {
      const id = some(ids);
      if (!id) return;
      const v = num(() => int(32)) as number;
      pick([
        () => id.setTos(v),
        () => id.setAckTimeout(v),
        () => id.setReuseAddress(junk() as boolean),
      ])();
    }],
    ["cm.connect", () =>
      track(
        some(ids)?.connect(
          {
            privateData: chance(0.7) ? new Uint8Array(int(300)) : junk(),
            responderResources: num(() => int(4)),
            retryCount: num(() => int(8)),
          } as never,
          { timeout: 50 },
        ),
        "cm.connect",
      )],
    ["cm.disconnect", () => track(some(ids)?.disconnect({ timeout: 50 }), "cm.disconnect")],
    ["close", () => {
      const all: { closed: boolean; close(): void }[] = [
        ...mrs,
        ...qps,
        ...cqs,
        ...srqs,
        ...ahs,
        ...mws,
        ...ids,
        ...channels,
        ...(chance(0.1) ? pds : []),
        ...(chance(0.1) ? cmChannels : []),
      ];
      if (all.length) pick(all).close();
    }],
  ];

  for (let i = 0; i < calls; i++) {
    const [name, fn] = pick(actions);
    current = `call #${i} ${name}`;
    report.calls++;
    try {
      fn();
      report.succeeded++;
    } catch (e) {
      classify(e, current);
    }
    // keep the live object count bounded; let promise work run now and then
    if (i % 500 === 499) {
      for (const list of [qps, mrs, cqs, srqs, ahs, mws, ids]) {
        for (const o of list.splice(0, Math.max(0, list.length - 16))) {
          try {
            (o as { close(): void }).close();
          } catch (e) {
            if (!(e instanceof lib.InvalidArgumentError)) classify(e, `${current} cleanup`);
          }
        }
      }
      await new Promise((r) => setTimeout(r, 1));
    }
  }
  // closing everything must settle every promise a call returned (ClosedError at the latest)
  try {
    for (const ch of cmChannels) ch.close();
    ctx.close();
  } catch (e) {
    classify(e, "final close");
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = await Promise.race([
    Promise.all(pending).then(() => true),
    new Promise<boolean>((r) => timer = setTimeout(() => r(false), 30_000)),
  ]);
  clearTimeout(timer);
  if (!settled) report.foreign.push("promises of fuzzed calls did not settle within 30 s of close");
  return report;
}
