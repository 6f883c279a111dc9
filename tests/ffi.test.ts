import assert from "node:assert/strict";
import process from "node:process";
import { test } from "./harness.ts";
import { HEAP_BYTES_PER, HEAP_FLAGS, moduleUrl, runScript } from "./script.ts";
import { configureNative, native } from "../ffi/native.ts";
import { IBVERBS, IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { RDMACM } from "../types/symbols/rdmacm.ts";
import { LIBC } from "../types/symbols/libc.ts";
import { Errno } from "../types/errno.ts";
import { InvalidArgumentError, LibraryNotFoundError, RdmaError } from "../types/errors.ts";
import type { FunctionSpec } from "../types/ctypes.ts";
import type { Native } from "../types/native.ts";

const tables = { libibverbs: IBVERBS, librdmacm: RDMACM, libc: LIBC } as const;

test("every symbol in the tables resolves in the installed libraries", () => {
  const n = native();
  const libs = { libibverbs: n.ibverbs, librdmacm: n.rdmacm, libc: n.libc };
  for (const [lib, table] of Object.entries(tables)) {
    const bound = libs[lib as keyof typeof libs] as Record<string, unknown>;
    for (const [name, spec] of Object.entries(table) as [string, FunctionSpec][]) {
      assert.equal(typeof bound[name], "function", `${lib}: ${name} (${spec.c}) did not resolve`);
    }
  }
});

test("every table entry carries its C prototype naming the symbol", () => {
  const all = { ...IBVERBS, ...RDMACM, ...LIBC } as Record<string, FunctionSpec>;
  for (const [name, spec] of Object.entries(all)) {
    assert.match(spec.c, new RegExp(`\\b${name}\\s*\\(`), `${name}: prototype "${spec.c}"`);
  }
  for (const [name, spec] of Object.entries(IBVERBS_OPS) as [string, FunctionSpec][]) {
    assert.match(spec.c, new RegExp(`\\(\\*${name}\\)`), `ops.${name}: "${spec.c}"`);
  }
});

test("errno is read right after a failing call", () => {
  const n = native();
  n.setErrno(0);
  assert.equal(n.libc.close(-1), -1);
  assert.equal(n.errno(), Errno.EBADF);
  n.setErrno(0);
  assert.equal(n.libc.fcntl(987654, 1, 0), -1); // F_GETFD on a closed fd
  assert.equal(n.errno(), Errno.EBADF);
  n.setErrno(Errno.EAGAIN);
  assert.equal(n.errno(), Errno.EAGAIN);
});

test("a cold symbol answers the same before and after Deno binds it; errno survives both", async () => {
  // a fresh Native: the shared one may have bound these already
  const { createNative } = "Bun" in globalThis
    ? await import("../ffi/bun.ts")
    : await import("../ffi/deno.ts");
  const n = createNative({});
  const first = n.libc.getpid;
  const seen = new Set<unknown>();
  for (let i = 0; i < 200; i++) {
    seen.add(n.libc.getpid);
    assert.equal(n.libc.getpid(), process.pid, `call ${i + 1}`);
    n.setErrno(0);
    assert.equal(n.libc.close(-1), -1);
    assert.equal(n.errno(), Errno.EBADF, `close(-1) ${i + 1}`);
  }
  // Deno calls a cold symbol through its address, then binds it (a new function); Bun binds at open
  assert.equal(seen.size, "Bun" in globalThis ? 1 : 2);
  assert.equal(first(), process.pid); // a function kept from before the binding still calls it
  // a hot symbol is bound on its first use and stays that function
  const wait = n.libc.epoll_wait;
  assert.equal(n.libc.epoll_wait, wait);
  assert.equal(wait(-1, null, 0, 0), -1);
});

test("a function pointer calls a real libc function (prepared and direct)", () => {
  const n = native();
  const self = n.libc.dlopen(null, 2);
  const strlen = n.libc.dlsym(self, n.pointerOf(n.cstringBytes("strlen")));
  assert.ok(strlen, "dlsym(strlen)");
  const spec = { args: ["pointer"], result: "usize", c: "size_t strlen(const char *s)" } as const;
  const text = n.cstringBytes("héllo, wörld"); // UTF-8: 14 bytes
  const textPtr = n.alloc(text.length);
  new Uint8Array(n.arrayBuffer(textPtr, text.length)).set(text);
  assert.equal(Number(n.fnPointer(strlen, spec)(textPtr)), 14);
  const prepared = n.prepareCall(strlen, spec, [textPtr]);
  assert.equal(Number(prepared.call()), 14);
  prepared.setArg(0, n.offset(textPtr, 7));
  assert.equal(Number(prepared.call()), 7);
  prepared.free();
  n.free(textPtr, text.length);
  const labs = n.libc.dlsym(self, n.pointerOf(n.cstringBytes("labs")))!;
  const abs = n.fnPointer(labs, { args: ["i64"], result: "i64", c: "long labs(long j)" });
  assert.equal(Number(abs(-123456789012)), 123456789012);
  assert.ok(["trampoline", "libffi", "CFunction"].includes(n.fnPointerPath), n.fnPointerPath);
});

/**
 * `fgetc` on a memory stream of "\0\0\0x\0y": a call that returns 0 until it does not, with
 * state, so that the tries a retry made show in what the next call reads. True when the tries
 * looped in native code.
 */
function checkRetry(n: Native): boolean {
  const self = n.libc.dlopen(null, 2);
  const sym = (name: string) => n.libc.dlsym(self, n.pointerOf(n.cstringBytes(name)))!;
  const text = new Uint8Array([0, 0, 0, 0x78, 0, 0x79]);
  const buf = n.alloc(text.length);
  new Uint8Array(n.arrayBuffer(buf, text.length)).set(text);
  const mode = n.cstringBytes("r");
  const fmemopen = n.fnPointer(sym("fmemopen"), {
    args: ["pointer", "usize", "buffer"],
    result: "pointer",
    c: "FILE *fmemopen(void *buf, size_t size, const char *mode)",
  });
  const fp = fmemopen(buf, text.length, mode);
  assert.ok(fp !== null, "fmemopen");
  const fgetc = n.prepareCall(
    sym("fgetc"),
    { args: ["pointer"], result: "i32", c: "int fgetc(FILE *stream)" },
    [fp],
  );
  assert.equal(fgetc.retry(2), 0, "two tries read two NULs");
  assert.equal(fgetc.retry(10), 0x78, "the third NUL, then x: the tries stop at it");
  assert.equal(fgetc.retry(1), 0, "one try reads one NUL");
  assert.equal(fgetc.retry(3), 0x79);
  assert.equal(fgetc.retry(4), -1, "EOF is not 0: one try");
  const natively = fgetc.nativeRetry;
  fgetc.free();
  n.fnPointer(sym("fclose"), { args: ["pointer"], result: "i32", c: "int fclose(FILE *f)" })(fp);
  n.free(buf, text.length);
  return natively;
}

test("a prepared call's retry makes up to `tries` calls while it returns 0, in native code on x86-64", async () => {
  assert.equal(checkRetry(native()), process.arch === "x64");
  if ("Bun" in globalThis) return;
  // Deno's fallback paths: each try is one call
  const { createNative } = await import("../ffi/deno.ts");
  for (const paths of [{ trampoline: false }, { trampoline: false, libffi: false }] as const) {
    assert.equal(checkRetry(createNative(paths)), false, JSON.stringify(paths));
  }
});

test("native memory: aligned, zeroed, zero-copy views, C strings both ways", () => {
  const n = native();
  const p = n.alloc(100, 4096);
  assert.equal(n.address(p) % 4096n, 0n);
  const bytes = new Uint8Array(n.arrayBuffer(p, 100));
  assert.ok(bytes.every((b) => b === 0));
  bytes.set(n.cstringBytes("π≈3.14"));
  assert.equal(n.cstring(p), "π≈3.14");
  assert.equal(Number(n.libc.strlen(p)), n.cstringBytes("π≈3.14").length - 1);
  n.writePointer(p, 64, n.offset(p, 8));
  assert.equal(n.address(n.readPointer(p, 64)), n.address(p) + 8n);
  n.writePointer(p, 64, null);
  assert.equal(n.readPointer(p, 64), null);
  assert.equal(n.cstring(null), null);
  n.free(p, 100, 4096);
});

test("the C string functions come through: ibv_wc_status_str and rdma_event_str", () => {
  const n = native();
  assert.equal(n.cstring(n.ibverbs.ibv_wc_status_str(0)), "success");
  assert.equal(n.cstring(n.rdmacm.rdma_event_str(0)), "RDMA_CM_EVENT_ADDR_RESOLVED");
});

test("a missing library gives one clear error naming the package", async () => {
  const { createNative } = "Bun" in globalThis
    ? await import("../ffi/bun.ts")
    : await import("../ffi/deno.ts");
  const broken = createNative({ libibverbs: "libibverbs-does-not-exist.so.1" });
  assert.throws(() => broken.ibverbs, (e: unknown) => {
    assert.ok(e instanceof LibraryNotFoundError);
    assert.match(e.message, /libibverbs-does-not-exist\.so\.1/);
    assert.match(e.message, /apt install libibverbs1 ibverbs-providers/);
    return true;
  });
  assert.throws(() => configureNative({}), /before the first native call/);
});

test("a table's symbols bind at their first use: present, optional and missing ones", async () => {
  const { openLibrary } = "Bun" in globalThis
    ? await import("../ffi/bun.ts")
    : await import("../ffi/deno.ts");
  const lib = openLibrary("libc.so.6", {
    getpid: { args: [], result: "i32", c: "pid_t getpid(void)" },
    rdma_verbs_no_such_fn: { args: [], result: "i32", c: "int rdma_verbs_no_such_fn(void)" },
    rdma_verbs_no_such_opt: {
      args: [],
      result: "i32",
      c: "int rdma_verbs_no_such_opt(void)",
      optional: true,
    },
  }) as unknown as Record<string, (() => number) | undefined>;
  assert.deepEqual(Object.keys(lib), ["getpid", "rdma_verbs_no_such_fn", "rdma_verbs_no_such_opt"]);
  assert.equal(lib.getpid!(), process.pid);
  assert.equal(lib.rdma_verbs_no_such_opt, undefined);
  assert.throws(() => lib.rdma_verbs_no_such_fn, (e: unknown) => {
    assert.ok(e instanceof RdmaError);
    assert.match(
      e.message,
      /no symbol rdma_verbs_no_such_fn \(int rdma_verbs_no_such_fn\(void\)\)/,
    );
    return true;
  });
  // (the loader tries the next candidate path on a throw; openWithHint names them all)
  assert.throws(() => openLibrary("librdma-verbs-does-not-exist.so.9", {}), /does-not-exist/);
});

test(
  "Deno's prepared calls are too big for Maglev to inline and small enough for TurboFan",
  () => {
    // Maglev inlines up to 100 bytes of bytecode and makes an inlined FFI call take V8's slow
    // path; TurboFan inlines up to 460 and keeps the fast one (ffi/deno.ts: TrampolineCall.call
    // and .retry, LibffiCall.call and the trampoline's copy)
    const source = `
      import { createNative } from "${moduleUrl("ffi/deno.ts")}";
      const n = createNative(JSON.parse(Deno.args[0]));
      const abs = n.libc.dlsym(n.libc.dlopen(null, 2), n.pointerOf(n.cstringBytes("abs")));
      const p = n.prepareCall(abs, { args: ["i32"], result: "i32", c: "int abs(int j)" }, [-7]);
      if (p.call() !== 7) throw new Error("abs(-7)");
      if (p.retry(3) !== 7) throw new Error("abs(-7), retried");
      n.copy(new Uint8Array(100), 1, new Uint8Array(100), 2, 80);
      console.log(n.fnPointerPath);
    `;
    /** Bytes of bytecode of `fn` in a run of the probe with `paths`, which must use `path`. */
    const bytecode = (fn: string, paths: object, path: string) => {
      const r = runScript(source, {
        v8Flags: ["--print-bytecode", `--print-bytecode-filter=${fn}`],
        args: [JSON.stringify(paths)],
      });
      assert.equal(r.status, 0, r.stderr);
      if (r.lastLine !== path) assert.fail(`${path} is not in use here: ${r.stdout.slice(-200)}`);
      const at = r.stdout.indexOf(`[generated bytecode for function: ${fn} `);
      assert.ok(at >= 0, `no bytecode printed for ${fn}()`);
      return Number(/Bytecode length: (\d+)/.exec(r.stdout.slice(at))?.[1]);
    };
    const fast = process.arch === "x64" ? "trampoline" : "libffi";
    for (const [paths, path] of [[{}, fast], [{ trampoline: false }, "libffi"]] as const) {
      const size = bytecode("call", paths, path);
      assert.ok(size > 100 && size <= 460, `${path}'s call() is ${size} bytes of bytecode`);
    }
    if (fast === "trampoline") {
      const size = bytecode("copyBytes", {}, fast);
      assert.ok(size > 100 && size <= 460, `the trampoline's copy is ${size} bytes of bytecode`);
      const retry = bytecode("retry", {}, fast);
      assert.ok(
        retry > 100 && retry <= 460,
        `the trampoline's retry is ${retry} bytes of bytecode`,
      );
    }
  },
  { skip: "Bun" in globalThis ? "V8's inlining limits concern Deno only" : false },
);

test("native.copy copies part of one array into another, overlapping too, and checks the ranges", () => {
  const n = native();
  const src = Uint8Array.from({ length: 300 }, (_, i) => i & 0xff);
  const dst = new Uint8Array(300);
  n.copy(dst, 7, src.subarray(3), 100, 150); // a view with its own offset
  assert.deepEqual(dst.subarray(7, 157), src.subarray(103, 253));
  assert.equal(dst[6], 0);
  assert.equal(dst[157], 0);
  n.copy(src, 10, src, 0, 200); // overlapping: as memmove and TypedArray.set
  assert.deepEqual(src.subarray(10, 210), Uint8Array.from({ length: 200 }, (_, i) => i & 0xff));
  n.copy(dst, 300, src, 0, 0);
  // shared and resizable memory copy as any other; a detached array has no bytes left
  const shared = new Uint8Array(new SharedArrayBuffer(300));
  n.copy(shared, 1, dst, 7, 150);
  assert.deepEqual(shared.subarray(1, 151), dst.subarray(7, 157));
  const resizable = new Uint8Array(new ArrayBuffer(300, { maxByteLength: 600 }));
  n.copy(resizable, 0, shared, 1, 150);
  assert.deepEqual(resizable.subarray(0, 150), dst.subarray(7, 157));
  const detached = new Uint8Array(300);
  structuredClone(detached.buffer, { transfer: [detached.buffer] });
  assert.throws(() => n.copy(dst, 0, detached, 0, 100), InvalidArgumentError);
  for (
    const [dstOffset, srcOffset, count] of [
      [250, 0, 51],
      [0, 250, 51],
      [-1, 0, 10],
      [0, -1, 10],
      [0, 0, -1],
      [0.5, 0, 10],
      [0, 0, 2 ** 32],
      [0, Number.NaN, 1],
    ]
  ) {
    assert.throws(
      () => n.copy(dst, dstOffset, src, srcOffset, count),
      InvalidArgumentError,
      `${dstOffset}, ${srcOffset}, ${count}`,
    );
  }
});

test(
  "Deno's native.copy allocates nothing (the trampoline's fast call, no subarray view)",
  () => {
    const source = `
      import { createNative } from "${moduleUrl("ffi/deno.ts")}";
      const n = createNative(JSON.parse(Deno.args[0]));
      const a = new Uint8Array(1 << 16), b = new Uint8Array(1 << 16);
      const loop = (k) => { for (let i = 0; i < k; i++) n.copy(b, i & 7, a, 100 + (i & 15), 3000); };
      ${HEAP_BYTES_PER}
      console.log(await heapBytesPer(loop, 50000));
    `;
    const perCopy = (paths: object) => {
      const r = runScript(source, {
        v8Flags: HEAP_FLAGS,
        args: [JSON.stringify(paths)],
      });
      assert.equal(r.status, 0, r.stderr);
      return Number(r.lastLine);
    };
    // TypedArray.set of a part: a subarray view of about 100 bytes per copy
    assert.ok(perCopy({ trampoline: false }) > 50, "the fallback makes a view per copy");
    const bytes = perCopy({});
    assert.ok(bytes < 1, `${bytes} heap bytes per copy through the trampoline`);
  },
  {
    skip: "Bun" in globalThis
      ? "the trampoline is Deno's"
      : process.arch !== "x64"
      ? "the trampoline is built for x86-64 only"
      : false,
  },
);
