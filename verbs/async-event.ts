/**
 * Device async events (`ibv_get_async_event`) read from the context's
 * non-blocking async fd: typed, tied to the CQ/QP/SRQ/port they concern, acked.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { EventType, eventTypeStr } from "../types/enums.ts";
import { enumName } from "../types/enums.ts";
import { Errno } from "../types/errno.ts";
import { nativeError } from "../ffi/errors.ts";
import { NativeBlock } from "../ffi/memory.ts";
import type { Context } from "./context.ts";
import { objectAt } from "./_objects.ts";
import { isInstance } from "../ffi/resource.ts";
import type { CompletionQueue } from "./cq.ts";
import type { QueuePair } from "./qp.ts";
import type { SharedReceiveQueue } from "./srq.ts";

/** One async event, copied out and already acked. */
export interface AsyncEvent {
  /** `EventType` value. */
  readonly type: number;
  /** Its C name (`IBV_EVENT_SRQ_LIMIT_REACHED`). */
  readonly typeName: string;
  /** `ibv_event_type_str`. */
  readonly text: string;
  /** The CQ it concerns (CQ_ERR). */
  readonly cq?: CompletionQueue;
  /** The QP it concerns (QP events). */
  readonly qp?: QueuePair;
  /** The SRQ it concerns (SRQ_ERR, SRQ_LIMIT_REACHED). */
  readonly srq?: SharedReceiveQueue;
  /** The port it concerns (port events). */
  readonly port?: number;
}

const CQ_EVENTS = new Set<number>([EventType.CQ_ERR]);
const SRQ_EVENTS = new Set<number>([EventType.SRQ_ERR, EventType.SRQ_LIMIT_REACHED]);
const QP_EVENTS = new Set<number>([
  EventType.QP_FATAL,
  EventType.QP_REQ_ERR,
  EventType.QP_ACCESS_ERR,
  EventType.COMM_EST,
  EventType.SQ_DRAINED,
  EventType.PATH_MIG,
  EventType.PATH_MIG_ERR,
  EventType.QP_LAST_WQE_REACHED,
]);

/** Reads one async event (null on EAGAIN), copies it and acks it. */
export function readAsyncEvent(ctx: Context): AsyncEvent | null {
  ctx.assertOpen();
  const n = native();
  const L = layouts().ibv_async_event;
  const ev = new NativeBlock(L.size, 8);
  try {
    if (n.ibverbs.ibv_get_async_event(ctx.ptr, ev.ptr) !== 0) {
      const errno = n.errno();
      if (errno === Errno.EAGAIN) return null;
      throw nativeError("ibv_get_async_event", errno);
    }
    const type = ev.view.getUint32(L.fields.event_type.offset, true);
    const base = {
      type,
      typeName: enumName(EventType, type, "IBV_EVENT_"),
      text: eventTypeStr(type),
    };
    const elem = L.fields.element.offset;
    let out: AsyncEvent = base;
    if (CQ_EVENTS.has(type) || QP_EVENTS.has(type) || SRQ_EVENTS.has(type)) {
      const obj = objectAt(ctx, n.address(n.readPointer(ev.ptr, elem)));
      if (isInstance<CompletionQueue>(obj, "CompletionQueue")) out = { ...base, cq: obj };
      else if (isInstance<QueuePair>(obj, "QueuePair")) out = { ...base, qp: obj };
      else if (isInstance<SharedReceiveQueue>(obj, "SharedReceiveQueue")) {
        out = { ...base, srq: obj };
      }
    } else if (type !== EventType.DEVICE_FATAL) {
      out = { ...base, port: ev.view.getInt32(elem, true) };
    }
    n.ibverbs.ibv_ack_async_event(ev.ptr);
    return out;
  } finally {
    ev.free();
  }
}
