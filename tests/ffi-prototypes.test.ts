/**
 * The symbol tables held against C: every entry's prototype string (`c:`) is parsed and its
 * argument and result types must be what the table's FFI types say (pointer or integer, width,
 * signedness, `void`), in libibverbs (exported functions and the function pointers it calls),
 * librdmacm, libc and libffi. Where the system headers and a C compiler are present, each
 * prototype is also compiled against the header's own declaration. Each runtime's mapping of the
 * table types (the `Record<CType, …>` maps in `ffi/`) must keep their width and signedness.
 * A type changed by hand in a table fails here, whichever runtime it would crash.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "./harness.ts";
import { IBVERBS, IBVERBS_OPS } from "../types/symbols/ibverbs.ts";
import { RDMACM } from "../types/symbols/rdmacm.ts";
import { LIBC, LIBFFI } from "../types/symbols/libc.ts";
import type { CType, FunctionSpec } from "../types/ctypes.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

type Table = Readonly<Record<string, FunctionSpec>>;
const TABLES: Readonly<Record<string, Table>> = {
  libibverbs: IBVERBS,
  "libibverbs ops": IBVERBS_OPS,
  librdmacm: RDMACM,
  libc: LIBC,
  libffi: LIBFFI,
};

/** What a value is at the ABI level: its kind, width in bits, and signedness. */
interface Abi {
  readonly kind: "void" | "int" | "float" | "pointer";
  readonly bits: number;
  readonly signed: boolean;
}

const int = (bits: number, signed: boolean): Abi => ({ kind: "int", bits, signed });
const POINTER: Abi = { kind: "pointer", bits: 64, signed: false };
const VOID: Abi = { kind: "void", bits: 0, signed: false };

/** The meaning of each table type (both supported architectures are LP64). */
const CTYPE_ABI: Readonly<Record<CType, Abi>> = {
  void: VOID,
  bool: int(8, false),
  i8: int(8, true),
  u8: int(8, false),
  i16: int(16, true),
  u16: int(16, false),
  i32: int(32, true),
  u32: int(32, false),
  i64: int(64, true),
  u64: int(64, false),
  isize: int(64, true),
  usize: int(64, false),
  f32: { kind: "float", bits: 32, signed: true },
  f64: { kind: "float", bits: 64, signed: true },
  pointer: POINTER,
  buffer: POINTER,
};

/** The table type a C scalar type is written as; every name a prototype uses must be here. */
const C_SCALARS: Readonly<Record<string, CType>> = {
  "void": "void",
  "_Bool": "bool",
  "bool": "bool",
  "char": "i8",
  "signed char": "i8",
  "int8_t": "i8",
  "unsigned char": "u8",
  "uint8_t": "u8",
  "__u8": "u8",
  "short": "i16",
  "int16_t": "i16",
  "unsigned short": "u16",
  "uint16_t": "u16",
  "__u16": "u16",
  "__be16": "u16",
  "int": "i32",
  "signed int": "i32",
  "int32_t": "i32",
  "pid_t": "i32",
  "clockid_t": "i32",
  "unsigned int": "u32",
  "unsigned": "u32",
  "uint32_t": "u32",
  "__u32": "u32",
  "__be32": "u32",
  "long": "i64",
  "long long": "i64",
  "int64_t": "i64",
  "unsigned long": "u64",
  "unsigned long long": "u64",
  "uint64_t": "u64",
  "__u64": "u64",
  "__be64": "u64",
  "ssize_t": "isize",
  "size_t": "usize",
  "float": "f32",
  "double": "f64",
  // enums are int-sized and passed as int
  "ffi_status": "i32",
  "ffi_abi": "i32",
};

/** One C declaration: the name, the result type, and each parameter's type (names dropped). */
interface CDecl {
  readonly name: string;
  /** True for a function-pointer member, `RET (*name)(PARAMS)`. */
  readonly member: boolean;
  readonly result: string;
  readonly params: readonly string[];
}

/** The index of the `)` that closes the `(` at `open`. */
function closing(s: string, open: number): number {
  let depth = 0;
  for (let i = open; i < s.length; i++) {
    if (s[i] === "(") depth++;
    else if (s[i] === ")" && --depth === 0) return i;
  }
  throw new Error(`unbalanced parentheses in "${s}"`);
}

/** Splits a parameter list at the commas outside parentheses. */
function splitParams(list: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let from = 0;
  for (let i = 0; i < list.length; i++) {
    if (list[i] === "(") depth++;
    else if (list[i] === ")") depth--;
    else if (list[i] === "," && depth === 0) {
      out.push(list.slice(from, i));
      from = i + 1;
    }
  }
  out.push(list.slice(from));
  return out.map((p) => p.trim());
}

const TYPE_WORDS = new Set(["void", "char", "short", "int", "long", "signed", "unsigned", "_Bool"]);

/** A parameter's type: its declaration without the parameter's name. */
function paramType(p: string): string {
  if (p.includes("(")) return p; // a function pointer: a pointer, whatever its name
  const tokens = p.replace(/\*/g, " * ").trim().split(/\s+/);
  const last = tokens[tokens.length - 1];
  const before = tokens[tokens.length - 2];
  const named = tokens.length >= 2 && /^\w+$/.test(last) && !TYPE_WORDS.has(last) &&
    !["struct", "enum", "union"].includes(before ?? "");
  return (named ? tokens.slice(0, -1) : tokens).join(" ");
}

/**
 * Parses a prototype: `RET name(PARAMS)` or `RET (*name)(PARAMS)`. A variadic tail documented as
 * `... /* int arg *\/` counts as that parameter; other comments are dropped.
 */
export function parsePrototype(c: string): CDecl {
  const documented = c.match(/\.\.\.\s*\/\*\s*([^*]+?)\s*\*\//)?.[1];
  let s = c.replace(/\/\*[\s\S]*?\*\//g, " ").replace(/\s+/g, " ").trim();
  if (documented) s = s.replace("...", documented);
  // the first "(" is either the parameter list or the "(*name)" of a function-pointer member
  const first = s.indexOf("(");
  if (first < 0) throw new Error(`no parameter list in "${c}"`);
  const member = s.slice(first).match(/^\(\s*\*\s*(\w+)\s*\)\s*\(/);
  let name: string, result: string, open: number;
  if (member) {
    name = member[1];
    result = s.slice(0, first);
    open = first + member[0].length - 1;
  } else {
    const m = s.slice(0, first).match(/(\w+)\s*$/);
    if (!m) throw new Error(`no function name in "${c}"`);
    name = m[1];
    result = s.slice(0, m.index);
    open = first;
  }
  const list = s.slice(open + 1, closing(s, open)).trim();
  const params = list === "void" || list === "" ? [] : splitParams(list).map(paramType);
  return { name, member: member !== null, result: result.trim(), params };
}

/** The table type a C type is passed as; throws for a name the vocabulary lacks. */
export function ctypeOf(decl: string): CType {
  const t = decl.replace(/\b(const|volatile|restrict|__restrict)\b/g, " ").replace(/\s+/g, " ")
    .trim();
  if (t.includes("*") || t.includes("(") || t.includes("[")) return "pointer";
  if (/^enum \w+$/.test(t)) return "i32";
  const scalar = C_SCALARS[t.replace(/^(unsigned|signed|short|long)( int)$/, "$1")];
  if (!scalar) throw new Error(`unknown C type "${t}": add it to the vocabulary of this test`);
  return scalar;
}

const same = (a: Abi, b: Abi) => a.kind === b.kind && a.bits === b.bits && a.signed === b.signed;
const show = (a: Abi) => a.kind === "int" ? `${a.signed ? "i" : "u"}${a.bits}` : a.kind;

/** What is wrong with one table entry against its own prototype; empty when nothing is. */
export function specProblems(name: string, spec: FunctionSpec): string[] {
  const out: string[] = [];
  let d: CDecl;
  try {
    d = parsePrototype(spec.c);
  } catch (e) {
    return [`${name}: ${(e as Error).message}`];
  }
  if (d.name !== name) out.push(`${name}: the prototype declares ${d.name}`);
  const check = (what: string, declared: string, given: CType) => {
    let want: CType;
    try {
      want = ctypeOf(declared);
    } catch (e) {
      out.push(`${name} ${what}: ${(e as Error).message}`);
      return;
    }
    if (!same(CTYPE_ABI[want], CTYPE_ABI[given])) {
      out.push(`${name} ${what}: C "${declared}" is ${want}, the table says ${given}`);
    }
  };
  check("result", d.result, spec.result);
  if (d.params.length !== spec.args.length) {
    out.push(`${name}: ${d.params.length} C parameters, ${spec.args.length} in the table`);
  } else d.params.forEach((p, i) => check(`argument ${i}`, p, spec.args[i]));
  return out;
}

test("ffi prototypes: the parser reads plain, member, variadic and function-pointer declarations", () => {
  assert.deepEqual(parsePrototype("struct ibv_device **ibv_get_device_list(int *num_devices)"), {
    name: "ibv_get_device_list",
    member: false,
    result: "struct ibv_device **",
    params: ["int *"],
  });
  const ops = parsePrototype(
    "struct ibv_mw *(*alloc_mw)(struct ibv_pd *pd, enum ibv_mw_type type)",
  );
  assert.deepEqual([ops.name, ops.member, ops.result, ops.params], [
    "alloc_mw",
    true,
    "struct ibv_mw *",
    ["struct ibv_pd *", "enum ibv_mw_type"],
  ]);
  assert.deepEqual(parsePrototype("int fcntl(int fd, int cmd, ... /* int arg */)").params, [
    "int",
    "int",
    "int",
  ]);
  assert.deepEqual(
    parsePrototype("void ffi_call(ffi_cif *cif, void (*fn)(void), void *rvalue, void **avalue)")
      .params.map(ctypeOf),
    ["pointer", "pointer", "pointer", "pointer"],
  );
  assert.deepEqual(parsePrototype("int ibv_fork_init(void)").params, []);
  assert.equal(ctypeOf("unsigned int"), "u32");
  assert.equal(ctypeOf("const union ibv_gid *"), "pointer");
  assert.throws(() => ctypeOf("mystery_t"), /unknown C type "mystery_t"/);
});

test("ffi prototypes: every table entry's FFI types are what its C prototype says", () => {
  const problems: string[] = [];
  let checked = 0;
  for (const [lib, table] of Object.entries(TABLES)) {
    for (const [name, spec] of Object.entries(table)) {
      checked++;
      for (const p of specProblems(name, spec)) problems.push(`${lib}: ${p}`);
    }
  }
  assert.ok(checked > 150, `only ${checked} symbols checked`);
  assert.deepEqual(problems, []);
});

test("ffi prototypes: a type changed by hand is caught (width, signedness, pointer, void, arity)", () => {
  const spec = IBVERBS.ibv_reg_mr_iova2;
  const edit = (args: readonly CType[], result: CType = spec.result) =>
    specProblems("ibv_reg_mr_iova2", { ...spec, args, result });
  assert.deepEqual(edit(spec.args), []);
  assert.match(edit(["pointer", "pointer", "u32", "u64", "u32"]).join(), /argument 2.*usize/);
  assert.match(edit(["pointer", "pointer", "usize", "i64", "u32"]).join(), /argument 3.*u64/);
  assert.match(edit(["pointer", "u64", "usize", "u64", "u32"]).join(), /argument 1.*pointer/);
  assert.match(edit(spec.args, "void").join(), /result.*pointer/);
  assert.match(edit(["pointer", "pointer", "usize", "u64"]).join(), /5 C parameters, 4/);
});

/** The struct of `verbs.h` that holds the function pointer `name`. */
function opsStruct(name: string, c: string): string {
  if (c.includes("/* verbs_context */")) return "vctx";
  if (name.startsWith("wr_")) return "qpx";
  if (/^(start_poll|next_poll|end_poll|read_)/.test(name)) return "cqx";
  return "ops";
}

/** A C declarator of a pointer to the function `c` declares, named `local`. */
function pointerDecl(c: string, name: string, member: boolean): string {
  return member
    ? c.replace(new RegExp(`\\(\\s*\\*\\s*${name}\\s*\\)`), `(*${"p_" + name})`)
    : c.replace(new RegExp(`\\b${name}\\s*\\(`), `(*p_${name})(`);
}

const HEADERS = [
  "/usr/include/infiniband/verbs.h",
  "/usr/include/rdma/rdma_cma.h",
];

function compiler(): string | undefined {
  for (const cc of ["cc", "gcc"]) {
    if (spawnSync(cc, ["--version"], { encoding: "utf8" }).status === 0) return cc;
  }
  return undefined;
}

const cc = compiler();
const missing = HEADERS.filter((h) => !existsSync(h));
const ffiHeader = spawnSync(cc ?? "cc", ["-E", "-x", "c", "-"], {
  input: "#include <ffi.h>\n",
  encoding: "utf8",
}).status === 0;

test(
  "ffi prototypes: every prototype matches the installed header's declaration (C compiler)",
  () => {
    const lines = [
      "#define _GNU_SOURCE",
      ...[
        "infiniband/verbs.h",
        "rdma/rdma_cma.h",
        "errno.h",
        "string.h",
        "stdlib.h",
        "fcntl.h",
        "unistd.h",
        "dlfcn.h",
        "sys/epoll.h",
        "sys/eventfd.h",
        "sys/mman.h",
        "time.h",
        ...(ffiHeader ? ["ffi.h"] : []),
      ].map((h) => `#include <${h}>`),
      "void check(struct ibv_context_ops *ops, struct verbs_context *vctx,",
      "           struct ibv_qp_ex *qpx, struct ibv_cq_ex *cqx) {",
    ];
    const at = new Map<number, string>();
    for (const [lib, table] of Object.entries(TABLES)) {
      if (lib === "libffi" && !ffiHeader) continue;
      for (const [name, spec] of Object.entries(table)) {
        const member = lib === "libibverbs ops";
        const init = member ? `${opsStruct(name, spec.c)}->${name}` : `&${name}`;
        at.set(lines.length + 1, `${lib}: ${name}`);
        lines.push(`  { ${pointerDecl(spec.c, name, member)} = ${init}; (void)p_${name}; }`);
      }
    }
    lines.push("}", "");
    const r = spawnSync(cc!, [
      "-fsyntax-only",
      "-x",
      "c",
      "-Werror=incompatible-pointer-types",
      "-Werror=implicit-function-declaration",
      "-",
    ], { input: lines.join("\n"), encoding: "utf8" });
    const wrong = new Set<string>();
    for (const m of r.stderr.matchAll(/<stdin>:(\d+):\d+: error: ([^\n]*)/g)) {
      wrong.add(`${at.get(Number(m[1])) ?? `line ${m[1]}`}: ${m[2]}`);
    }
    if (r.status !== 0 && wrong.size === 0) wrong.add(r.stderr.trim() || `exit ${r.status}`);
    assert.deepEqual([...wrong], [], "table prototypes that differ from the headers");
    assert.ok(at.size > 150, `only ${at.size} declarations compiled`);
  },
  {
    skip: !cc
      ? "no C compiler (cc/gcc) to read the headers with"
      : missing.length > 0
      ? `no system headers ${missing.join(", ")} (libibverbs-dev, librdmacm-dev)`
      : false,
  },
);

/** The ABI meaning of a runtime's FFI type name (Deno, Bun's `FFIType`, libffi's `ffi_type_*`). */
function runtimeAbi(t: string): Abi | undefined {
  const name = t.replace(/^FFIType\./, "").replace(/^"(.*)"$/, "$1").replace(/_fast$/, "");
  const m = name.match(/^([iu])(8|16|32|64)$/) ?? name.match(/^ffi_type_([su])int(8|16|32|64)$/);
  if (m) return int(Number(m[2]), m[1] === "i" || m[1] === "s");
  switch (name) {
    case "void":
    case "ffi_type_void":
      return VOID;
    case "bool":
      return int(8, false);
    case "isize":
      return int(64, true);
    case "usize":
      return int(64, false);
    case "f32":
    case "ffi_type_float":
      return { kind: "float", bits: 32, signed: true };
    case "f64":
    case "ffi_type_double":
      return { kind: "float", bits: 64, signed: true };
    case "pointer":
    case "buffer":
    case "ptr":
    case "ffi_type_pointer":
      return POINTER;
  }
  return undefined;
}

test("ffi prototypes: each runtime's encoding of the table types keeps kind, width and signedness", () => {
  const maps = new Map<string, Map<string, string>>();
  for (const file of readdirSync(join(ROOT, "ffi")).filter((f) => f.endsWith(".ts"))) {
    const src = readFileSync(join(ROOT, "ffi", file), "utf8");
    for (const m of src.matchAll(/const (\w+): Record<CType, [^>]+> = \{([^}]*)\}/g)) {
      const entries = new Map<string, string>();
      for (const line of m[2].split("\n")) {
        const spread = line.match(/^\s*\.\.\.(\w+),/);
        if (spread) {
          for (const [k, v] of maps.get(`${file}: ${spread[1]}`) ?? []) entries.set(k, v);
        }
        const e = line.match(/^\s*(\w+):\s*([^,]+),/);
        if (e) entries.set(e[1], e[2].trim());
      }
      maps.set(`${file}: ${m[1]}`, entries);
    }
  }
  for (const loader of ["deno.ts", "bun.ts"]) {
    assert.ok(
      [...maps.keys()].some((k) => k.startsWith(`${loader}:`)),
      `no Record<CType, …> map found in ffi/${loader}: this test reads them`,
    );
  }
  const wrong: string[] = [];
  for (const [where, entries] of maps) {
    for (const [ctype, abi] of Object.entries(CTYPE_ABI)) {
      const given = entries.get(ctype);
      const got = given === undefined ? undefined : runtimeAbi(given);
      if (!got || !same(got, abi)) {
        wrong.push(`${where}: ${ctype} (${show(abi)}) → ${given ?? "missing"}`);
      }
    }
  }
  assert.deepEqual(wrong, []);
});
