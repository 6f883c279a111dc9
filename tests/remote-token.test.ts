/**
 * Remote-memory tokens without a device: the 32-byte layout (every field big-endian), the
 * checks `decodeToken`/`RemoteMemory.from` make, and `RemoteMemory.at`'s bounds. Samples: one
 * token of each access, the largest safe address range, each malformation once.
 */

import assert from "node:assert/strict";
import { test } from "./harness.ts";
import {
  decodeToken,
  encodeToken,
  InvalidArgumentError,
  REMOTE_TOKEN_SIZE,
  REMOTE_TOKEN_VERSION,
  RemoteMemory,
  TokenAccess,
} from "../mod.ts";

const fields = {
  access: TokenAccess.READ | TokenAccess.WRITE,
  tag: 0xbeef,
  id: 0x01020304,
  addr: 0x7f12_3456_7000,
  rkey: 0xabcdef01,
  qpNum: 0x11,
  length: 262144,
};

test("remote token: the documented layout, big-endian", () => {
  const t = encodeToken(fields);
  assert.equal(t.length, REMOTE_TOKEN_SIZE);
  const hex = Array.from(t, (b) => b.toString(16).padStart(2, "0")).join("");
  assert.equal(
    hex,
    "01" + "03" + "beef" + "01020304" + // version, access, tag, id
      "00007f1234567000" + "abcdef01" + "00000011" + // addr, rkey, QP number
      "0000000000040000", // length
  );
  assert.deepEqual(decodeToken(t), fields);
  assert.equal(REMOTE_TOKEN_VERSION, 1);
});

test("remote token: malformed tokens are refused with InvalidArgumentError", () => {
  const t = encodeToken(fields);
  assert.throws(() => decodeToken(t.subarray(0, 31)), InvalidArgumentError);
  assert.throws(() => decodeToken(new Uint8Array(33)), InvalidArgumentError);
  assert.throws(() => decodeToken("token" as unknown as Uint8Array), InvalidArgumentError);
  const v2 = t.slice();
  v2[0] = 2;
  assert.throws(() => decodeToken(v2), /version 2/);
  const bits = t.slice();
  bits[1] = 0x83;
  assert.throws(() => decodeToken(bits), /access bits/);
  const far = t.slice();
  far[8] = 0xff; // an address above 2^53
  assert.throws(() => decodeToken(far), /53 bits/);
  // a token inside a larger buffer decodes from its own bytes
  const framed = new Uint8Array(40);
  framed.set(t, 5);
  assert.deepEqual(decodeToken(framed.subarray(5, 37)), fields);
});

test("remote token: RemoteMemory.from checks ranges and access before anything is posted", async () => {
  const ro = RemoteMemory.from(encodeToken({ ...fields, access: TokenAccess.READ }));
  assert.equal(ro.readable, true);
  assert.equal(ro.writable, false);
  assert.equal(ro.length, 262144);
  assert.deepEqual(ro.at(100, 10), { addr: fields.addr + 100, rkey: fields.rkey });
  assert.deepEqual(ro.at(262144, 0), { addr: fields.addr + 262144, rkey: fields.rkey });
  assert.throws(() => ro.at(262140, 5), InvalidArgumentError);
  assert.throws(() => ro.at(-1, 1), InvalidArgumentError);
  assert.throws(() => ro.at(0.5, 1), InvalidArgumentError);
  // write is refused for a read-only token (no QP is touched: none is given)
  const qp = {} as Parameters<RemoteMemory["write"]>[0];
  const mr = { length: 10 } as Parameters<RemoteMemory["write"]>[1];
  await assert.rejects(ro.write(qp, mr), /does not grant remote write/);
  const wo = RemoteMemory.from(encodeToken({ ...fields, access: TokenAccess.WRITE }));
  await assert.rejects(wo.read(qp, mr), /does not grant remote read/);
  await assert.rejects(wo.write(qp, { mr, length: 10 } as never, 262140), InvalidArgumentError);
});
