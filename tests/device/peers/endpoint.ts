/**
 * The verbs side of a CM endpoint for tests and peers: PD, completion channel,
 * CQ and MR from the id's context, a QP created on the id, receives posted
 * before connect/accept, and message send/receive through the poller. It imports the
 * connection manager's entry point only (`cm.ts`), as a program of its kind would: the soak's
 * rdma_cm client measures the memory of exactly that (bench/soak.ts).
 */

import {
  AccessFlags,
  type AddressHandle,
  awaitCompletions,
  ClosedError,
  type CmId,
  type CompletionChannel,
  type CompletionQueue,
  type MemoryRegion,
  type ProtectionDomain,
  QpType,
  type QueuePair,
  WcOpcode,
  WcStatus,
  WrOpcode,
} from "../../../cm.ts";

const SEND_ID = 1000n;

/** Bytes of a UD receive that hold the GRH. */
export const GRH = 40;

/** One received message. */
export interface Received {
  /** The payload (GRH stripped for UD). */
  bytes: Uint8Array;
  /** The sender's QP number (UD). */
  srcQp: number;
  /** The completion as plain data. */
  wc: Record<string, unknown>;
  /** UD with `replyAh`: an AH back to the sender (close it). */
  ah?: AddressHandle;
}

/** A QP with its resources and a slotted receive/send buffer. */
export class Endpoint {
  readonly pd: ProtectionDomain;
  readonly channel: CompletionChannel;
  readonly cq: CompletionQueue;
  readonly qp: QueuePair;
  readonly mr: MemoryRegion;
  readonly slot: number;
  readonly depth: number;
  readonly ud: boolean;
  #received: Received[] = [];
  readonly #replyAh: boolean;
  #sendsDone = 0;
  #flushed = false;
  #sendFlushed = false;
  readonly #port: number;
  readonly #abort = new AbortController();

  constructor(
    id: CmId,
    { depth = 8, slot = 256, replyAh = false }: {
      depth?: number;
      slot?: number;
      replyAh?: boolean;
    } = {},
  ) {
    const ctx = id.context;
    this.#replyAh = replyAh;
    this.#port = id.portNum;
    this.ud = id.isUd;
    this.depth = depth;
    this.slot = slot + (this.ud ? GRH : 0);
    this.pd = ctx.allocPd();
    this.channel = ctx.createCompChannel();
    this.cq = ctx.createCq({ cqe: depth * 4, channel: this.channel });
    this.qp = id.createQp(this.pd, {
      sendCq: this.cq,
      recvCq: this.cq,
      type: this.ud ? QpType.UD : QpType.RC,
      cap: { maxSendWr: depth, maxRecvWr: depth, maxSendSge: 1, maxRecvSge: 1 },
    });
    this.mr = this.pd.allocBuffer(this.slot * depth * 2, { access: AccessFlags.LOCAL_WRITE });
    for (let i = 0; i < depth; i++) this.postRecv(i);
  }

  /** Posts receive slot `i`. */
  postRecv(i: number): void {
    this.qp.postRecv({ wrId: i, sg: [{ mr: this.mr, offset: i * this.slot, length: this.slot }] });
  }

  async #poll(timeout: number): Promise<void> {
    const n = await awaitCompletions(this.cq, { timeout, signal: this.#abort.signal });
    for (let i = 0; i < n; i++) {
      const wc = this.cq.completion(i);
      if (wc.status === WcStatus.WR_FLUSH_ERR) {
        // the connection went away (the peer disconnected): end waits, don't throw here
        this.#flushed = true;
        if (wc.wrId === SEND_ID) this.#sendFlushed = true;
        continue;
      }
      wc.check();
      if (wc.opcode & WcOpcode.RECV) {
        const slot = Number(wc.wrId);
        const off = slot * this.slot + (this.ud ? GRH : 0);
        const len = wc.byteLen - (this.ud ? GRH : 0);
        this.#received.push({
          bytes: this.mr.buffer.slice(off, off + len),
          srcQp: wc.srcQp,
          wc: wc.toObject() as unknown as Record<string, unknown>,
          ah: this.#replyAh
            ? this.pd.createAhFromWc(wc, { mr: this.mr, offset: slot * this.slot }, this.#port)
            : undefined,
        });
        this.postRecv(slot);
      } else {
        this.#sendsDone++;
      }
    }
  }

  /** The next received message (RC) or datagram payload (UD, GRH stripped). */
  async recv(timeout = 10_000): Promise<Received> {
    const end = Date.now() + timeout;
    while (this.#received.length === 0) {
      if (this.#flushed) throw new ClosedError("Endpoint (receives flushed: disconnected)");
      await this.#poll(Math.max(1, end - Date.now()));
    }
    return this.#received.shift()!;
  }

  /** Sends `bytes` (RC, or UD to `ud`) and waits for its completion. */
  async send(
    bytes: Uint8Array,
    ud?: { ah: AddressHandle; remoteQpn: number; remoteQkey: number },
    timeout = 10_000,
  ): Promise<void> {
    const off = this.depth * this.slot;
    this.mr.buffer.set(bytes, off);
    const target = this.#sendsDone + 1;
    this.qp.postSend({
      wrId: SEND_ID,
      opcode: WrOpcode.SEND,
      sg: bytes.length ? [{ mr: this.mr, offset: off, length: bytes.length }] : [],
      ...(ud ? { ud } : {}),
    });
    const end = Date.now() + timeout;
    while (this.#sendsDone < target) {
      if (this.#sendFlushed) throw new ClosedError("Endpoint (send flushed: disconnected)");
      await this.#poll(Math.max(1, end - Date.now()));
    }
  }

  /**
   * Sends `bytes` (RC) and waits for its completion or for `gone` (the peer's disconnect),
   * whichever comes first: true when the send completed, false when the peer disconnected
   * first. A peer that disconnects as soon as it has the message can leave its ACK lost, and
   * soft-RoCE then resends until this QP leaves RTS (docs/08); the teardown after a false ends
   * the send's wait.
   */
  async sendUnlessGone(bytes: Uint8Array, gone: Promise<unknown>): Promise<boolean> {
    const sent = this.send(bytes).then(
      () => true,
      (e) => {
        if (e instanceof ClosedError) return false; // flushed: the peer disconnected meanwhile
        throw e;
      },
    );
    const first = await Promise.race([sent, gone.then(() => false)]);
    if (!first) sent.catch(() => {}); // settled by the teardown (flushed or aborted)
    return first;
  }

  /** Closes the verbs resources (the QP first, through the CQ's ownership). */
  close(): void {
    this.#abort.abort(); // pending waits end now instead of keeping the process alive
    this.mr.close();
    this.cq.close();
    this.channel.close();
    this.pd.close();
  }
}
