/**
 * Type-checks every TypeScript code block of the guide (`docs/*.md`), of the other markdown files
 * that carry them, and of the JSDoc of the library's modules, with `deno check --doc-only`
 * (Deno extracts the ```ts blocks itself; `jsr:@rdma/verbs` and `@rdma/verbs` resolve to this
 * repository's `mod.ts` because deno.json names the package). Also lists the blocks marked
 * ```ts runnable, which `tests/device/guide-runnable.test.ts` runs as programs on a device.
 *
 *   deno run -A scripts/check-docs.ts          check everything, exit 1 on a type error
 *   deno run -A scripts/check-docs.ts --list   print the files checked and the runnable blocks
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const ROOT: string = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The package's top-level entry points (deno.json `exports`: `.`, `./verbs`, `./cm`). */
export const ENTRY_POINTS = ["mod.ts", "verbs.ts", "cm.ts"] as const;

/** The folders whose modules' JSDoc examples are checked. */
const MODULE_DIRS = ["types", "ffi", "poller", "verbs", "cm", "stream", "net", "examples"];

/**
 * Files (markdown, or modules for their JSDoc) whose ```ts blocks do not type-check yet, with the
 * reason; they are reported as skipped, not checked. Empty it as they are fixed.
 */
export const PENDING: Readonly<Record<string, string>> = {};

/** One fenced code block of a markdown file. */
export interface Snippet {
  /** The file, relative to the repository root. */
  readonly file: string;
  /** The 1-based line of the opening fence. */
  readonly line: number;
  /** The fence's language (`ts`, `sh`, or "" for none). */
  readonly lang: string;
  /** The words after the language (`runnable`, ...). */
  readonly attrs: readonly string[];
  /** The code between the fences. */
  readonly code: string;
}

/** The fenced code blocks of markdown `text` (``` fences, not indented blocks). */
export function snippets(text: string, file = ""): Snippet[] {
  const out: Snippet[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,})\s*([^`\s]*)\s*([^`]*)$/.exec(lines[i]);
    if (!open) continue;
    const fence = open[2];
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const t = lines[j].trim();
      if (/^`+$/.test(t) && t.length >= fence.length) break;
      body.push(lines[j]);
    }
    out.push({
      file,
      line: i + 1,
      lang: open[3],
      attrs: open[4].trim() === "" ? [] : open[4].trim().split(/\s+/),
      code: body.join("\n") + "\n",
    });
    i = j;
  }
  return out;
}

function walk(dir: string, keep: (name: string) => boolean): string[] {
  const abs = join(ROOT, dir);
  if (!existsSync(abs)) return [];
  const out: string[] = [];
  for (const name of readdirSync(abs).sort()) {
    const p = join(abs, name);
    if (statSync(p).isDirectory()) out.push(...walk(relative(ROOT, p), keep));
    else if (keep(name)) out.push(relative(ROOT, p));
  }
  return out;
}

/** The chapters of the guide and its index, in order. */
export function guideFiles(): string[] {
  return walk("docs", (n) => n.endsWith(".md"));
}

/** Every markdown file whose ```ts blocks are checked (the guide, the README, the layers' READMEs). */
export function markdownFiles(): string[] {
  const layerDocs = [...MODULE_DIRS, "bench", "scripts"].flatMap((d) =>
    walk(d, (n) => n.endsWith(".md"))
  );
  return [...guideFiles(), "README.md", ...layerDocs].filter((f) =>
    existsSync(join(ROOT, f)) && !(f in PENDING) &&
    snippets(readFileSync(join(ROOT, f), "utf8")).some((s) => s.lang === "ts")
  );
}

/** Every library module whose JSDoc may carry examples: the entry points and the layers' files. */
export function moduleFiles(): string[] {
  return [
    ...ENTRY_POINTS,
    ...MODULE_DIRS.flatMap((d) => walk(d, (n) => n.endsWith(".ts") && !n.endsWith(".d.ts"))),
  ].filter((f) => !(f in PENDING));
}

/** The blocks marked ```ts runnable in the guide. */
export function runnableSnippets(): Snippet[] {
  return guideFiles().flatMap((f) =>
    snippets(readFileSync(join(ROOT, f), "utf8"), f).filter((s) =>
      s.lang === "ts" && s.attrs.includes("runnable")
    )
  );
}

/** The deno executable: this one when running in Deno, else the pinned one or `deno` on PATH. */
export function denoExecutable(): string | null {
  const d = (globalThis as { Deno?: { execPath(): string } }).Deno;
  if (d) return d.execPath();
  const pinned = join(ROOT, "node_modules", ".bin", "deno");
  if (existsSync(pinned)) return pinned;
  const r = spawnSync("deno", ["--version"], { encoding: "utf8" });
  return r.status === 0 ? "deno" : null;
}

/** The result of a check: whether it passed and what `deno check` printed. */
export interface CheckResult {
  /** True when every block type-checked. */
  readonly ok: boolean;
  /** The files checked. */
  readonly files: readonly string[];
  /** stdout and stderr of `deno check` (run with NO_COLOR). */
  readonly output: string;
}

/**
 * Runs `deno check --doc-only` over `files` (default: the markdown files and the modules) with
 * this repository's deno.json, from its root.
 */
export function checkDocs(
  files: readonly string[] = [...markdownFiles(), ...moduleFiles()],
  deno: string | null = denoExecutable(),
): CheckResult {
  if (!deno) {
    throw new Error("check-docs: no deno executable found (npm install, or put deno on PATH)");
  }
  const r = spawnSync(
    deno,
    ["check", "--quiet", "--doc-only", "--config", join(ROOT, "deno.json"), ...files],
    { cwd: ROOT, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } },
  );
  const output = `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? r.error.message : ""}`;
  return { ok: r.status === 0, files, output };
}

if (import.meta.main) {
  if (process.argv.includes("--list")) {
    for (const f of markdownFiles()) console.log(`markdown  ${f}`);
    for (const [f, why] of Object.entries(PENDING)) console.log(`skipped   ${f} (${why})`);
    console.log(`modules   ${moduleFiles().length} files (their JSDoc)`);
    for (const s of runnableSnippets()) console.log(`runnable  ${s.file}:${s.line}`);
  } else {
    const r = checkDocs();
    for (const [f, why] of Object.entries(PENDING)) {
      console.error(`check-docs: skipped ${f}: ${why}`);
    }
    if (!r.ok) {
      console.error(r.output.trim());
      console.error(`check-docs: a code block does not type-check (${r.files.length} files)`);
      process.exit(1);
    }
    console.log(`check-docs: every code block of ${r.files.length} files type-checks`);
  }
}
