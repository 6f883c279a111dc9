/**
 * The options (`rdma_set_option`) and multicast membership (`rdma_join_multicast`,
 * `rdma_leave_multicast`) of a CM id, checked before librdmacm sees them.
 *
 * @module
 */

import { native } from "../ffi/native.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkCall, strerror } from "../ffi/errors.ts";
import { UnsupportedError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { OptionLevel } from "../types/enums.ts";
import { type AddressInput, encodeSockaddr, SOCKADDR_STORAGE_SIZE } from "./address.ts";
import type { CmId } from "./id.ts";
import { checkInteger } from "../types/check.ts";

/** Sets an `RDMA_OPTION_ID` option of `size` bytes (1 or 4) after checking its range. */
export function setIdOption(
  id: CmId,
  name: number,
  value: number,
  size: 1 | 4,
  what: string,
): void {
  id.assertOpen();
  checkInteger(what, value, 0, size === 1 ? 255 : 0x7fffffff);
  NativeBlock.with(8, (b) => {
    if (size === 1) b.view.setUint8(0, value);
    else b.view.setInt32(0, value, true);
    checkCall(
      "rdma_set_option",
      native().rdmacm.rdma_set_option(id.ptr, OptionLevel.ID, name, b.ptr, size),
      what,
    );
  });
}

function withGroup(group: AddressInput, fn: (sa: NativeBlock) => void): void {
  const sa = NativeBlock.from(encodeSockaddr(group), SOCKADDR_STORAGE_SIZE);
  try {
    fn(sa);
  } finally {
    sa.free();
  }
}

/** Starts a join (`rdma_join_multicast`); MULTICAST_JOIN or MULTICAST_ERROR follows. */
export function joinMulticast(id: CmId, group: AddressInput): void {
  if (id.transport === "iwarp") {
    throw new UnsupportedError(
      "rdma_join_multicast",
      Errno.EOPNOTSUPP,
      strerror(Errno.EOPNOTSUPP),
      "iWARP has no multicast",
    );
  }
  withGroup(group, (sa) => {
    checkCall(
      "rdma_join_multicast",
      native().rdmacm.rdma_join_multicast(id.ptr, sa.ptr, null),
      group.address,
    );
  });
}

/** Leaves a group (`rdma_leave_multicast`). */
export function leaveMulticast(id: CmId, group: AddressInput): void {
  id.assertOpen();
  withGroup(group, (sa) => {
    checkCall(
      "rdma_leave_multicast",
      native().rdmacm.rdma_leave_multicast(id.ptr, sa.ptr),
      group.address,
    );
  });
}
