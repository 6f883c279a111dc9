// Deno's two function-pointer paths give the same answers; Bun has one (CFunction).
import assert from "node:assert/strict";
import { test } from "./harness.ts";

test("Deno UnsafeFnPointer fallback calls a real libc function", async () => {
  const { createNative } = await import("../ffi/deno.ts");
  const n = createNative({ libffi: false });
  assert.equal(n.fnPointerPath, "UnsafeFnPointer");
  const strlen = n.libc.dlsym(n.libc.dlopen(null, 2), n.pointerOf(n.cstringBytes("strlen")))!;
  const s = n.cstringBytes("twelve bytes");
  const p = n.alloc(s.length);
  new Uint8Array(n.arrayBuffer(p, s.length)).set(s);
  const spec = { args: ["pointer"], result: "usize", c: "size_t strlen(const char *s)" } as const;
  assert.equal(n.fnPointer(strlen, spec)(p), 12);
  assert.equal(n.prepareCall(strlen, spec, [p]).call(), 12);
  n.free(p, s.length);
}, { skip: "Bun" in globalThis ? "Bun has a single function-pointer path (CFunction)" : false });
