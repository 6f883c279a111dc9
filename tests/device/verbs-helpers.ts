/**
 * Shared setup of the verbs device tests: a device context, a PD, CQs and
 * connected QP pairs on the one test device (both ends on the same port).
 */
import assert from "node:assert/strict";
import type { DeviceEnv } from "../harness.ts";
import {
  type CompletionQueue,
  type Context,
  type CreatableQpType,
  openDevice,
  type ProtectionDomain,
  type QpCap,
  type QpTransitionOptions,
  QpType,
  type QueuePair,
  type WorkCompletionData,
} from "../lib.ts";

/** A context, PD and CQ that close together. */
export interface Fixture {
  ctx: Context;
  pd: ProtectionDomain;
  cq: CompletionQueue;
  env: DeviceEnv;
  [Symbol.dispose](): void;
}

/** Opens the test device with a PD and one CQ. */
export function fixture(env: DeviceEnv, cqe = 64): Fixture {
  const ctx = openDevice(env.device);
  const pd = ctx.allocPd();
  const cq = ctx.createCq({ cqe });
  return { ctx, pd, cq, env, [Symbol.dispose]: () => ctx.close() };
}

/** Connection options for the test device (GID index, active MTU). */
export function connectOptions(f: Fixture, extra: QpTransitionOptions = {}): QpTransitionOptions {
  return {
    port: f.env.port,
    sgidIndex: f.env.gidIndex,
    pathMtu: f.ctx.queryPort(f.env.port).activeMtu,
    ...extra,
  };
}

/** Two QPs of `type` connected to each other (RC/UC), or brought to RTS (UD). */
export function qpPair(
  f: Fixture,
  options: {
    type?: CreatableQpType;
    cap?: QpCap;
    cqA?: CompletionQueue;
    cqB?: CompletionQueue;
    connect?: QpTransitionOptions;
  } = {},
): [QueuePair, QueuePair] {
  const type = options.type ?? QpType.RC;
  const a = f.pd.createQp({ type, sendCq: options.cqA ?? f.cq, cap: options.cap });
  const b = f.pd.createQp({ type, sendCq: options.cqB ?? f.cq, cap: options.cap });
  const gid = f.ctx.queryGid(f.env.port, f.env.gidIndex);
  const o = connectOptions(f, options.connect);
  a.activate(type === QpType.UD ? undefined : { qpNum: b.qpNum, psn: 0, gid }, o);
  b.activate(type === QpType.UD ? undefined : { qpNum: a.qpNum, psn: 0, gid }, o);
  return [a, b];
}

/** Polls `cq` until `count` completions arrived (copies), or fails after `ms`. */
export function waitWc(cq: CompletionQueue, count = 1, ms = 10_000): WorkCompletionData[] {
  const out: WorkCompletionData[] = [];
  const deadline = Date.now() + ms;
  while (out.length < count) {
    const got = cq.poll(Math.min(cq.pollBatch, count - out.length));
    for (let i = 0; i < got; i++) out.push(cq.completion(i).toObject());
    if (got === 0 && Date.now() > deadline) {
      assert.fail(`timed out waiting for ${count} completions (got ${out.length})`);
    }
  }
  return out;
}

/** Polls until `count` completions arrived, asynchronously (lets timers run). */
export async function waitWcAsync(
  cq: CompletionQueue,
  count = 1,
  ms = 20_000,
): Promise<WorkCompletionData[]> {
  const out: WorkCompletionData[] = [];
  const deadline = Date.now() + ms;
  while (out.length < count) {
    const got = cq.poll(Math.min(cq.pollBatch, count - out.length));
    for (let i = 0; i < got; i++) out.push(cq.completion(i).toObject());
    if (got === 0) {
      if (Date.now() > deadline) {
        assert.fail(`timed out waiting for ${count} completions (got ${out.length})`);
      }
      await new Promise((r) => setTimeout(r, 1));
    }
  }
  return out;
}

/** Asserts that nothing more arrives on `cq` for `ms`. */
export function assertNoWc(cq: CompletionQueue, ms = 50): void {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) assert.equal(cq.poll(), 0, "unexpected completion");
}
