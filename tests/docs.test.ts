/**
 * The guide (`docs/`) on the host: every ```ts block of the docs, the README and the JSDoc of the
 * library's modules type-checks (`deno check --doc-only`, through `scripts/check-docs.ts`), the
 * checker does catch a block that does not, and the guide is whole: every chapter is in the
 * index, linked from the README and from mod.ts's module doc, and every runnable block is a
 * program that imports the package by its name. The runnable blocks run on a device in
 * `tests/device/guide-runnable.test.ts`.
 */

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "./harness.ts";
import {
  checkDocs,
  denoExecutable,
  guideFiles,
  markdownFiles,
  moduleFiles,
  ROOT,
  runnableSnippets,
  snippets,
} from "../scripts/check-docs.ts";

const deno = denoExecutable();
const noDeno = deno ? false : "no deno executable to type-check with (run `npm install`)";

const CHAPTERS = [
  "01-what-is-rdma.md",
  "02-first-program.md",
  "03-connections.md",
  "04-raw-verbs.md",
  "05-waiting.md",
  "06-lifetimes.md",
  "07-errors.md",
  "08-troubleshooting.md",
];

const read = (f: string) => readFileSync(join(ROOT, f), "utf8");

test("docs: every ts block of the guide, the README and the modules' JSDoc type-checks", () => {
  const files = [...markdownFiles(), ...moduleFiles()];
  for (const c of CHAPTERS) {
    if (snippets(read(`docs/${c}`)).some((s) => s.lang === "ts")) {
      assert.ok(files.includes(`docs/${c}`), `docs/${c} is not checked`);
    }
  }
  assert.ok(files.includes("mod.ts") && files.includes("verbs/mod.ts"));
  const r = checkDocs(files, deno);
  assert.ok(r.ok, `a code block does not type-check:\n${r.output}`);
}, { skip: noDeno, timeout: 300_000 });

test("docs: the checker fails on a block that does not type-check", () => {
  const dir = mkdtempSync(join(tmpdir(), "docs-check-"));
  try {
    const good = join(dir, "good.md");
    const bad = join(dir, "bad.md");
    writeFileSync(
      good,
      '# ok\n\n```ts\nimport { openDevice } from "@rdma/verbs";\nconst f: () => unknown = openDevice;\nconsole.log(f);\n```\n',
    );
    writeFileSync(
      bad,
      '# broken\n\n```ts runnable\nimport { openDevice } from "@rdma/verbs";\nopenDevice(42);\n```\n',
    );
    assert.equal(checkDocs([good], deno).ok, true, "a correct block was refused");
    const r = checkDocs([bad], deno);
    assert.equal(r.ok, false, "a block passing a number as the device name was accepted");
    assert.match(r.output, /TS2345/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, { skip: noDeno, timeout: 120_000 });

test("docs: the snippet parser reads fences, languages and attributes", () => {
  const md =
    "x\n\n```ts runnable\na\n```\n\n````md\n```ts\nnot a block\n```\n````\n\n```\nplain\n```\n";
  const s = snippets(md, "f.md");
  assert.deepEqual(
    s.map((b) => [b.line, b.lang, b.attrs.join(","), b.code]),
    [
      [3, "ts", "runnable", "a\n"],
      [7, "md", "", "```ts\nnot a block\n```\n"],
      [13, "", "", "plain\n"],
    ],
  );
});

test("docs: the guide has its chapters in order, each in the index, linked from README and mod.ts", () => {
  assert.deepEqual(guideFiles(), [...CHAPTERS.map((c) => `docs/${c}`), "docs/README.md"]);
  const index = read("docs/README.md");
  let at = -1;
  for (const c of CHAPTERS) {
    const i = index.indexOf(`](${c})`);
    assert.ok(i > at, `docs/README.md must link ${c} after the chapter before it`);
    at = i;
  }
  assert.match(read("README.md"), /\]\(docs\/README\.md\)/, "README.md links the guide");
  const moduleDoc = read("mod.ts").split("@module")[0];
  assert.match(moduleDoc, /docs\/README\.md/, "mod.ts's module doc links the guide");
  for (const c of CHAPTERS) {
    const text = read(`docs/${c}`);
    assert.match(text, /^# \d\. /, `docs/${c} starts with its numbered title`);
    for (const m of text.matchAll(/\]\(([^)#]+\.md)(#[^)]*)?\)/g)) {
      if (/^[a-z]+:/.test(m[1])) continue;
      const target = join(ROOT, "docs", m[1]);
      assert.doesNotThrow(() => readFileSync(target), `docs/${c} links ${m[1]}, which is missing`);
    }
  }
});

test("docs: code blocks are ts, sh or plain; runnable blocks are programs importing @rdma/verbs", () => {
  const runnable = runnableSnippets();
  assert.ok(runnable.length >= 4, `only ${runnable.length} runnable blocks`);
  for (const f of guideFiles()) {
    for (const s of snippets(read(f), f)) {
      assert.ok(["ts", "sh", ""].includes(s.lang), `${f}:${s.line}: fence \`\`\`${s.lang}`);
      if (s.lang === "ts") {
        assert.ok(!/from "\.\.?\//.test(s.code), `${f}:${s.line} imports a relative path`);
      }
    }
  }
  for (const s of runnable) {
    const specs = [...s.code.matchAll(/from\s+"([^"]+)"/g)].map((m) => m[1]);
    assert.ok(specs.includes("@rdma/verbs"), `${s.file}:${s.line} does not import @rdma/verbs`);
    for (const spec of specs) {
      assert.ok(
        spec === "@rdma/verbs" || spec.startsWith("node:"),
        `${s.file}:${s.line} imports ${spec}: runnable blocks use the package and node: only`,
      );
    }
    assert.ok(!/^declare /m.test(s.code), `${s.file}:${s.line} is runnable but declares values`);
  }
});
