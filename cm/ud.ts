/**
 * UD over rdma_cm: turning the UD parameters of an event (ESTABLISHED on a UD
 * id, MULTICAST_JOIN) into what a UD send needs — an address handle created
 * through the verbs layer, the remote QPN and the remote Q_Key.
 *
 * @module
 */

import { InvalidArgumentError } from "../types/errors.ts";
import type { AddressHandle, AhAttr } from "../verbs/ah.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { AhAttrData, CmEvent, UdEventParam } from "./event.ts";

/** The verbs {@link AhAttr} for an event's `ah_attr`. */
export function toAhAttr(a: AhAttrData): AhAttr {
  return {
    port: a.portNum,
    dlid: a.dlid,
    sl: a.sl,
    srcPathBits: a.srcPathBits,
    staticRate: a.staticRate,
    grh: a.isGlobal
      ? {
        dgid: a.grh.dgid,
        sgidIndex: a.grh.sgidIndex,
        hopLimit: a.grh.hopLimit,
        trafficClass: a.grh.trafficClass,
        flowLabel: a.grh.flowLabel,
      }
      : undefined,
  };
}

/** Where UD sends go: the `ud` member of a verbs send work request. */
export interface UdDestination {
  /** The address handle (owned by the caller: close it, or it closes with the PD). */
  readonly ah: AddressHandle;
  /** The remote QP number (0xffffff for a multicast group). */
  readonly remoteQpn: number;
  /** The remote Q_Key. */
  readonly remoteQkey: number;
}

/**
 * Creates the address handle for an event's UD parameters in `pd` and returns
 * the destination of UD sends (`postSend({ ..., ud })`).
 */
export function udDestination(pd: ProtectionDomain, from: CmEvent | UdEventParam): UdDestination {
  const ud = "type" in from ? from.ud : from;
  if (!ud) throw new InvalidArgumentError("udDestination: the event has no UD parameters");
  return {
    ah: pd.createAh(toAhAttr(ud.ahAttr)),
    remoteQpn: ud.qpNum,
    remoteQkey: ud.qkey,
  };
}
