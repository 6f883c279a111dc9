/**
 * The guide's runnable code blocks (```ts runnable in `docs/*.md`) run as programs on the test
 * device, in the runtime that runs this test (`scripts/test` runs it in Deno and in Bun), the
 * way the guide says to run them: `deno run --allow-ffi FILE ADDRESS` or `bun FILE ADDRESS`, with
 * the package import pointed at this repository's mod.ts. Each must exit with status 0.
 * Programs that need an address (rdma_cm) take it as their first argument.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { deviceTest } from "../harness.ts";
import { ROOT, runnableSnippets } from "../../scripts/check-docs.ts";
import { account, isBun, run } from "./examples-common.ts";

const RUN_TIMEOUT_MS = 90_000;
const MOD = pathToFileURL(join(ROOT, "mod.ts")).href;

/** The program text of a block: the package import pointed at this repository's mod.ts. */
function program(code: string): string {
  return code.replace(/from\s+"(?:jsr:)?@rdma\/verbs"/g, `from "${MOD}"`);
}

const blocks = runnableSnippets();

for (const block of blocks) {
  const where = `${block.file}:${block.line}`;
  deviceTest(`docs: the runnable block at ${where} exits 0`, async (env) => {
    const dir = mkdtempSync(join(tmpdir(), "docs-run-"));
    try {
      const file = join(dir, "snippet.ts");
      writeFileSync(file, program(block.code));
      const argv = isBun
        ? [process.execPath, file, env.address]
        : [process.execPath, "run", "--allow-ffi", file, env.address];
      const t0 = Date.now();
      const r = await run(argv, { timeoutMs: RUN_TIMEOUT_MS });
      console.log(`${where} (${Date.now() - t0} ms):\n${r.stdout.trimEnd()}`);
      assert.equal(r.code, 0, account(where, r));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, {
    timeout: RUN_TIMEOUT_MS + 30_000,
    // the guide's programs connect QPs by hand or use UD, which iWARP does not have
    needs: (env) => env.transport === "iwarp" ? "iWARP connects QPs only through rdma_cm" : false,
  });
}

deviceTest("docs: the guide has runnable blocks", () => {
  assert.ok(blocks.length >= 4, `only ${blocks.length} runnable blocks found`);
});
