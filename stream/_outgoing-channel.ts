/**
 * {@link leaseOutgoingChannel}: the rdma_cm event channel a process's outgoing stream connections
 * share (one per poller), as accepted connections share their listener's.
 *
 * @module
 */

import { CmEventChannel } from "../cm/channel.ts";
import type { Poller } from "../poller/poller.ts";
import { type Lease, SharedByKey } from "./_shared.ts";

const outgoing = new SharedByKey<Poller, CmEventChannel>((poller) =>
  new CmEventChannel({ poller })
);

/**
 * A use of the outgoing connections' event channel of `poller`. Released after the connection's
 * id is closed: the last release closes the channel, its fd and its watch.
 */
export function leaseOutgoingChannel(poller: Poller): Lease<CmEventChannel> {
  return outgoing.lease(poller);
}
