/**
 * The checked-in struct layouts match what the C compiler measures from the installed headers,
 * and a few numbers the fast path depends on hold.
 */
import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { diffLayouts, hostArch, probeLayouts, probeUnavailable } from "../scripts/gen-layouts.ts";
import { layoutFor, LAYOUTS } from "../types/layouts/mod.ts";

const arch = hostArch();
const unavailable = arch === undefined
  ? "no layout table for this architecture"
  : probeUnavailable(arch);

test("layouts: checked-in table equals a fresh compile of the probe", () => {
  if (arch === undefined) return;
  const diff = diffLayouts(LAYOUTS[arch], probeLayouts(arch), `types/layouts/${arch}.ts`);
  assert.deepEqual(diff, [], `layouts are stale, run scripts/gen-layouts.ts:\n${diff.join("\n")}`);
}, { skip: unavailable ?? false });

test("layouts: both architectures have the same structs and fields", () => {
  const shape = (t: object) => JSON.stringify(t, (_k, v) => (typeof v === "number" ? 0 : v));
  assert.equal(shape(LAYOUTS.aarch64), shape(LAYOUTS.x86_64));
});

test("layouts: known invariants", () => {
  for (const t of [LAYOUTS.x86_64, LAYOUTS.aarch64]) {
    assert.equal(t.ibv_sge.size, 16);
    assert.equal(t.ibv_wc.fields.wr_id.offset, 0);
    assert.equal(t.ibv_gid.fields.raw.size, 16);
    assert.equal(t.ibv_gid.size, 16);
    for (const s of [t.ibv_cq, t.ibv_qp, t.ibv_srq, t.ibv_pd, t.ibv_mr]) {
      assert.equal(s.fields.context.offset, 0);
    }
    assert.equal(t.sockaddr_in6.size, 28);
    assert.equal(t.sockaddr_storage.size, 128);
  }
  const x = LAYOUTS.x86_64;
  const ops = x.ibv_context.fields;
  assert.equal(ops["ops.poll_cq"].offset, 96);
  assert.equal(ops["ops.req_notify_cq"].offset, 104);
  assert.equal(ops["ops.post_srq_recv"].offset, 168);
  assert.equal(ops["ops.post_send"].offset, 208);
  assert.equal(ops["ops.post_recv"].offset, 216);
  const vc = x.verbs_context.fields;
  const before = (f: keyof typeof vc) => vc.context.offset - vc[f].offset;
  assert.equal(before("query_port"), 320);
  assert.equal(before("create_cq_ex"), 120);
  assert.equal(before("query_device_ex"), 104);
  assert.equal(before("create_qp_ex"), 56);
  assert.equal(x.epoll_event.size, 12); // packed on x86-64
  assert.equal(x.epoll_event.fields.data.offset, 4);
  assert.equal(LAYOUTS.aarch64.epoll_event.size, 16);
});

test("layouts: layoutFor maps architecture names", () => {
  assert.equal(layoutFor("x64"), LAYOUTS.x86_64);
  assert.equal(layoutFor("amd64"), LAYOUTS.x86_64);
  assert.equal(layoutFor("arm64"), LAYOUTS.aarch64);
  assert.equal(layoutFor("aarch64"), LAYOUTS.aarch64);
  assert.throws(() => layoutFor("riscv64"), /no struct layout table for architecture "riscv64"/);
});
