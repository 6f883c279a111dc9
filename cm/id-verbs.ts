/**
 * The helpers of `<rdma/rdma_verbs.h>` - all `static inline` in C, so never FFI calls here - as
 * thin conveniences over the library's own objects: the QP of a CM id, its PD and its send and
 * receive CQs. `rdma_reg_msgs`/`_read`/`_write` register memory in the id's PD,
 * `rdma_post_send`/`_recv`/`_read`/`_write`/`_ud_send` (and the SGE-list `...v` forms) post one
 * work request on the id's QP (a receive goes to its SRQ when it has one), and
 * `rdma_get_send_comp`/`_recv_comp` wait for the next completion of the QP's send or receive CQ
 * (on its completion channel when it has one, else by polling) and return a copy of it, whatever
 * its status, as C does. `rdma_dereg_mr` is `mr.close()`.
 *
 * As in C, a QP whose send and receive CQs are one CQ gets the next completion of either kind
 * from both `getSendComp` and `getRecvComp`; `createEndpoint` gives every QP two CQs.
 *
 * @module
 */

import { AccessFlags, WrOpcode } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { asBytes, type Bytes } from "../types/bytes.ts";
import { checkInteger, checkObject, describe } from "../types/check.ts";
import { isInstance } from "../ffi/resource.ts";
import type { WaitOptions } from "../poller/wait.ts";
import type { CompletionQueue } from "../verbs/cq.ts";
import type { MemoryRegion } from "../verbs/mr.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { QueuePair } from "../verbs/qp.ts";
import type { WorkCompletionData } from "../verbs/wc.ts";
import type { Remote, SendWr, Sge, U64, UdDestination } from "../verbs/wr.ts";
import type { CmIdBase } from "./id-base.ts";

/**
 * The local memory of a message helper: a whole MR, a range of one (an {@link Sge}), or a list
 * of ranges (the SGE-list forms `rdma_post_sendv`, `_recvv`, `_readv`, `_writev`).
 */
export type MsgBuffer = MemoryRegion | Sge | readonly Sge[];

/** Options of the posting helpers: `context` of the C helpers, and the send flags. */
export interface MsgOptions {
  /** The work request's id (`context` in C; default 0). */
  readonly wrId?: U64;
  /** An OR of `SendFlags` (sends, reads and writes; default `SIGNALED`). */
  readonly flags?: number;
}

/** The SGE list of a {@link MsgBuffer}. */
function sgList(buffer: MsgBuffer, what: string): readonly Sge[] {
  if (isInstance<MemoryRegion>(buffer, "MemoryRegion")) return [{ mr: buffer }];
  if (Array.isArray(buffer)) return buffer;
  checkObject(what, buffer);
  if (!isInstance((buffer as Sge).mr, "MemoryRegion")) {
    throw new InvalidArgumentError(
      `${what} must be a MemoryRegion, { mr, offset, length } or a list of them, got ${
        describe(buffer)
      }`,
    );
  }
  return [buffer as Sge];
}

/** The id's QP, or the error that says how to get one. */
function qpOf(id: CmIdBase, op: string): QueuePair {
  id.assertOpen();
  const qp = id.qp;
  if (!qp) {
    throw new InvalidArgumentError(
      `${op}: the id has no QP (create it with id.createQp() or createEndpoint())`,
    );
  }
  return qp;
}

/** The id's PD, or the error that says how to get one. */
function pdOf(id: CmIdBase, op: string): ProtectionDomain {
  id.assertOpen();
  const pd = id.pd;
  if (!pd) {
    throw new InvalidArgumentError(
      `${op}: the id has no PD (create its QP with id.createQp() or createEndpoint())`,
    );
  }
  return pd;
}

/**
 * Registers `memory` (bytes to register in place, or a length to allocate) in the id's PD with
 * `access` (`rdma_reg_msgs`: LOCAL_WRITE; `rdma_reg_read`: + REMOTE_READ; `rdma_reg_write`:
 * + REMOTE_WRITE).
 */
export function regMemory(
  id: CmIdBase,
  op: "rdma_reg_msgs" | "rdma_reg_read" | "rdma_reg_write",
  memory: Bytes | number,
): MemoryRegion {
  const pd = pdOf(id, op);
  const access = AccessFlags.LOCAL_WRITE |
    (op === "rdma_reg_read" ? AccessFlags.REMOTE_READ : 0) |
    (op === "rdma_reg_write" ? AccessFlags.REMOTE_WRITE : 0);
  if (typeof memory === "number") {
    checkInteger(`${op}: length`, memory, 1, Number.MAX_SAFE_INTEGER);
    return pd.allocBuffer(memory, { access });
  }
  return pd.registerMemory(asBytes(memory, `${op}: memory`), { access });
}

/** `rdma_post_recv` / `rdma_post_recvv`: one receive on the id's QP (or its SRQ). */
export function postRecvMsg(id: CmIdBase, buffer: MsgBuffer, wrId: U64): void {
  const qp = qpOf(id, "rdma_post_recv");
  const wr = { wrId, sg: sgList(buffer, "rdma_post_recv: buffer") };
  if (qp.srq) qp.srq.postRecv(wr);
  else qp.postRecv(wr);
}

/** Bytes to send inline, or the SGE list of the local memory. */
function payload(
  message: MsgBuffer | Uint8Array,
  what: string,
): { sg: readonly Sge[] } | { inline: Uint8Array } {
  return message instanceof Uint8Array ? { inline: message } : { sg: sgList(message, what) };
}

/** The common fields of a send-queue WR from {@link MsgOptions}. */
function base(o: MsgOptions): { wrId: U64; flags?: number } {
  checkObject("options", o);
  return o.flags === undefined ? { wrId: o.wrId ?? 0 } : { wrId: o.wrId ?? 0, flags: o.flags };
}

/**
 * One send-queue WR of the helpers: `rdma_post_send(v)` (SEND), `rdma_post_write(v)`
 * (RDMA_WRITE), `rdma_post_read(v)` (RDMA_READ), `rdma_post_ud_send` (SEND to a UD
 * destination). A `Uint8Array` message is sent inline (no MR).
 */
export function postSendMsg(
  id: CmIdBase,
  kind: "send" | "write" | "read" | "udSend",
  message: MsgBuffer | Uint8Array,
  options: MsgOptions,
  to?: Remote | UdDestination,
): void {
  const op = `rdma_post_${kind === "udSend" ? "ud_send" : kind}`;
  const qp = qpOf(id, op);
  const opcode = kind === "read"
    ? WrOpcode.RDMA_READ
    : kind === "write"
    ? WrOpcode.RDMA_WRITE
    : WrOpcode.SEND;
  if (kind === "read" && message instanceof Uint8Array) {
    throw new InvalidArgumentError(`${op}: the destination of a read must be registered memory`);
  }
  const where = kind === "send"
    ? {}
    : kind === "udSend"
    ? { ud: checkObject<UdDestination>(`${op}: destination`, to) }
    : { remote: checkObject<Remote>(`${op}: remote`, to) };
  // the shapes match the opcode by construction; the QP checks every field before posting
  qp.postSend(
    { ...base(options), opcode, ...where, ...payload(message, `${op}: buffer`) } as SendWr,
  );
}

/**
 * `rdma_get_send_comp` / `rdma_get_recv_comp`: waits for the next completion of the QP's send or
 * receive CQ and returns a copy of it (its status unchecked, as in C).
 */
export async function getComp(
  id: CmIdBase,
  which: "send" | "recv",
  options: WaitOptions,
): Promise<WorkCompletionData> {
  const qp = qpOf(id, `rdma_get_${which}_comp`);
  const cq: CompletionQueue = which === "send" ? qp.sendCq : qp.recvCq;
  await cq.wait({ ...options, max: 1, strategy: cq.channel ? "event" : "busy" });
  return cq.completion(0).toObject();
}
