/**
 * The options (`rdma_set_option`) and multicast membership (`rdma_join_multicast`,
 * `rdma_leave_multicast`) of a CM id, checked before librdmacm sees them.
 *
 * @module
 */

import { layouts, native } from "../ffi/native.ts";
import { NativeBlock } from "../ffi/memory.ts";
import { checkCall, strerror } from "../ffi/errors.ts";
import { UnsupportedError } from "../types/errors.ts";
import { Errno } from "../types/errno.ts";
import { JoinMcAttrMask, McJoinFlag, OptionLevel } from "../types/enums.ts";
import { type AddressInput, encodeSockaddr, SOCKADDR_STORAGE_SIZE } from "./address.ts";
import type { CmIdBase } from "./id-base.ts";
import { checkInteger } from "../types/check.ts";

/** Sets an `RDMA_OPTION_ID` option of `size` bytes (1 or 4) after checking its range. */
export function setIdOption(
  id: CmIdBase,
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

/**
 * The typed error of an operation the id's transport or librdmacm lacks: `UnsupportedError` with
 * EOPNOTSUPP, naming the device (the provider) and why.
 */
export function unsupportedOn(id: CmIdBase, op: string, why: string): UnsupportedError {
  const device = id.verbsPtr === null ? "unbound id" : id.context.deviceName;
  return new UnsupportedError(
    op,
    Errno.EOPNOTSUPP,
    strerror(Errno.EOPNOTSUPP),
    `${device}: ${why}`,
  );
}

/**
 * Starts a join; MULTICAST_JOIN or MULTICAST_ERROR follows. Without `joinFlags` it is
 * `rdma_join_multicast` (a full member); with them `rdma_join_multicast_ex` (e.g.
 * `McJoinFlag.SENDONLY_FULLMEMBER`: the QP is not attached and receives nothing).
 */
export function joinMulticast(id: CmIdBase, group: AddressInput, joinFlags?: McJoinFlag): void {
  const op = joinFlags === undefined ? "rdma_join_multicast" : "rdma_join_multicast_ex";
  if (joinFlags !== undefined) {
    checkInteger("joinFlags", joinFlags, McJoinFlag.FULLMEMBER, McJoinFlag.RESERVED - 1);
  }
  if (id.transport === "iwarp") throw unsupportedOn(id, op, "iWARP has no multicast");
  withGroup(group, (sa) => {
    const n = native();
    if (joinFlags === undefined) {
      checkCall(op, n.rdmacm.rdma_join_multicast(id.ptr, sa.ptr, null), group.address);
      return;
    }
    const ex = n.rdmacm.rdma_join_multicast_ex;
    if (!ex) throw unsupportedOn(id, op, "this librdmacm has no rdma_join_multicast_ex");
    const J = layouts().rdma_cm_join_mc_attr_ex;
    NativeBlock.with(J.size, (attr) => {
      attr.view.setUint32(
        J.fields.comp_mask.offset,
        JoinMcAttrMask.ADDRESS | JoinMcAttrMask.JOIN_FLAGS,
        true,
      );
      attr.view.setUint32(J.fields.join_flags.offset, joinFlags, true);
      attr.setPointer(J.fields.addr.offset, sa.ptr);
      checkCall(op, ex(id.ptr, attr.ptr, null), group.address);
    });
  });
}

/** Leaves a group (`rdma_leave_multicast`). */
export function leaveMulticast(id: CmIdBase, group: AddressInput): void {
  id.assertOpen();
  withGroup(group, (sa) => {
    checkCall(
      "rdma_leave_multicast",
      native().rdmacm.rdma_leave_multicast(id.ptr, sa.ptr),
      group.address,
    );
  });
}
