/**
 * UD over rdma_cm: the UD parameters of an event (ESTABLISHED on a UD id, MULTICAST_JOIN) turned
 * into what a UD send needs - an address handle made through the verbs layer, the remote QPN and
 * the remote Q_Key.
 *
 * @module
 */

import { InvalidArgumentError } from "../types/errors.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import type { UdDestination } from "../verbs/wr.ts";
import type { CmEvent, UdEventParam } from "./event.ts";

/**
 * Creates the address handle for an event's UD parameters in `pd` and returns the destination
 * of UD sends (`postSend({ ..., ud })`). The caller owns the AH (close it, or it closes with
 * the PD).
 */
export function udDestination(pd: ProtectionDomain, from: CmEvent | UdEventParam): UdDestination {
  const ud = typeof from === "object" && from !== null && "type" in from ? from.ud : from;
  if (!ud) throw new InvalidArgumentError("udDestination: the event has no UD parameters");
  return { ah: pd.createAh(ud.ahAttr), remoteQpn: ud.qpNum, remoteQkey: ud.qkey };
}
