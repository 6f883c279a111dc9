/**
 * The lifetime base on the host (ffi/resource.ts): brands that only the constructor sets, owners
 * closing their dependents first, `close()` idempotent, the leak report of an unclosed root. Every verbs, cm and stream object is one of
 * these; their device behaviour is in tests/device/.
 */
import assert from "node:assert/strict";
import { test } from "./harness.ts";
import { moduleUrl, runScript } from "./script.ts";
import { checkResource, isInstance, NativeResource } from "../ffi/resource.ts";
import { ClosedError, InvalidArgumentError } from "../types/errors.ts";

const destroyed: string[] = [];

class Owner extends NativeResource {
  constructor(readonly name: string) {
    super("Owner", []);
  }
  protected destroy(): void {
    destroyed.push(this.name);
  }
}

class Part extends NativeResource {
  constructor(readonly name: string, owner: Owner) {
    super("Part", [owner]);
  }
  protected destroy(): void {
    destroyed.push(this.name);
  }
}

test("resource: the brand is the constructor's — a look-alike or a reassigned kind does not pass", () => {
  const o = new Owner("o");
  const p = new Part("p", o);
  assert.ok(isInstance(o, Owner) && isInstance(o, "Owner"));
  assert.ok(isInstance(p, Part) && !isInstance(p, Owner) && !isInstance(p, "Owner"));
  const lookAlike = Object.create(Owner.prototype, { kind: { value: "Owner" } });
  assert.ok(!isInstance(lookAlike, Owner) && !isInstance(lookAlike, "Owner"));
  assert.throws(() => {
    (p as { kind: string }).kind = "Owner";
  }, TypeError);
  assert.ok(!isInstance(p, "Owner"), "assigning kind changes nothing");
  assert.throws(() => checkResource(lookAlike, Owner, "owner"), InvalidArgumentError);
  o.close();
});

test("resource: closing an owner closes its dependents first, once; later use is ClosedError", () => {
  destroyed.length = 0;
  const o = new Owner("owner");
  new Part("first", o);
  const last = new Part("second", o);
  o.close();
  o.close();
  assert.deepEqual(destroyed, ["second", "first", "owner"]);
  assert.ok(last.closed);
  assert.throws(() => checkResource(last, Part, "part"), ClosedError);
  assert.throws(() => new Part("late", o), ClosedError);
});

test("resource: an unclosed root collected by the GC is reported once; its children and closed roots are not", () => {
  const resourceUrl = moduleUrl("ffi/resource.ts");
  const r = runScript(
    `
    import { NativeResource } from "${resourceUrl}";
    class LeakRoot extends NativeResource {
      constructor() { super("LeakRoot", []); }
      destroy() {}
    }
    class LeakChild extends NativeResource {
      constructor(o) { super("LeakChild", [o]); }
      destroy() {}
    }
    const warnings = [];
    console.warn = (m) => warnings.push(String(m));
    const gc = globalThis.gc ?? (() => globalThis.Bun.gc(true));
    (() => { const r = new LeakRoot(); new LeakChild(r); new LeakChild(r); })();
    (() => { const r = new LeakRoot(); new LeakChild(r); r.close(); })();
    for (let i = 0; i < 50 && warnings.length === 0; i++) {
      gc();
      await new Promise((r) => setTimeout(r, 20));
    }
    gc();
    await new Promise((r) => setTimeout(r, 50));
    console.log(JSON.stringify(warnings));
  `,
    { v8Flags: ["--expose-gc"], timeout: 30_000 },
  );
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  const warnings: string[] = JSON.parse(r.lastLine);
  assert.equal(warnings.length, 1, r.stdout);
  assert.match(warnings[0], /a LeakRoot was garbage-collected without close\(\)/);
});
