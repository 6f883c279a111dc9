/**
 * The bandwidth loops, measured like perftest's:
 *
 * - the sender keeps up to tx depth messages in flight on each QP, signals one in every
 *   `cq_mod` (and the last), and walks its local (and the remote) address through the
 *   page-sized cycle buffer in cache-line steps for messages up to half a page; it records
 *   the post time of every message and the time of every completion (each one covers
 *   `cq_mod` messages), from which the report derives the average and the peak;
 * - the send_bw receiver keeps rx depth receives posted per QP (re-posting until the
 *   iteration count is covered) and times from its first to its last receive. On iWARP,
 *   which has no receiver-not-ready retry, it also RDMA-writes its receive count back every
 *   rx depth / 3 messages and the sender never gets more than rx depth ahead of it
 *   (perftest's credits);
 * - write_bw, read_bw and atomic_bw receivers do nothing while the sender runs.
 *
 * Both sides prepare one request per slot of the walk (perftest moves one request's addresses
 * before each post; preparing each slot's once posts the same requests with no per-message
 * address update) and the sender flips a request's signal flag in place when it changes. Each
 * post is one call; times go to preallocated Float64Arrays: the loops allocate nothing, except
 * the promise of each completion-channel wait with -e.
 *
 * @module
 */

import {
  type AddressHandle,
  type CompletionQueue,
  type PreparedRecv,
  type PreparedSend,
  SendFlags,
  type SendWr,
  type Sge,
  WrOpcode,
} from "../../../mod.ts";
import { QKEY } from "./bringup.ts";
import type { Settings } from "./cli.ts";
import { END, Phases, SAMPLE } from "./clock.ts";
import type { Dest } from "./oob.ts";
import type { BwTimes } from "./report.ts";
import { inc, type Resources, UD_GRH } from "./resources.ts";
import { check, eventWait, spin } from "./wait.ts";

/** How a size walks through the cycle buffer. */
function cycle(
  size: number,
  cycleBuffer: number,
  cacheLine: number,
): { step: number; slots: number } {
  const step = inc(size, cacheLine);
  return size <= cycleBuffer / 2
    ? { step, slots: Math.floor(cycleBuffer / step) }
    : { step, slots: 1 };
}

/** Sizes the run's walk needs from the exchange. */
export interface Walk {
  readonly cycleBuffer: number;
  readonly cacheLine: number;
}

/** The sender of a bandwidth test at one message size. */
export class BwSender {
  readonly #r: Resources;
  readonly #s: Settings;
  /** Per QP, one prepared request per slot of the walk (`[q * slots + slot]`). */
  readonly #wrs: PreparedSend[];
  readonly #slots: number;
  readonly #inline: number;
  readonly #tposted: Float64Array;
  readonly #tcompleted: Float64Array;
  readonly #scnt: number[];
  readonly #ccnt: number[];
  readonly #credits: Uint32Array | null;

  constructor(
    r: Resources,
    s: Settings,
    size: number,
    peers: Dest[],
    ahs: AddressHandle[] | undefined,
    walk: Walk,
  ) {
    this.#r = r;
    this.#s = s;
    const verb = s.tool.verb;
    const { step, slots } = cycle(size, walk.cycleBuffer, walk.cacheLine);
    this.#slots = slots;
    const remoteWalk = verb !== "send";
    this.#inline = (verb === "send" || verb === "write") && size <= s.inlineSize
      ? SendFlags.INLINE
      : 0;
    this.#wrs = r.qps.flatMap((qp, i) =>
      Array.from({ length: slots }, (_, slot) => {
        const off = slot * step;
        const sg = [{ mr: r.mr, offset: r.layout.sendOffset(i) + off, length: size }];
        const peer = remoteWalk ? { ...peers[i], vaddr: peers[i].vaddr + off } : peers[i];
        return qp.prepareSend(sendWrOf(s, i, sg, this.#inline, peer, ahs?.[i]));
      })
    );
    const n = s.noPeak ? 1 : Math.max(1, s.iters * r.qps.length);
    this.#tposted = new Float64Array(n);
    this.#tcompleted = new Float64Array(n);
    this.#scnt = r.qps.map(() => 0);
    this.#ccnt = r.qps.map(() => 0);
    this.#credits = r.credit
      ? new Uint32Array(r.credit.buffer.buffer, r.credit.buffer.byteOffset, 2 * r.qps.length)
      : null;
  }

  /** Frees the prepared requests (the QPs stay). */
  [Symbol.dispose](): void {
    for (const wr of this.#wrs) wr.close();
  }

  /** Runs the loop; returns the times for the report. */
  async run(): Promise<BwTimes> {
    const s = this.#s;
    const cq = this.#r.sendCq;
    const wrs = this.#wrs;
    const scnt = this.#scnt, ccnt = this.#ccnt, credits = this.#credits;
    const tp = this.#tposted, tc = this.#tcompleted;
    const nq = scnt.length, iters = s.iters, tx = s.txDepth, rx = s.rxDepth, cqMod = s.cqMod;
    const slots = this.#slots;
    const noPeak = s.noPeak, events = s.events, dur = s.duration > 0;
    const plain = this.#inline, signaled = this.#inline | SendFlags.SIGNALED;
    const total = iters * nq;
    const ph = dur ? new Phases(s.duration, s.margin) : null;
    const ev = eventWait(16);
    const flags = wrs.map(() => plain);
    scnt.fill(0);
    ccnt.fill(0);
    let totS = 0, totC = 0, counted = 0;
    if (ph) ph.start(performance.now());
    else if (noPeak) tp[0] = performance.now();
    while (dur ? ph!.state !== END : totS < total || totC < total) {
      for (let q = 0; q < nq; q++) {
        while ((dur || scnt[q] < iters) && scnt[q] - ccnt[q] + 1 <= tx) {
          if (credits !== null && scnt[q] + 1 - credits[nq + q] >= rx) break;
          const k = scnt[q];
          const w = q * slots + k % slots;
          const wr = wrs[w];
          const sig = k % cqMod === cqMod - 1 || (!dur && k === iters - 1);
          const want = sig ? signaled : plain;
          if (flags[w] !== want) wr.setFlags(0, flags[w] = want);
          if (!noPeak) tp[totS] = performance.now();
          if (ph && ph.poll() === END) break;
          wr.post();
          scnt[q]++;
          totS++;
        }
      }
      if (ph && ph.poll() === END) break;
      if (dur || totC < total) {
        const n = events ? await cq.wait(ev) : cq.poll();
        if (n > 0) {
          check(cq, n, "client");
          for (let i = 0; i < n; i++) {
            const q = cq.completion(i).wrIdNumber;
            ccnt[q] += cqMod;
            totC += cqMod;
            if (!noPeak) tc[(totC > total ? total : totC) - 1] = performance.now();
            if (ph) counted += ph.state === SAMPLE ? cqMod : 0;
          }
        }
      }
    }
    if (ph) {
      tp[0] = ph.sampleStart;
      tc[0] = ph.sampleEnd || performance.now();
      return { tposted: tp, tcompleted: tc, iters: counted, noPeak: true, cqMod };
    }
    if (noPeak) tc[0] = performance.now();
    return { tposted: tp, tcompleted: tc, iters: total, noPeak, cqMod };
  }
}

/** The work request a sender posts on QP `i` (flags are updated per message). */
function sendWrOf(
  s: Settings,
  i: number,
  sg: Sge[],
  flags: number,
  peer: Dest,
  ah: AddressHandle | undefined,
): SendWr {
  const remote = { addr: peer.vaddr, rkey: peer.rkey };
  switch (s.tool.verb) {
    case "send":
      return {
        wrId: i,
        opcode: WrOpcode.SEND,
        sg,
        flags,
        ud: ah ? { ah, remoteQpn: peer.qpn, remoteQkey: QKEY } : undefined,
      };
    case "write":
      return { wrId: i, opcode: WrOpcode.RDMA_WRITE, sg, flags, remote };
    case "read":
      return { wrId: i, opcode: WrOpcode.RDMA_READ, sg, flags, remote };
    default:
      return s.atomicType === "FETCH_AND_ADD"
        ? { wrId: i, opcode: WrOpcode.ATOMIC_FETCH_AND_ADD, sg, flags, remote, compareAdd: 1 }
        : {
          wrId: i,
          opcode: WrOpcode.ATOMIC_CMP_AND_SWP,
          sg,
          flags,
          remote,
          compareAdd: 0,
          swap: 0,
        };
  }
}

/** How long a send_bw receiver waits without any message before it gives up (perftest: 60 s). */
const STALL_MS = 60_000;

/** The receiver of send_bw at one message size. */
export class BwReceiver {
  readonly #r: Resources;
  readonly #s: Settings;
  /** Per QP, one prepared receive per slot of the walk (`[q * slots + slot]`). */
  readonly #recvs: PreparedRecv[];
  readonly #slots: number;
  readonly #posted: number[];
  readonly #rcnt: number[];
  readonly #creditWrs: PreparedSend[] | null;
  readonly #creditOut: number[];
  readonly #ctrl: Uint32Array | null;
  readonly #tposted = new Float64Array(1);
  readonly #tcompleted = new Float64Array(1);

  constructor(r: Resources, s: Settings, size: number, peers: Dest[], walk: Walk) {
    this.#r = r;
    this.#s = s;
    const ud = s.connection === "UD";
    const { step, slots } = cycle(size, walk.cycleBuffer, walk.cacheLine);
    this.#slots = ud ? 1 : slots;
    this.#recvs = r.qps.flatMap((qp, i) =>
      Array.from({ length: this.#slots }, (_, slot) =>
        qp.prepareRecv({
          wrId: i,
          sg: [{
            mr: r.mr,
            offset: r.layout.recvOffset(i) + slot * step,
            length: size + (ud ? UD_GRH : 0),
          }],
        }))
    );
    this.#posted = r.qps.map(() => 0);
    this.#rcnt = r.qps.map(() => 0);
    this.#creditOut = r.qps.map(() => 0);
    const credit = r.credit;
    this.#ctrl = credit
      ? new Uint32Array(credit.buffer.buffer, credit.buffer.byteOffset, 2 * r.qps.length)
      : null;
    this.#creditWrs = credit
      ? r.qps.map((qp, i) =>
        qp.prepareSend({
          wrId: i,
          opcode: WrOpcode.RDMA_WRITE,
          sg: [{ mr: credit, offset: 4 * i, length: 4 }],
          remote: { addr: peers[i].vaddr, rkey: peers[i].rkey },
        })
      )
      : null;
  }

  /** Frees the prepared receives and credit writes (the QPs stay). */
  [Symbol.dispose](): void {
    for (const wr of this.#recvs) wr.close();
    for (const wr of this.#creditWrs ?? []) wr.close();
  }

  /** Posts rx depth receives on every QP (walking the cycle buffer), before the start. */
  postRecvs(): void {
    const rx = this.#s.rxDepth, slots = this.#slots;
    for (let q = 0; q < this.#posted.length; q++) {
      for (let j = 0; j < rx; j++) this.#recvs[q * slots + j % slots].post();
      this.#posted[q] = rx;
      this.#rcnt[q] = 0;
      this.#creditOut[q] = 0;
    }
  }

  /** Receives until the iteration count (or the duration) is covered. */
  async run(): Promise<BwTimes> {
    const s = this.#s;
    const { recvCq, sendCq } = this.#r;
    const recvs = this.#recvs, posted = this.#posted, rcnt = this.#rcnt;
    const creditWrs = this.#creditWrs, out = this.#creditOut, ctrl = this.#ctrl;
    const nq = posted.length, iters = s.iters, tx = s.txDepth, rx = s.rxDepth;
    const creditCnt = Math.max(1, Math.floor(rx / 3));
    const slots = this.#slots;
    const events = s.events, dur = s.duration > 0;
    const total = iters * nq;
    const ph = dur ? new Phases(s.duration, s.margin) : null;
    const ev = eventWait(16);
    const tp = this.#tposted, tc = this.#tcompleted;
    let tot = 0, counted = 0, first = true, spins = 0;
    let last = performance.now();
    while (dur ? ph!.state !== END : tot < total) {
      const n = events ? await recvCq.wait(ev) : recvCq.poll();
      if (n === 0) {
        if (ph) ph.poll();
        else if ((++spins & 0xfff) === 0 && performance.now() - last > STALL_MS) {
          console.error(
            ` Did not get Message for ${
              STALL_MS / 1000
            } Seconds, exiting..\n Total Received=${tot}, Total Iters Required=${total}`,
          );
          break;
        }
        continue;
      }
      check(recvCq, n, "server");
      const now = performance.now();
      last = now;
      if (first) {
        first = false;
        if (ph) ph.start(now);
        else tp[0] = now;
      }
      const sampling = ph !== null && ph.tick(now) === SAMPLE;
      for (let i = 0; i < n; i++) {
        const q = recvCq.completion(i).wrIdNumber;
        rcnt[q]++;
        tot++;
        counted += sampling ? 1 : 0;
        if (dur || posted[q] + 1 <= iters) {
          recvs[q * slots + posted[q] % slots].post();
          posted[q]++;
        }
        if (creditWrs !== null && ((rcnt[q] % rx) % creditCnt) === 0) {
          ctrl![q] = rcnt[q];
          while (out[q] >= tx) this.#reapCredits(sendCq, out);
          creditWrs[q].post();
          out[q]++;
        }
      }
    }
    if (creditWrs !== null) {
      let pending = 0;
      for (let q = 0; q < nq; q++) pending += out[q];
      while (pending > 0) pending -= this.#reapCredits(sendCq, out);
    }
    if (ph) {
      tp[0] = ph.sampleStart;
      tc[0] = ph.sampleEnd || performance.now();
      return { tposted: tp, tcompleted: tc, iters: counted, noPeak: true, cqMod: 1 };
    }
    tc[0] = performance.now();
    return { tposted: tp, tcompleted: tc, iters: total, noPeak: true, cqMod: 1 };
  }

  #reapCredits(cq: CompletionQueue, out: number[]): number {
    const n = spin(cq, null);
    check(cq, n, "server (credit write)");
    for (let i = 0; i < n; i++) out[cq.completion(i).wrIdNumber]--;
    return n;
  }
}
