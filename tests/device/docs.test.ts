/**
 * The guide's runnable code blocks (```ts runnable in `docs/*.md`) run as programs on the test
 * device, in the runtime that runs this test (`scripts/test` runs it in Deno and in Bun), the
 * way the guide says to run them: `deno run --allow-ffi FILE ADDRESS` or `bun FILE ADDRESS`, with
 * the package import pointed at this repository's mod.ts. Each must exit with status 0.
 * Programs that need an address (rdma_cm) take it as their first argument.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { deviceTest } from "../harness.ts";
import { ROOT, runnableSnippets } from "../../scripts/check-docs.ts";

const isBun = "Bun" in globalThis;
const RUN_TIMEOUT_MS = 90_000;
const MOD = pathToFileURL(join(ROOT, "mod.ts")).href;

/** The program text of a block: the package import pointed at this repository's mod.ts. */
function program(code: string): string {
  return code.replace(/from\s+"(?:jsr:)?@rdma\/verbs"/g, `from "${MOD}"`);
}

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(argv: string[]): Promise<Result> {
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      stderr += `\n[killed after ${RUN_TIMEOUT_MS} ms]`;
      child.kill("SIGKILL");
    }, RUN_TIMEOUT_MS);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: -1, stdout, stderr: `${stderr}${e.message}` });
    });
  });
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
      const r = await run(argv);
      console.log(`${where} (${Date.now() - t0} ms):\n${r.stdout.trimEnd()}`);
      assert.equal(r.code, 0, `${where} exited with ${r.code}\n${r.stdout}\n${r.stderr}`);
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
