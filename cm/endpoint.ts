/**
 * `rdma_create_ep` and `rdma_get_request` over the library's own objects. In C, `rdma_create_ep`
 * makes a synchronous id (blocking calls) and, given QP attributes but no PD or CQs, lets
 * librdmacm create hidden ones; here the endpoint is an ordinary {@link CmId} on a channel of its
 * own, its address (and route) resolved by awaited calls, and its QP uses a PD and two CQs (send,
 * receive, each with a completion channel) made through the verbs layer, which close after the
 * id. A passive endpoint keeps the QP attributes: every request `getRequest()` returns moves to
 * a channel of its own (so it outlives the listener, as librdmacm's synchronous requests do) and
 * gets its QP, PD and CQs the same way. The `rdma_verbs.h` helpers (`id.postSend()`,
 * `id.getRecvComp()`, `id.regMsgs()`, ...) then work on it as in C.
 *
 * @module
 */

import { PortSpace, QpType, RaiFlags } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import { checkInteger, checkObject, describe } from "../types/check.ts";
import { checkResource } from "../ffi/resource.ts";
import type { WaitOptions } from "../poller/wait.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { QpCap } from "../verbs/qp-init.ts";
import type { SocketAddress } from "./address.ts";
import { type AddrInfo, getAddrInfo } from "./addrinfo.ts";
import { CmEventChannel } from "./channel.ts";
import { type CmId, ownAfter, ownChannel, setRequestHook } from "./id.ts";
import type { CmQpInit } from "./id-base.ts";

/** The QP of an endpoint (`ibv_qp_init_attr` of `rdma_create_ep`, without PD and CQs). */
export interface EndpointQpInit {
  /** `QpType.RC` (default for TCP/IB port spaces), `QpType.UC`, or `QpType.UD` (UDP/IPoIB). */
  readonly type?: CmQpInit["type"];
  /** Requested capabilities (the CQs get `maxSendWr` and `maxRecvWr` entries). */
  readonly cap?: QpCap;
  /** Every send WR completes signaled (`sq_sig_all`). */
  readonly sqSigAll?: boolean;
}

/** Options of {@link createEndpoint}: `rdma_create_ep`'s address, PD and QP attributes. */
export interface EndpointOptions extends WaitOptions {
  /**
   * The address to use, a result of {@link getAddrInfo} (C's `res`); its `passive` flag, port
   * space and addresses decide the rest. Without it, `hostname`/`port`/`passive` are resolved.
   */
  readonly addrInfo?: AddrInfo;
  /** Host name or numeric address: the server (active) or the local address (passive). */
  readonly hostname?: string;
  /** The port (the server's, or the one to listen on; 0 picks one when passive). */
  readonly port?: number;
  /** A listening endpoint (`RAI_PASSIVE`): bound, then `listen()` and `getRequest()` it. */
  readonly passive?: boolean;
  /** Port space (default `"TCP"`). */
  readonly portSpace?: keyof typeof PortSpace;
  /** The PD of the QP (C's `pd`); by default the endpoint allocates one per QP. */
  readonly pd?: ProtectionDomain;
  /** Create a QP (C's `qp_init_attr`); passive: on every request `getRequest()` returns. */
  readonly qp?: EndpointQpInit;
  /** Kernel timeout of address and of route resolution, ms (default 2000). */
  readonly resolveTimeoutMs?: number;
}

/** The addresses an endpoint uses, from `addrInfo` or resolved from the options. */
function addressesOf(o: EndpointOptions): {
  passive: boolean;
  portSpace: PortSpace;
  source: SocketAddress | null;
  destination: SocketAddress | null;
} {
  if (o.addrInfo !== undefined) {
    const ai = checkObject<AddrInfo>("addrInfo", o.addrInfo);
    const ps = Object.values(PortSpace).find((v) => v === ai.portSpace) ?? PortSpace.TCP;
    return {
      passive: (ai.flags & RaiFlags.PASSIVE) !== 0,
      portSpace: ps,
      source: ai.source,
      destination: ai.destination,
    };
  }
  const passive = o.passive === true;
  const portSpace = PortSpace[o.portSpace ?? "TCP"];
  if (portSpace === undefined) {
    throw new InvalidArgumentError(`createEndpoint: unknown port space ${describe(o.portSpace)}`);
  }
  const port = checkInteger("port", o.port ?? 0, 0, 0xffff);
  if (!passive && o.hostname === undefined) {
    throw new InvalidArgumentError("createEndpoint: an active endpoint needs a hostname");
  }
  const [ai] = getAddrInfo(o.hostname ?? null, port, { passive, portSpace });
  if (!ai) {
    throw new InvalidArgumentError(`createEndpoint: ${describe(o.hostname)} resolves to nothing`);
  }
  return { passive, portSpace, source: ai.source, destination: ai.destination };
}

/** Creates the QP of an endpoint id with a PD (given or its own) and two CQs of its own. */
function createEndpointQp(
  id: CmId,
  init: EndpointQpInit,
  given: ProtectionDomain | undefined,
): void {
  const ctx = id.context;
  const pd = given ?? ctx.allocPd();
  if (!given) ownAfter(id, pd, pd);
  const cq = (entries: number | undefined) => {
    const channel = ctx.createCompChannel();
    ownAfter(id, channel);
    const made = ctx.createCq({ cqe: Math.max(1, entries ?? 16), channel });
    ownAfter(id, made);
    return made;
  };
  const sendCq = cq(init.cap?.maxSendWr);
  const recvCq = cq(init.cap?.maxRecvWr);
  id.createQp(pd, {
    type: init.type ?? (id.isUd ? QpType.UD : QpType.RC),
    sendCq,
    recvCq,
    cap: init.cap,
    sqSigAll: init.sqSigAll,
  });
}

/**
 * `rdma_create_ep`: creates an id on a channel of its own and, when active, resolves the
 * address and the route to the server; when passive, binds it (then `id.listen()` and
 * `id.getRequest()`). With `qp`, the id gets a QP (passive: each request does) whose PD and CQs
 * close after the id. Connect with `id.connect()`, accept with `req.accept()`; `id.close()` (or
 * `await id.disconnect()`) is `rdma_destroy_ep`.
 */
export async function createEndpoint(options: EndpointOptions): Promise<CmId> {
  const o = checkObject<EndpointOptions>("createEndpoint options", options);
  if (o.pd !== undefined) checkResource<ProtectionDomain>(o.pd, "ProtectionDomain", "pd");
  if (o.qp !== undefined) checkObject("qp", o.qp);
  const a = addressesOf(o);
  const channel = new CmEventChannel();
  let id: CmId;
  try {
    id = channel.createId(a.portSpace);
  } catch (e) {
    channel.close();
    throw e;
  }
  ownChannel(id);
  try {
    const wait = { signal: o.signal, timeout: o.timeout };
    if (a.passive) {
      if (!a.source) throw new InvalidArgumentError("createEndpoint: no local address to bind");
      id.bind(a.source);
      if (o.pd) ownAfter(id, null, o.pd);
      if (o.qp) {
        const init = o.qp;
        const pd = o.pd;
        setRequestHook(id, (request) => {
          const own = new CmEventChannel();
          let moved: CmId;
          try {
            moved = request.migrate(own);
          } catch (e) {
            own.close();
            throw e;
          }
          ownChannel(moved);
          try {
            createEndpointQp(moved, init, pd);
          } catch (e) {
            moved.reject();
            throw e;
          }
          return moved;
        });
      }
      return id;
    }
    if (!a.destination) throw new InvalidArgumentError("createEndpoint: no destination address");
    await id.resolveAddress(a.destination, {
      ...wait,
      source: a.source ?? undefined,
      timeoutMs: o.resolveTimeoutMs,
    });
    await id.resolveRoute({ ...wait, timeoutMs: o.resolveTimeoutMs });
    if (o.qp) createEndpointQp(id, o.qp, o.pd);
    return id;
  } catch (e) {
    id.close();
    throw e;
  }
}
