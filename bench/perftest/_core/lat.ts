/**
 * The latency loops, measured like perftest's:
 *
 * - send_lat: ping-pong of SENDs. The client sends first; each side posts its next send
 *   once the peer's message has arrived. One sample per round trip, halved in the report.
 * - write_lat: ping-pong of RDMA WRITEs with no receive at all: each side writes its
 *   counter into the last byte of the message and spins on the last byte of its own
 *   receive area until the peer's write of the same counter has landed.
 * - read_lat / atomic_lat: the client posts one read (or atomic) and waits for its
 *   completion, a full round trip per sample; the server only keeps its memory registered.
 *
 * Work requests are prepared once per message size; the loops post them, poll the CQs and
 * store post times in a preallocated Float64Array: nothing is allocated while measuring
 * (except with -e, where every completion-channel wait is a promise).
 *
 * @module
 */

import {
  type AddressHandle,
  type PreparedRecv,
  type PreparedSend,
  SendFlags,
  WrOpcode,
} from "../../../mod.ts";
import { QKEY } from "./bringup.ts";
import type { Settings } from "./cli.ts";
import { END, Phases, SAMPLE } from "./clock.ts";
import type { Dest } from "./oob.ts";
import { type Resources, UD_GRH } from "./resources.ts";
import { check, eventWait, spin } from "./wait.ts";

/** What a latency run measured. */
export interface LatResult {
  /** Post time (ms) of every iteration (iteration mode). */
  readonly tposted: Float64Array;
  /** Iterations measured (duration mode: those in the sampled window). */
  readonly iters: number;
  /** Duration mode: the sampled window in ms. */
  readonly sampleMs: number;
}

/** One latency test at one message size. */
export interface LatTest {
  /** Posts the receives the test needs before the peer may send (send_lat). */
  postRecvs(): void;
  /** Runs the loop. */
  run(): Promise<LatResult>;
}

function phases(s: Settings): Phases | null {
  return s.duration ? new Phases(s.duration, s.margin) : null;
}

function result(s: Settings, t: Float64Array, ph: Phases | null, counted: number): LatResult {
  if (!ph) return { tposted: t, iters: s.iters, sampleMs: 0 };
  const end = ph.sampleEnd || performance.now();
  return { tposted: t, iters: counted, sampleMs: end - ph.sampleStart };
}

/** send_lat. */
class SendLat implements LatTest {
  readonly #r: Resources;
  readonly #s: Settings;
  readonly #server: boolean;
  readonly #send: PreparedSend;
  readonly #recv: PreparedRecv;
  readonly #inline: number;
  readonly #t: Float64Array;

  constructor(r: Resources, s: Settings, size: number, peer: Dest, ah: AddressHandle | undefined) {
    this.#r = r;
    this.#s = s;
    this.#server = s.host === undefined;
    const qp = r.qps[0];
    const ud = s.connection === "UD";
    this.#inline = size <= s.inlineSize ? SendFlags.INLINE : 0;
    this.#send = qp.prepareSend({
      wrId: 0,
      opcode: WrOpcode.SEND,
      sg: [{ mr: r.mr, offset: r.layout.sendOffset(0), length: size }],
      flags: SendFlags.SIGNALED | this.#inline,
      ud: ud ? { ah: ah!, remoteQpn: peer.qpn, remoteQkey: QKEY } : undefined,
    });
    this.#recv = qp.prepareRecv({
      wrId: 0,
      sg: [{ mr: r.mr, offset: r.layout.recvOffset(0), length: size + (ud ? UD_GRH : 0) }],
    });
    this.#t = new Float64Array(Math.max(s.iters, 1));
  }

  postRecvs(): void {
    for (let i = 0; i < this.#s.rxDepth; i++) this.#recv.post();
  }

  async run(): Promise<LatResult> {
    const s = this.#s;
    const { sendCq, recvCq } = this.#r;
    const send = this.#send, recv = this.#recv, t = this.#t;
    const iters = s.iters, rxDepth = s.rxDepth, cqMod = s.cqMod, events = s.events;
    const dur = s.duration > 0;
    const client = !this.#server;
    const ph = phases(s);
    const ev = eventWait(1);
    const plain = this.#inline, signaled = SendFlags.SIGNALED | this.#inline;
    let flags = signaled;
    let scnt = 0, rcnt = 0, counted = 0;
    while (dur ? ph!.state !== END : scnt < iters || rcnt < iters) {
      if ((dur || rcnt < iters) && !(scnt < 1 && client)) {
        const n = events ? await recvCq.wait(ev) : spin(recvCq, ph);
        if (n === 0) break; // the duration ended while waiting
        check(recvCq, n, "receive");
        if (ph) {
          if (!ph.started) ph.start(performance.now());
          counted += ph.poll() === SAMPLE ? 1 : 0;
        }
        rcnt++;
        if (dur || rcnt + rxDepth <= iters) recv.post();
      }
      if (dur || scnt < iters) {
        if (ph && ph.state === END) break;
        if (!dur) t[scnt] = performance.now();
        scnt++;
        const sig = scnt % cqMod === 0 || (!dur && scnt === iters);
        const want = sig ? signaled : plain;
        if (want !== flags) send.setFlags(0, flags = want);
        send.post();
        if (sig) {
          const n = events ? await sendCq.wait(ev) : spin(sendCq, ph);
          if (n === 0) break;
          check(sendCq, n, "send");
        }
      }
    }
    return result(s, t, ph, counted);
  }
}

/** write_lat. */
class WriteLat implements LatTest {
  readonly #r: Resources;
  readonly #s: Settings;
  readonly #server: boolean;
  readonly #write: PreparedSend;
  readonly #postIdx: number;
  readonly #pollIdx: number;
  readonly #t: Float64Array;

  constructor(r: Resources, s: Settings, size: number, peer: Dest) {
    this.#r = r;
    this.#s = s;
    this.#server = s.host === undefined;
    const inline = size <= s.inlineSize ? SendFlags.INLINE : 0;
    this.#write = r.qps[0].prepareSend({
      wrId: 0,
      opcode: WrOpcode.RDMA_WRITE,
      sg: [{ mr: r.mr, offset: r.layout.sendOffset(0), length: size }],
      remote: { addr: peer.vaddr, rkey: peer.rkey },
      flags: SendFlags.SIGNALED | inline,
    });
    this.#postIdx = r.layout.sendOffset(0) + size - 1;
    this.#pollIdx = r.layout.remoteOffset(0) + size - 1;
    this.#t = new Float64Array(Math.max(s.iters, 1));
  }

  postRecvs(): void {}

  run(): Promise<LatResult> {
    const s = this.#s;
    const cq = this.#r.sendCq;
    const buf = this.#r.mr.buffer;
    const write = this.#write, t = this.#t;
    const postIdx = this.#postIdx, pollIdx = this.#pollIdx;
    const iters = s.iters, dur = s.duration > 0, server = this.#server;
    const ph = phases(s);
    if (ph) ph.start(performance.now());
    let scnt = 0, ccnt = 0, rcnt = 0, counted = 0;
    // the wait spins on memory with no call, as perftest's volatile load does: an atomic
    // load is one a JIT may not hoist out of the loop (the previous write's completion was
    // polled before, so the send CQ has nothing to give here)
    while (dur ? ph!.state !== END : scnt < iters || ccnt < iters || rcnt < iters) {
      if ((dur || rcnt < iters) && !(scnt < 1 && server)) {
        rcnt++;
        const want = rcnt & 0xff;
        while (Atomics.load(buf, pollIdx) !== want) {
          if (ph && ph.poll() === END) break;
        }
      }
      if (ph && ph.state === END) break;
      if (dur || scnt < iters) {
        if (!dur) t[scnt] = performance.now();
        buf[postIdx] = ++scnt & 0xff;
        write.post();
      }
      while (ccnt < scnt) {
        const n = cq.poll();
        if (n > 0) {
          check(cq, n, "write");
          ccnt += n;
          if (ph) counted += ph.poll() === SAMPLE ? n : 0;
        } else if (ph && ph.poll() === END) break;
      }
    }
    return Promise.resolve(result(s, t, ph, counted));
  }
}

/** read_lat and atomic_lat (client only). */
class ReadAtomicLat implements LatTest {
  readonly #r: Resources;
  readonly #s: Settings;
  readonly #wr: PreparedSend;
  readonly #t: Float64Array;

  constructor(r: Resources, s: Settings, size: number, peer: Dest) {
    this.#r = r;
    this.#s = s;
    const sg = [{ mr: r.mr, offset: r.layout.sendOffset(0), length: size }];
    const remote = { addr: peer.vaddr, rkey: peer.rkey };
    this.#wr = s.tool.verb === "read"
      ? r.qps[0].prepareSend({ wrId: 0, opcode: WrOpcode.RDMA_READ, sg, remote })
      : s.atomicType === "FETCH_AND_ADD"
      ? r.qps[0].prepareSend({
        wrId: 0,
        opcode: WrOpcode.ATOMIC_FETCH_AND_ADD,
        sg,
        remote,
        compareAdd: 1,
      })
      : r.qps[0].prepareSend({
        wrId: 0,
        opcode: WrOpcode.ATOMIC_CMP_AND_SWP,
        sg,
        remote,
        compareAdd: 0,
        swap: 0,
      });
    this.#t = new Float64Array(Math.max(s.iters, 1));
  }

  postRecvs(): void {}

  async run(): Promise<LatResult> {
    const s = this.#s;
    const cq = this.#r.sendCq;
    const wr = this.#wr, t = this.#t;
    const iters = s.iters, dur = s.duration > 0, events = s.events;
    const ph = phases(s);
    const ev = eventWait(1);
    if (ph) ph.start(performance.now());
    let scnt = 0, counted = 0;
    while (dur ? ph!.state !== END : scnt < iters) {
      if (!dur) t[scnt] = performance.now();
      scnt++;
      wr.post();
      if (ph && ph.poll() === END) break;
      const n = events ? await cq.wait(ev) : spin(cq, ph);
      if (n === 0) break;
      check(cq, n, s.tool.verb);
      if (ph) counted += ph.poll() === SAMPLE ? 1 : 0;
    }
    return result(s, t, ph, counted);
  }
}

/** The latency test of `s.tool` at `size`. */
export function latencyTest(
  r: Resources,
  s: Settings,
  size: number,
  peer: Dest,
  ah: AddressHandle | undefined,
): LatTest {
  switch (s.tool.verb) {
    case "send":
      return new SendLat(r, s, size, peer, ah);
    case "write":
      return new WriteLat(r, s, size, peer);
    default:
      return new ReadAtomicLat(r, s, size, peer);
  }
}
