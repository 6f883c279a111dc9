/**
 * Connection manager pieces that need no device: address parsing and
 * formatting, private-data limits, connection-parameter validation, event
 * names, the typed CM error.
 */

import assert from "node:assert/strict";
import { test } from "./harness.ts";
import {
  AF_INET,
  AF_INET6,
  decodeSockaddr,
  encodeSockaddr,
  formatIPv6,
  parseIPv4,
  parseIPv6,
} from "../cm/address.ts";
import { checkPrivateData, encodeConnParam, privateDataLimit } from "../cm/conn_param.ts";
import { cmEventName } from "../cm/event.ts";
import { CmEventChannel } from "../cm/channel.ts";
import {
  ClosedError,
  CmEventError,
  InvalidArgumentError,
  NoDeviceError,
  RdmaError,
} from "../types/errors.ts";
import { CmEventType, PrivateDataLimits } from "../types/enums.ts";

test("cm address: IPv4 parse, encode, decode", () => {
  assert.deepEqual([...parseIPv4("10.0.2.15")!], [10, 0, 2, 15]);
  assert.deepEqual([...parseIPv4("0.255.9.100")!], [0, 255, 9, 100]);
  const bads = [
    "10.0.2",
    "10.0.2.256",
    "1.2.3.4.5",
    "01.2.3.4",
    "a.b.c.d",
    "",
    "1..2.3",
    "1.2.3.+4",
  ];
  for (const bad of [...bads, "1.2.3. 4", "1.2.3.4 ", "1.2.3.1000", "1.2.3.\u0014"]) {
    assert.equal(parseIPv4(bad), null, bad);
  }
  const sa = encodeSockaddr({ address: "192.168.1.2", port: 7471 });
  assert.equal(sa.length, 16);
  assert.equal(new DataView(sa.buffer).getUint16(0, true), AF_INET);
  assert.deepEqual([sa[2], sa[3]], [7471 >> 8, 7471 & 0xff]); // network order
  assert.deepEqual(decodeSockaddr(sa), { family: "IPv4", address: "192.168.1.2", port: 7471 });
});

test("cm address: IPv6 parse, RFC 5952 format, scope, encode/decode", () => {
  const cases: [string, string][] = [
    ["::1", "::1"],
    ["::", "::"],
    ["fe80:0:0:0:0:0:0:1", "fe80::1"],
    ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"],
    ["2001:DB8::A", "2001:db8::a"],
    ["::ffff:10.0.2.15", "::ffff:10.0.2.15"],
    ["1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"],
    ["1:0:3:4:5:6:7:8", "1:0:3:4:5:6:7:8"],
  ];
  for (const [inp, out] of cases) assert.equal(formatIPv6(parseIPv6(inp)!.bytes), out, inp);
  const bads = ["1::2::3", ":::", "12345::", "1:2:3:4:5:6:7:8:9", "g::1", "fe80::1%eth0"];
  for (const bad of [...bads, "fe80::1%", "fe80::1%4294967296", "\u0010::1", "G::1", "1:2::-1"]) {
    assert.equal(parseIPv6(bad), null, bad);
  }
  assert.equal(parseIPv6("fe80::1%3")!.scopeId, 3);
  assert.equal(parseIPv6("fe80::1%4294967295")!.scopeId, 0xffffffff);
  assert.equal(parseIPv6("fe80::1%0042")!.scopeId, 42);
  assert.deepEqual([...parseIPv6("AbCd:eF01::")!.bytes.subarray(0, 4)], [0xab, 0xcd, 0xef, 0x01]);
  const sa = encodeSockaddr({ address: "fe80::1%2", port: 18515 });
  assert.equal(sa.length, 28);
  assert.equal(new DataView(sa.buffer).getUint16(0, true), AF_INET6);
  assert.deepEqual(decodeSockaddr(sa), {
    family: "IPv6",
    address: "fe80::1",
    port: 18515,
    scopeId: 2,
  });
});

test("cm address: bad input is a typed error, unknown family decodes to null", () => {
  assert.throws(() => encodeSockaddr({ address: "localhost", port: 1 }), InvalidArgumentError);
  assert.throws(() => encodeSockaddr({ address: "10.0.0.1", port: 70000 }), InvalidArgumentError);
  assert.throws(() => encodeSockaddr({ address: "10.0.0.1", port: 1.5 }), InvalidArgumentError);
  assert.equal(decodeSockaddr(new Uint8Array(128)), null);
});

test("cm private data: the limit of each operation, transport and port space", () => {
  const rc = { transport: "ib", ud: false, afIb: false } as const;
  const ud = { transport: "ib", ud: true, afIb: false } as const;
  const iw = { transport: "iwarp", ud: false, afIb: false } as const;
  // IB CM message sizes (REQ 92, REP 196, REJ 148, SIDR REQ 216, SIDR REP 136) less the 36-byte cma header
  assert.equal(privateDataLimit("connect", rc), 92 - 36);
  assert.equal(privateDataLimit("accept", rc), 196);
  assert.equal(privateDataLimit("reject", rc), 148);
  assert.equal(privateDataLimit("connect", ud), 216 - 36);
  assert.equal(privateDataLimit("accept", ud), 136);
  assert.equal(privateDataLimit("reject", ud), 136);
  assert.equal(privateDataLimit("connect", { ...rc, afIb: true }), 92);
  // iWARP: the MPA v2 length (private data + 4) travels in a u8 on the receiving side
  assert.equal(privateDataLimit("connect", iw), 251);
  assert.equal(privateDataLimit("reject", iw), 251);
  assert.ok(PrivateDataLimits.iwarp.connect >= 251);
  for (const op of ["connect", "accept", "reject"] as const) {
    for (const ctx of [rc, ud, iw]) {
      const limit = privateDataLimit(op, ctx);
      checkPrivateData(op, new Uint8Array(limit), ctx);
      assert.throws(
        () => checkPrivateData(op, new Uint8Array(limit + 1), ctx),
        (e) => e instanceof InvalidArgumentError && e.message.includes(`is ${limit}`),
      );
    }
  }
});

test("cm private data: any ArrayBufferView or ArrayBuffer is bytes; anything else is refused", () => {
  const rc = { transport: "ib", ud: false, afIb: false } as const;
  const limit = privateDataLimit("connect", rc);
  for (
    const ok of [
      new ArrayBuffer(limit),
      new DataView(new ArrayBuffer(limit)),
      new Uint16Array(limit / 2),
    ]
  ) {
    checkPrivateData("connect", ok, rc);
  }
  assert.throws(
    () => checkPrivateData("connect", new Uint32Array(limit), rc),
    InvalidArgumentError,
  );
  assert.throws(() => checkPrivateData("connect", "text" as never, rc), InvalidArgumentError);
  const p = encodeConnParam("connect", { privateData: new Uint16Array([0x0201, 0x0403]) }, rc);
  p.free();
});

test("cm conn param: ranges are checked before encoding", () => {
  const rc = { transport: "ib", ud: false, afIb: false } as const;
  for (
    const bad of [
      { retryCount: 8 },
      { rnrRetryCount: -1 },
      { responderResources: 256 },
      { initiatorDepth: 1.5 },
      { qpNum: 0x1000000 },
      { privateData: new Uint8Array(57) },
    ]
  ) {
    assert.throws(() => encodeConnParam("connect", bad, rc), InvalidArgumentError);
  }
  const cp = encodeConnParam("connect", { privateData: new Uint8Array(56), retryCount: 3 }, rc);
  cp.free();
  cp.free();
});

test("cm events: every rdma_cm_event_type has its C name", () => {
  for (const [k, v] of Object.entries(CmEventType)) {
    assert.equal(cmEventName(v), `RDMA_CM_EVENT_${k}`);
  }
  assert.equal(cmEventName(99), "UNKNOWN EVENT");
});

test("cm events: CmEventError carries the event, status and private data", () => {
  const pd = new Uint8Array([1, 2, 3]);
  const e = new CmEventError("connect", CmEventType.REJECTED, "RDMA_CM_EVENT_REJECTED", 28, pd);
  assert.ok(e instanceof RdmaError);
  assert.equal(e.name, "CmEventError");
  assert.equal(e.event, 8);
  assert.equal(e.status, 28);
  assert.deepEqual(e.privateData, pd);
  assert.match(e.message, /connect failed: RDMA_CM_EVENT_REJECTED, status 28/);
  const t = new CmEventError("resolveAddress", 1, "RDMA_CM_EVENT_ADDR_ERROR", -110, null);
  assert.match(t.message, /status -110 \(ETIMEDOUT\)/);
});

test("cm: without an RDMA device, creating an event channel is a NoDeviceError", () => {
  const ch = (() => {
    try {
      return new CmEventChannel();
    } catch (e) {
      return e;
    }
  })();
  if (ch instanceof CmEventChannel) {
    ch.close(); // this machine has RDMA: the channel works and closes
    ch.close();
    assert.throws(() => ch.getEvent(), ClosedError);
    return;
  }
  assert.ok(ch instanceof NoDeviceError, `got ${ch}`);
  assert.match((ch as Error).message, /rdma link add|softroce-vm/);
});
