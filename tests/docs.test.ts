/**
 * The guide (`docs/`) on the host: every ```ts block of the docs, the README and the JSDoc of the
 * library's modules type-checks (`deno check --doc-only`, through `scripts/check-docs.ts`), the
 * checker does catch a block that does not, and the guide is whole: every chapter is in the
 * index, linked from the README and from mod.ts's module doc, and every runnable block is a
 * program that imports the package by its name. The runnable blocks run on a device in
 * `tests/device/guide-runnable.test.ts`. The defaults the guide states (each runtime's waiter,
 * the stream sizes and linger time, the strategy constants, the connection manager's defaults and
 * private data limits, what closing a listener does) are checked against the code at the end.
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
  "09-remote-memory.md",
  "10-performance.md",
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
    assert.match(text, /^# \d+\. /, `docs/${c} starts with its numbered title`);
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

// ---------------------------------------------------------------------------------------------
// The guide's statements of defaults, checked against the code (in the runtime that runs this
// file: `scripts/test` runs it in Deno and in Bun, so each runtime's waiter is checked). What
// needs a device — that closing a listener leaves its accepted connections open — is checked on
// one by tests/device/cm.test.ts (cmListen) and tests/device/net.test.ts (listen, through the
// node:net layer); here only that every place that says so says the same.

/** `f`'s text with line breaks, indentation and JSDoc's leading `*` folded to single spaces. */
const flat = (f: string) => read(f).replace(/\n\s*\*(?!\/) ?/g, " ").replace(/\s+/g, " ");

/** The first capture of `re` in `f` (the statement must be there). */
function stated(f: string, re: RegExp): string {
  const m = flat(f).match(re);
  assert.ok(m, `${f} no longer states ${re}: update the statement or this test`);
  return m[1];
}

/** The number a source file gives with `re` (its first capture). */
function inCode(f: string, re: RegExp): number {
  const m = read(f).match(re);
  assert.ok(m, `${f} no longer matches ${re}: the default moved; update this test`);
  return Number(m[1].replaceAll("_", ""));
}

test("docs: the waiter named as each runtime's default is the one the code uses by default", async () => {
  const { waiterKinds } = await import("../poller/mod.ts");
  const isBun = "Bun" in globalThis;
  const kinds = waiterKinds(); // this runtime's, the default first
  const guide = isBun
    ? stated(
      "docs/05-waiting.md",
      /Bun has no non-blocking FFI calls[^.]*?by default \(`([a-z-]+)`\)/,
    )
    : stated("docs/05-waiting.md", /Deno waits \(by default, `([a-z-]+)`\)/);
  assert.equal(guide, kinds[0], "docs/05 Under the hood");
  const table = stated(
    "poller/README.md",
    new RegExp(`\\| ${isBun ? "Bun" : "Deno"} +\\| \`([a-z-]+)\``),
  );
  assert.equal(table, kinds[0], "poller/README.md, Waiters");
  const design = flat("docs/05-waiting.md");
  for (const k of kinds) {
    assert.ok(design.includes(`"${k}"`), `docs/05 lists the backend name ${k}`);
  }
});

test("docs: the stream sizes and linger time the guide states are RSOCKET_DEFAULTS and the code's", async () => {
  const { RSOCKET_DEFAULTS: d } = await import("../stream/mod.ts");
  const m = flat("docs/03-connections.md").match(
    /`sendBufferSize` and `receiveBufferSize` (\d+) KiB, `sendQueueDepth` and `receiveQueueDepth` (\d+), `inlineSize` (\d+)/,
  );
  assert.ok(m, "docs/03 states the stream options' defaults");
  assert.deepEqual(
    [Number(m[1]) * 1024, Number(m[1]) * 1024, Number(m[2]), Number(m[2]), Number(m[3])],
    [d.sendBufferSize, d.receiveBufferSize, d.sendQueueDepth, d.receiveQueueDepth, d.inlineSize],
    "docs/03 Streams",
  );
  for (
    const [key, unit] of [
      ["sendBufferSize", 1024],
      ["receiveBufferSize", 1024],
      ["sendQueueDepth", 1],
      ["receiveQueueDepth", 1],
      ["inlineSize", 1],
    ] as const
  ) {
    const v = stated("stream/README.md", new RegExp(`\\| \`${key}\` +\\| (\\d+)`));
    assert.equal(Number(v) * unit, d[key], `stream/README.md's table: ${key}`);
  }
  const linger = (await import("../stream/options.ts")).LINGER_MS_DEFAULT;
  assert.equal(Number(stated("docs/03-connections.md", /`lingerMs`, default (\d+) ms/)), linger);
  assert.equal(
    Number(stated("docs/06-lifetimes.md", /`lingerMs`, default (\d+) s\b/)) * 1000,
    linger,
  );
  assert.equal(Number(stated("stream/README.md", /`lingerMs`, default (\d+)\)/)), linger);
});

test("docs: the keepalive and RDMA READ defaults the docs state are the code's", async () => {
  const o = await import("../stream/options.ts");
  const hours = Number(stated("stream/README.md", /after each idle period \(default (\d+) h,/));
  assert.equal(hours * 3_600_000, o.KEEPALIVE_DEFAULT_MS, "stream/README.md: keepalive time");
  for (const f of ["stream/README.md", "README.md"]) {
    assert.equal(
      Number(stated(f, /`KEEPALIVE_PROBES` \((\d+)\)/)),
      o.KEEPALIVE_PROBES,
      `${f}: KEEPALIVE_PROBES`,
    );
  }
  assert.equal(
    Number(stated("stream/README.md", /\| `readDepth` +\| (\d+)/)),
    o.READ_DEPTH_DEFAULT,
  );
  assert.equal(
    Number(stated("stream/README.md", /`readDepth` \(default (\d+), clamped/)),
    o.READ_DEPTH_DEFAULT,
  );
});

test("docs: the waiting strategy's defaults in the guide are the poller's constants", async () => {
  const p = await import("../poller/mod.ts");
  const f = "docs/05-waiting.md";
  assert.equal(stated(f, /`"([a-z]+)"` is the default \(`DEFAULT_STRATEGY`\)/), p.DEFAULT_STRATEGY);
  assert.equal(
    Number(stated(f, /between \d+ µs and (\d+) µs \(`AUTO_SPIN_MAX_MICROS`\)/)),
    p.AUTO_SPIN_MAX_MICROS,
  );
  // the least a learnt budget spins: a quarter of where it starts
  assert.equal(
    Number(stated(f, /between (\d+) µs and \d+ µs \(`AUTO_SPIN_MAX_MICROS`\)/)),
    p.DEFAULT_SPIN_MICROS / 4,
  );
  assert.equal(
    Number(stated(f, /starting at (\d+) µs \(`DEFAULT_SPIN_MICROS`\)/)),
    p.DEFAULT_SPIN_MICROS,
  );
  assert.equal(Number(stated(f, /at most `MAX_SPIN_MICROS`, (\d+) ms/)) * 1000, p.MAX_SPIN_MICROS);
  assert.equal(
    Number(stated(f, /in batches \(`channel\.ackBatch`, (\d+)\)/)),
    inCode("verbs/channel.ts", /ackBatch = (\d+);/),
  );
  // the wake-up figures quoted from poller/README.md are its default rows
  const bun = stated(f, /a median of ([\d.]+) µs in Bun \(`bun-socket`\)/);
  const deno = stated(f, /and ([\d.]+) µs in Deno \(`deno-nonblocking`\)/);
  assert.ok(flat("poller/README.md").includes(`**\`bun-socket\`** (default) | ${bun} (`));
  assert.ok(
    flat("poller/README.md").includes(`**\`deno-nonblocking\`** (default, unchanged) | ${deno} (`),
  );
});

test("docs: the connection manager's defaults and private-data limits in the guide are the code's", async () => {
  const { privateDataLimit } = await import("../cm/mod.ts");
  const f = "docs/03-connections.md";
  // the private data table: RC and UD over the IB CM, iWARP
  const rows = [
    ...read(f).matchAll(/^\| (connect|accept|reject) +\| (\d+) +\| (\d+) +\| (\d+) +\|$/gm),
  ];
  assert.equal(rows.length, 3, "docs/03's private data table has its three rows");
  for (const [, op, rc, ud, iw] of rows) {
    const o = op as "connect" | "accept" | "reject";
    assert.equal(
      Number(rc),
      privateDataLimit(o, { transport: "ib", ud: false, afIb: false }),
      `${op} RC`,
    );
    assert.equal(
      Number(ud),
      privateDataLimit(o, { transport: "ib", ud: true, afIb: false }),
      `${op} UD`,
    );
    assert.equal(
      Number(iw),
      privateDataLimit(o, { transport: "iwarp", ud: false, afIb: false }),
      `${op} iWARP`,
    );
  }
  const defaults = Object.fromEntries(
    [...read("cm/conn_param.ts").matchAll(/u\("(\w+)", param\.\w+, \d+, (\d+)\)/g)].map((
      m,
    ) => [m[1], Number(m[2])]),
  );
  assert.equal(
    Number(stated(f, /`responderResources` and `initiatorDepth` \([^)]*default (\d+)/)),
    defaults.responderResources,
  );
  assert.equal(defaults.initiatorDepth, defaults.responderResources);
  assert.equal(Number(stated(f, /`retryCount` \(0–7, default (\d+)\)/)), defaults.retryCount);
  assert.equal(Number(stated(f, /`rnrRetryCount` \(0–7, default (\d+)/)), defaults.rnrRetryCount);
  assert.equal(
    Number(stated(f, /`resolveTimeoutMs`, default (\d+) ms each/)),
    inCode("cm/id.ts", /if \(ms === undefined\) return (\d+);/),
  );
  const disconnect = inCode("cm/id.ts", /waitDisconnected\(\{ timeout: ([\d_]+),/);
  assert.equal(Number(stated(f, /bounded by `timeout`, default (\d+) s/)) * 1000, disconnect);
  assert.equal(
    Number(stated("docs/06-lifetimes.md", /at most `timeout`, default (\d+) s/)) * 1000,
    disconnect,
  );
});

test("docs: every place that says what closing a listener does says the accepted connections stay open", () => {
  const says: [string, RegExp][] = [
    ["docs/03-connections.md", /`listener\.close\(\)` \(connections already accepted stay open\)/],
    [
      "docs/03-connections.md",
      /Closing the listener refuses the requests nobody took; the connections already accepted from it stay open/,
    ],
    ["docs/06-lifetimes.md", /closing a listener leaves the connections it accepted open/],
    ["docs/06-lifetimes.md", /Closing an `RdmaListener` leaves the connections it accepted open/],
    ["stream/README.md", /`close\(\)` \(accepted connections stay open\)/],
    [
      "cm/connect.ts",
      /Closing the listener rejects requests nobody took; accepted connections stay open/,
    ],
    ["stream/listener.ts", /connections already accepted stay open/],
  ];
  for (const [f, re] of says) assert.match(flat(f), re, f);
  for (const f of [...guideFiles(), "README.md", "stream/README.md", "cm/README.md"]) {
    assert.doesNotMatch(
      flat(f),
      /clos\w* (the|a|its) listener[^.]*(also )?closes? (the|its|every) (connections|ids) (it )?accepted/i,
      `${f} says closing a listener closes its connections`,
    );
  }
});
