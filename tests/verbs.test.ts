/** verbs without a device: GIDs, access checks, work-request checks, no-device error. */
import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { formatGid, openDevice, parseGid } from "../verbs/mod.ts";
import { checkAccess, type MemoryRegion } from "../verbs/mr.ts";
import { type SendLimits, sendWrProblem, type Sge } from "../verbs/wr.ts";
import type { ProtectionDomain } from "../verbs/pd.ts";
import { AccessFlags, QpType, SendFlags, WrOpcode } from "../types/enums.ts";
import { NoDeviceError } from "../types/errors.ts";
import { listDevices } from "../verbs/devices.ts";

test("verbs: GIDs format like the rdma-core tools and parse back, with :: compression", () => {
  const raw = new Uint8Array(16);
  raw.set([0xfe, 0x80], 0);
  raw.set([0x0a, 0x00, 0x02, 0x0f], 12);
  const text = formatGid(raw);
  assert.equal(text, "fe80:0000:0000:0000:0000:0000:0a00:020f");
  assert.deepEqual(parseGid(text), raw);
  assert.deepEqual(parseGid("fe80::a00:20f"), raw);
  assert.throws(() => parseGid("fe80::1::2"), { name: "InvalidArgumentError" });
  assert.throws(() => parseGid(new Uint8Array(4)), { name: "InvalidArgumentError" });
});

test("verbs: remote write/atomic access without local write is rejected", () => {
  assert.equal(checkAccess(AccessFlags.LOCAL_WRITE), AccessFlags.LOCAL_WRITE);
  assert.equal(checkAccess(AccessFlags.REMOTE_READ), AccessFlags.REMOTE_READ);
  assert.throws(() => checkAccess(AccessFlags.REMOTE_WRITE), /require IBV_ACCESS_LOCAL_WRITE/);
  assert.throws(() => checkAccess(AccessFlags.REMOTE_ATOMIC), /require IBV_ACCESS_LOCAL_WRITE/);
});

test("verbs: send work requests are checked against the QP type; look-alike MRs are refused", () => {
  const pd = {} as ProtectionDomain;
  // shaped like an MR, but not made by the library: its address must never reach a provider
  const mr = {
    pd,
    closed: false,
    length: 64,
    lkey: 1,
    access: AccessFlags.LOCAL_WRITE,
    addrNumber: 4096,
  } as unknown as MemoryRegion;
  const q = (type: QpType): SendLimits => ({ type, pd, maxSendSge: 2, maxInlineData: 16 });
  const remote = { addr: 8192n, rkey: 1 };
  const sg = [{ mr, length: 8 }];
  assert.match(sendWrProblem({ sg }, q(QpType.RC))!, /needs an MR made by this library/);
  assert.match(
    sendWrProblem({ flags: SendFlags.INLINE, sg }, q(QpType.RC))!,
    /needs an MR made by this library/,
  );
  assert.match(
    sendWrProblem({ opcode: WrOpcode.RDMA_READ, sg: [], remote }, q(QpType.UC))!,
    /not supported on IBV_QPT_UC/,
  );
  assert.match(
    sendWrProblem({ opcode: WrOpcode.RDMA_WRITE, sg: [], remote }, q(QpType.UD))!,
    /not supported on IBV_QPT_UD/,
  );
  assert.match(
    sendWrProblem(
      {
        opcode: WrOpcode.ATOMIC_FETCH_AND_ADD,
        sg: [],
        remote: { addr: 8196n, rkey: 1 },
        compareAdd: 1,
      },
      q(QpType.RC),
    )!,
    /not 8-byte aligned/,
  );
  assert.match(
    // @ts-expect-error: remote is required by the type too; this checks the run-time guard
    sendWrProblem({ opcode: WrOpcode.RDMA_WRITE, sg: [] }, q(QpType.RC))!,
    /needs remote/,
  );
  assert.match(
    sendWrProblem({ sg: [null as unknown as Sge] }, q(QpType.RC))!,
    /SGE must be an object/,
  );
  assert.match(sendWrProblem({ wrId: -1 }, q(QpType.RC))!, /wrId must be/);
  assert.match(sendWrProblem({ flags: 0x1000 }, q(QpType.RC))!, /flags must be an OR of SendFlags/);
  assert.equal(sendWrProblem({ sg: [] }, q(QpType.UC)), null);
});

let hasDevice = false;
try {
  hasDevice = listDevices().length > 0;
} catch {
  hasDevice = false;
}

test("verbs: openDevice without RDMA raises NoDeviceError", () => {
  assert.throws(() => openDevice(), NoDeviceError);
}, { skip: hasDevice ? "this machine has an RDMA device" : false });
