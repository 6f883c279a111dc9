/**
 * The test files of one Deno run, loaded as one test module: `scripts/test` passes it to
 * `deno test` with the files in `RDMA_TEST_FILES` (space-separated, relative to the repository
 * root), instead of the files themselves.
 *
 * Why: `deno test` runs every test module in a fresh isolate, so each file loads the library
 * again and its code starts cold in the interpreter. In the emulated guest that cost 3-7 s per
 * file (five device files: 51-72 s as five modules, 36-38 s as one; bench/results/2026-12-01-test-time.md),
 * about three minutes of each device run. Bun already runs every file of a run in one process;
 * this makes Deno's runs the same shape. Each test still runs on its own with its own timeout
 * (`harness.ts`); a failure names the test and its file in the stack.
 *
 * ```sh
 * RDMA_TEST_FILES="tests/device/cm.test.ts tests/device/stream.test.ts" \
 *   deno test -P tests/one-module.ts
 * ```
 *
 * @module
 */

import process from "node:process";

const files = (process.env.RDMA_TEST_FILES ?? "").split(/\s+/).filter((f) => f !== "");
if (files.length === 0) {
  throw new Error("tests/one-module.ts: RDMA_TEST_FILES names no test file");
}
for (const file of files) {
  if (!file.endsWith(".test.ts")) {
    throw new Error(`tests/one-module.ts: ${file} is not a test file (*.test.ts)`);
  }
  await import(new URL(`../${file}`, import.meta.url).href);
}
