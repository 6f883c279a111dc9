// Deno's three function-pointer paths give the same answers; Bun has one (CFunction).
import assert from "node:assert/strict";
import process from "node:process";
import { test } from "./harness.ts";
import { RdmaError } from "../types/errors.ts";
import type { LibraryPaths } from "../ffi/library.ts";
import type { Native } from "../types/native.ts";

const BUN = "Bun" in globalThis ? "Bun has a single function-pointer path (CFunction)" : false;
const NOT_X86_64 = process.arch === "x64" ? false : "the trampoline is built for x86-64 only";

async function denoNative(paths: LibraryPaths): Promise<Native> {
  const { createNative } = await import("../ffi/deno.ts");
  return createNative(paths);
}

function sym(n: Native, name: string) {
  return n.libc.dlsym(n.libc.dlopen(null, 2), n.pointerOf(n.cstringBytes(name)))!;
}

for (
  const [paths, path] of [
    [{}, NOT_X86_64 ? "libffi" : "trampoline"],
    [{ trampoline: false }, "libffi"],
    [{ trampoline: false, libffi: false }, "UnsafeFnPointer"],
  ] as const
) {
  test(`Deno ${path} path calls real libc functions`, async () => {
    const n = await denoNative(paths);
    assert.equal(n.fnPointerPath, path);
    const s = n.cstringBytes("twelve bytes");
    const p = n.alloc(s.length);
    new Uint8Array(n.arrayBuffer(p, s.length)).set(s);
    const spec = { args: ["pointer"], result: "usize", c: "size_t strlen(const char *s)" } as const;
    assert.equal(n.fnPointer(sym(n, "strlen"), spec)(p), 12);
    assert.equal(n.prepareCall(sym(n, "strlen"), spec, [p]).call(), 12);
    n.free(p, s.length);
    const abs = { args: ["i32"], result: "i32", c: "int abs(int j)" } as const;
    const call = n.prepareCall(sym(n, "abs"), abs, [-7]);
    assert.equal(call.call(), 7);
    call.setArg(0, -2147483647);
    assert.equal(call.call(), 2147483647);
    call.setArg(0, 5); // a second change through the same view
    assert.equal(call.call(), 5);
    call.free();
    call.free();
    if (path !== "UnsafeFnPointer") {
      // its native block is gone: neither a call nor a new argument may reach it
      assert.throws(() => call.call(), (e: unknown) => e instanceof RdmaError);
      assert.throws(() => call.setArg(0, -1), (e: unknown) => e instanceof RdmaError);
    }
  }, { skip: BUN });
}

test(
  "Deno trampoline: six arguments in their registers, a pointer result, other signatures by libffi, no fd left open",
  async () => {
    const n = await denoNative({});
    // the kernel hands out the lowest free fd: the same number before and after means the
    // anonymous file the trampoline was loaded from is closed
    const lowestFreeFd = () => {
      const fd = n.libc.eventfd(0, 0);
      n.libc.close(fd);
      return fd;
    };
    const before = lowestFreeFd();
    assert.equal(n.fnPointerPath, "trampoline"); // set up now
    assert.equal(lowestFreeFd(), before, "the anonymous file is closed once mapped");
    // void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset)
    const mmap = {
      args: ["pointer", "usize", "i32", "i32", "i32", "i64"],
      result: "pointer",
      c: "void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset)",
    } as const;
    const PROT_READ = 1, PROT_WRITE = 2, MAP_PRIVATE = 2, MAP_ANONYMOUS = 0x20;
    const m = n.fnPointer(sym(n, "mmap"), mmap)(
      null,
      8192,
      PROT_READ | PROT_WRITE,
      MAP_PRIVATE | MAP_ANONYMOUS,
      -1,
      0,
    );
    assert.ok(m !== null && n.address(m) % 4096n === 0n && n.address(m) !== 0xffffffffffffffffn);
    const page = new Uint8Array(n.arrayBuffer(m, 8192));
    page[8191] = 42; // mapped, writable
    const munmap = {
      args: ["pointer", "usize"],
      result: "i32",
      c: "int munmap(void *addr, size_t length)",
    } as const;
    assert.equal(n.fnPointer(sym(n, "munmap"), munmap)(m, 8192), 0);
    // 8- and 16-bit results through the 32-bit binding: only the low bits count (htons leaves
    // the upper half of eax as it found it, here 0xabcd)
    const htons16 = { args: ["u32"], result: "u16", c: "uint16_t htons(uint16_t)" } as const;
    assert.equal(n.fnPointer(sym(n, "htons"), htons16)(0xabcd1234), 0x3412);
    const htons8 = { args: ["u32"], result: "u8", c: "uint16_t htons(uint16_t)" } as const;
    assert.equal(n.fnPointer(sym(n, "htons"), htons8)(0xabcd1234), 0x12);
    const prepared = n.prepareCall(sym(n, "htons"), htons8, [0xabcd1234]);
    assert.equal(prepared.call(), 0x12);
    prepared.setArg(0, 0x5678); // htons gives 0x7856
    assert.equal(prepared.call(), 0x56);
    prepared.free();
    // a 64-bit result is not one of the trampoline's: the call goes to libffi, with the same answer
    const labs = { args: ["i64"], result: "i64", c: "long labs(long j)" } as const;
    assert.equal(Number(n.fnPointer(sym(n, "labs"), labs)(-123456789012)), 123456789012);
  },
  { skip: BUN || NOT_X86_64 },
);
