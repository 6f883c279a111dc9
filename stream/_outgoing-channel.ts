/**
 * {@link leaseOutgoingChannel}: the rdma_cm event channel a process's outgoing stream connections
 * share (one per poller), as accepted connections share their listener's. One channel is one fd
 * and one poller watch; a connection then holds one fd of its own (its completion channel), where
 * rsocket's holds two.
 *
 * @module
 */

import { CmEventChannel } from "../cm/channel.ts";
import type { Poller } from "../poller/poller.ts";

/** A connection's use of the shared channel: released once, when the connection is released. */
export interface ChannelLease {
  /** The shared channel (its ids are the connections' and the connecting ones'). */
  readonly channel: CmEventChannel;
  /** Ends this use; the last one closes the channel. Idempotent. */
  release(): void;
}

interface Shared {
  readonly channel: CmEventChannel;
  users: number;
}

/** By the poller the connections asked for (undefined: the default one). */
const shared = new Map<Poller | undefined, Shared>();

/**
 * A use of the outgoing connections' channel for `poller`, made when none is open. The lease is
 * released after the connection's id is closed (the last release closes the channel, and with it
 * its fd and watch).
 */
export function leaseOutgoingChannel(poller: Poller | undefined): ChannelLease {
  let s = shared.get(poller);
  if (s === undefined || s.channel.closed) {
    s = { channel: new CmEventChannel({ poller }), users: 0 };
    shared.set(poller, s);
  }
  const entry = s;
  entry.users++;
  let released = false;
  return {
    channel: entry.channel,
    release() {
      if (released) return;
      released = true;
      if (--entry.users > 0) return;
      if (shared.get(poller) === entry) shared.delete(poller);
      entry.channel.close();
    },
  };
}
