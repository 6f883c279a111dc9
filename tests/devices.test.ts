import assert from "node:assert/strict";
import { deviceEnv, test } from "./harness.ts";
import { listDevices, NoDeviceError } from "../mod.ts";

const env = deviceEnv();

test("listDevices() without an RDMA device throws one typed error that says what to do", () => {
  assert.throws(() => listDevices(), (e: unknown) => {
    assert.ok(e instanceof NoDeviceError, String(e));
    assert.match(e.message, /No RDMA device/);
    assert.match(e.message, /rdma link add/);
    return true;
  });
}, { skip: "skip" in env ? false : "this machine has an RDMA device" });

test("listDevices() reports the device under test with its GUID", () => {
  if ("skip" in env) throw new Error("unreachable");
  const devices = listDevices();
  const d = devices.find((x) => x.name === env.device);
  assert.ok(d, `${env.device} not in ${devices.map((x) => x.name)}`);
  assert.match(d.guid, /^[0-9a-f]{16}$/);
  assert.ok(d.index >= 0);
  assert.match(d.devName, /^uverbs\d+$/);
}, { skip: "skip" in env ? env.skip : false });
