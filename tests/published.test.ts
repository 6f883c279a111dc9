/**
 * The package as users install it: exactly the files `deno publish` would publish, run by Deno
 * as TypeScript (what JSR serves Deno) and by Bun as transpiled JavaScript with `.js` import
 * specifiers (what JSR's npm compatibility layer delivers). Both start the poller — in Bun its
 * waiter must come up from the published files too — and take one wake-up through it.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { test } from "./harness.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The files `deno publish --dry-run` lists, relative to the repository. */
function publishedFiles(): string[] {
  const r = spawnSync("deno", ["publish", "--dry-run", "--allow-dirty"], {
    cwd: ROOT,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1" },
  });
  const out = `${r.stdout}\n${r.stderr}`;
  const files = [...out.matchAll(/file:\/\/(\S+)/g)]
    .map((m) => relative(ROOT, m[1]))
    .filter((f) => !f.startsWith(".."));
  return [...new Set(files)];
}

// The app: the public module only, a poller wake-up on an eventfd (libc through the runtime's
// own FFI, since that part is the app's, not the library's).
const APP = `
import { Poller, runtimeInfo } from "./pkg/mod.EXT";
const isBun = "Bun" in globalThis;
let eventfd, write;
if (isBun) {
  const ffi = await import("bun:ffi");
  const lib = ffi.dlopen("libc.so.6", {
    eventfd: { args: ["u32", "i32"], returns: "i32" },
    write: { args: ["i32", "ptr", "u64"], returns: "i64" },
  }).symbols;
  const one = new BigUint64Array([1n]);
  eventfd = () => lib.eventfd(0, 0x800);
  write = (fd) => lib.write(fd, ffi.ptr(one), 8n);
} else {
  const lib = Deno.dlopen("libc.so.6", {
    eventfd: { parameters: ["u32", "i32"], result: "i32" },
    write: { parameters: ["i32", "buffer", "u64"], result: "i64" },
  }).symbols;
  const one = new BigUint64Array([1n]);
  eventfd = () => lib.eventfd(0, 0x800);
  write = (fd) => lib.write(fd, one, 8n);
}
const poller = new Poller();
const fd = eventfd();
const watch = poller.register(fd);
setTimeout(() => write(fd), 20);
await watch.readable({ timeout: 10000 });
poller.close();
console.log("ok", runtimeInfo().runtime, poller.backend);
`;

test(
  "published files: Deno runs the TypeScript, Bun the transpiled npm build, poller included",
  () => {
    const files = publishedFiles();
    assert.ok(files.includes("mod.ts") && files.includes("ffi/wait-bun.ts"), files.join(", "));
    assert.ok(!files.some((f) => f.startsWith("tests/")), "tests are not published");
    const dir = mkdtempSync(join(tmpdir(), "rdma-published-"));
    try {
      // Deno: the TypeScript as published
      for (const f of files) {
        mkdirSync(dirname(join(dir, "deno", "pkg", f)), { recursive: true });
        cpSync(join(ROOT, f), join(dir, "deno", "pkg", f));
      }
      writeFileSync(join(dir, "deno", "app.ts"), APP.replace("EXT", "ts"));
      // Bun: every .ts transpiled to .js with .js specifiers, as the npm compatibility layer does
      const ts = files.filter((f) => f.endsWith(".ts"));
      const transpile = `
      const t = new Bun.Transpiler({ loader: "ts" });
      const [src, dst, list] = process.argv.slice(2);
      const fs = require("node:fs"), path = require("node:path");
      for (const f of JSON.parse(list)) {
        let js = t.transformSync(fs.readFileSync(path.join(src, f), "utf8"));
        js = js.replace(/(["'])(\\.{1,2}\\/[^"']+)\\.ts\\1/g, "$1$2.js$1");
        const out = path.join(dst, f.replace(/\\.ts$/, ".js"));
        fs.mkdirSync(path.dirname(out), { recursive: true });
        fs.writeFileSync(out, js);
      }`;
      writeFileSync(join(dir, "transpile.cjs"), transpile);
      const t = spawnSync(
        "bun",
        [join(dir, "transpile.cjs"), ROOT, join(dir, "npm", "pkg"), JSON.stringify(ts)],
        { encoding: "utf8" },
      );
      assert.equal(t.status, 0, t.stderr);
      const mod = readFileSync(join(dir, "npm", "pkg", "mod.js"), "utf8");
      assert.ok(!/\.ts["']/.test(mod), "no .ts specifier is left in the npm build");
      writeFileSync(join(dir, "npm", "app.mjs"), APP.replace("EXT", "js"));

      const deno = spawnSync("deno", ["run", "-A", "--no-lock", join(dir, "deno", "app.ts")], {
        encoding: "utf8",
        cwd: join(dir, "deno"),
      });
      assert.equal(deno.status, 0, deno.stderr);
      assert.match(deno.stdout, /^ok deno /m);
      const bun = spawnSync("bun", [join(dir, "npm", "app.mjs")], {
        encoding: "utf8",
        cwd: join(dir, "npm"),
      });
      assert.equal(bun.status, 0, bun.stderr);
      assert.match(bun.stdout, /^ok bun /m);
      console.log(`published files: ${files.length}; ${deno.stdout.trim()}; ${bun.stdout.trim()}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
  { timeout: 300_000 },
);
