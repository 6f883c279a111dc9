/**
 * {@link deviceLimits}: what a stream needs of its device, queried once per device context and
 * port (librdmacm keeps its devices' attributes the same way, and rsocket sizes its queues from
 * them). A device's limits do not change while its context is open; a full `queryDevice` and
 * `queryPort` per connection cost Deno about 90 KiB of JS heap each.
 *
 * @module
 */

import type { Context } from "../verbs/context.ts";

/** The device and port limits a stream sizes itself by. */
export interface DeviceLimits {
  /** `max_qp_wr`. */
  readonly maxQpWr: number;
  /** `max_qp_rd_atom`: RDMA READs this side can answer at once per QP. */
  readonly maxQpRdAtom: number;
  /** `max_qp_init_rd_atom`: RDMA READs this side can have outstanding per QP. */
  readonly maxQpInitRdAtom: number;
  /** The port's `max_msg_sz` (bounded to 2^31), or 2^31 when the port cannot be queried. */
  readonly maxMessageSize: number;
}

const byContext = new WeakMap<Context, Map<number, DeviceLimits>>();

/** The limits of `ctx` and its port `port`, queried on first use. */
export function deviceLimits(ctx: Context, port: number): DeviceLimits {
  let ports = byContext.get(ctx);
  if (!ports) byContext.set(ctx, ports = new Map());
  let limits = ports.get(port);
  if (limits) return limits;
  const attr = ctx.queryDevice();
  let maxMsg = 0;
  try {
    maxMsg = ctx.queryPort(port).maxMsgSz;
  } catch {
    // keep the RDMA limit below
  }
  limits = {
    maxQpWr: typeof attr.maxQpWr === "number" ? attr.maxQpWr : 0xfffe,
    maxQpRdAtom: typeof attr.maxQpRdAtom === "number" ? attr.maxQpRdAtom : 0,
    maxQpInitRdAtom: typeof attr.maxQpInitRdAtom === "number" ? attr.maxQpInitRdAtom : 0,
    maxMessageSize: maxMsg > 0 ? Math.min(maxMsg, 2 ** 31) : 2 ** 31,
  };
  ports.set(port, limits);
  return limits;
}
