/**
 * Every device test file declares where it runs (`tests/suites.ts`), and the runs `scripts/test`
 * makes from the declarations select what they should.
 */
import assert from "node:assert/strict";
import { DEVICE_SUITES, filesFor, undeclared } from "./suites.ts";
import { test } from "./harness.ts";

test("suites: every device test file has an entry in tests/suites.ts, every entry a file", () => {
  assert.deepEqual(undeclared(), { files: [], entries: [] });
});

test("suites: the runs select by capability (iWARP, one or two hosts, destructive)", () => {
  const device = filesFor("device");
  const iwarp = filesFor("device", true);
  const across = filesFor("across");
  const destructive = filesFor("destructive");
  for (const [file, s] of Object.entries(DEVICE_SUITES)) {
    assert.equal(device.includes(file), s.hosts !== "two" && !s.destructive, file);
    assert.equal(iwarp.includes(file), s.iwarp && s.hosts !== "two" && !s.destructive, file);
    assert.equal(across.includes(file), s.hosts !== "one", file);
    assert.equal(destructive.includes(file), s.destructive === true && s.hosts !== "two", file);
  }
  assert.ok(iwarp.length > 0 && iwarp.length < device.length);
  assert.ok(across.length > 0 && destructive.length > 0);
});
