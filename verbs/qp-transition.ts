/**
 * The state transitions of a connected QP as attributes: RESET -> INIT, INIT -> RTR towards the
 * other end, RTR -> RTS, with the defaults the transition helpers of `QueuePair` and
 * `XrcRecvQp` use. The other end's QP number, PSN and GID are the caller's to exchange.
 *
 * @module
 */

import { Mtu, QpState, QpType } from "../types/enums.ts";
import { InvalidArgumentError } from "../types/errors.ts";
import type { GidLike } from "./gid.ts";
import type { QpAttr } from "./qp-attr.ts";

/** The other end of an RC/UC connection. */
export interface RemoteEndpoint {
  /** Remote QP number. */
  readonly qpNum: number;
  /** The PSN the remote side sends from (our receive PSN). */
  readonly psn: number;
  /** Remote GID (RoCE, or IB across subnets). */
  readonly gid?: GidLike;
  /** Remote LID (IB). */
  readonly lid?: number;
}

/** Options of the state-transition helpers (`toInit`, `toRtr`, `toRts`, `activate`). */
export interface QpTransitionOptions {
  /** Local port (default 1). */
  readonly port?: number;
  /** P_Key index (default 0). */
  readonly pkeyIndex?: number;
  /** Remote access to allow (an OR of `AccessFlags`, RC/UC; default none). */
  readonly accessFlags?: number;
  /** Q_Key (UD; default 0x11111111). */
  readonly qkey?: number;
  /** Path MTU (default `Mtu.MTU_1024`). */
  readonly pathMtu?: Mtu;
  /** Local GID index for the GRH (required with a remote GID). */
  readonly sgidIndex?: number;
  /** Hop limit of the GRH (default 1). */
  readonly hopLimit?: number;
  /** Our send PSN (default 0). */
  readonly psn?: number;
  /** RC: responder resources (default 1). */
  readonly maxDestRdAtomic?: number;
  /** RC: initiator depth (default 1). */
  readonly maxRdAtomic?: number;
  /** RC: minimum RNR NAK timer (default 12). */
  readonly minRnrTimer?: number;
  /** RC: local ACK timeout exponent, 4.096 µs × 2^timeout (default 14, about 67 ms). */
  readonly timeout?: number;
  /** RC: transport retries (default 7). */
  readonly retryCnt?: number;
  /** RC: RNR retries (default 7 = infinite). */
  readonly rnrRetry?: number;
  /** Service level (default 0). */
  readonly sl?: number;
}

/** RESET -> INIT: port, P_Key index, and the access flags (RC, UC, XRC) or the Q_Key (UD). */
export function initAttr(type: QpType, o: QpTransitionOptions): QpAttr {
  return {
    qpState: QpState.INIT,
    pkeyIndex: o.pkeyIndex ?? 0,
    port: o.port ?? 1,
    ...(type === QpType.UD ? { qkey: o.qkey ?? 0x11111111 } : { accessFlags: o.accessFlags ?? 0 }),
  };
}

/**
 * INIT -> RTR towards `remote`: its QP number and PSN, the path to it, and for a responder of
 * RC semantics (`rc`) its RDMA-read resources and RNR timer. `what` names the caller and
 * `missing` what it says when no endpoint was given.
 */
export function rtrAttr(
  what: string,
  missing: string,
  remote: RemoteEndpoint | undefined,
  o: QpTransitionOptions,
  rc: boolean,
): QpAttr {
  if (typeof remote !== "object" || remote === null) {
    throw new InvalidArgumentError(`${what}: ${missing}`);
  }
  if (remote.gid !== undefined && o.sgidIndex === undefined) {
    throw new InvalidArgumentError(`${what}: a remote GID needs options.sgidIndex`);
  }
  return {
    qpState: QpState.RTR,
    pathMtu: o.pathMtu ?? Mtu.MTU_1024,
    destQpNum: remote.qpNum,
    rqPsn: remote.psn,
    ahAttr: {
      port: o.port ?? 1,
      dlid: remote.lid ?? 0,
      sl: o.sl ?? 0,
      grh: remote.gid === undefined
        ? undefined
        : { dgid: remote.gid, sgidIndex: o.sgidIndex!, hopLimit: o.hopLimit ?? 1 },
    },
    ...(rc ? { maxDestRdAtomic: o.maxDestRdAtomic ?? 1, minRnrTimer: o.minRnrTimer ?? 12 } : {}),
  };
}

/** RTR -> RTS: the send PSN; RC also its timeout, retry counts and initiator depth. */
export function rtsAttr(type: QpType, o: QpTransitionOptions): QpAttr {
  return {
    qpState: QpState.RTS,
    sqPsn: o.psn ?? 0,
    ...(type === QpType.RC
      ? {
        timeout: o.timeout ?? 14,
        retryCnt: o.retryCnt ?? 7,
        rnrRetry: o.rnrRetry ?? 7,
        maxRdAtomic: o.maxRdAtomic ?? 1,
      }
      : {}),
  };
}
