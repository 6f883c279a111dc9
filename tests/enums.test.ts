/**
 * The enum tables equal the installed headers, value for value and enumerator for
 * enumerator, and the string functions equal those of libibverbs and librdmacm: a C
 * program generated from the tables prints what the C compiler and the C libraries say.
 */
import assert from "node:assert/strict";
import { execFileSync, type ExecFileSyncOptionsWithStringEncoding } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "./harness.ts";
import { native } from "../ffi/native.ts";
import {
  atomicCapStr,
  bytesToMtu,
  cmEventStr,
  CmEventType,
  ENUM_TABLES,
  enumName,
  enumNamesByValue,
  EventType,
  eventTypeStr,
  flagNames,
  linkLayerStr,
  Mtu,
  mtuStr,
  mtuToBytes,
  NodeType,
  nodeTypeStr,
  parseSysfsGidType,
  PortState,
  portStateStr,
  PrivateDataLimits,
  QpState,
  Rate,
  rateToMbps,
  RDMA_MAX_PRIVATE_DATA,
  RDMA_UDP_QKEY,
  SendFlags,
  speedStr,
  transportTypeStr,
  WcOpcode,
  WcStatus,
  wcStatusStr,
  widthStr,
} from "../types/enums.ts";

const INCLUDES = [
  "#include <stdio.h>",
  "#include <infiniband/verbs.h>",
  "#include <rdma/rdma_cma.h>",
  "#include <rdma/rdma_cma_abi.h>",
].join("\n");

/** The values each string function is asked about: every enumerator and a few unknown ones. */
const range = (lo: number, hi: number) => Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
const STRING_PROBES = {
  wc: { fn: "ibv_wc_status_str", values: range(-2, 30), ts: wcStatusStr },
  event: { fn: "ibv_event_type_str", values: range(-2, 25), ts: eventTypeStr },
  node: { fn: "ibv_node_type_str", values: range(-3, 12), ts: nodeTypeStr },
  port: { fn: "ibv_port_state_str", values: range(-2, 10), ts: portStateStr },
  cm: { fn: "rdma_event_str", values: range(-2, 20), ts: cmEventStr },
} as const;

function cProgram(): string {
  const lines: string[] = [INCLUDES, "int main(void) {"];
  for (const t of ENUM_TABLES) {
    if (t.header === "kernel") continue;
    for (const [key, v] of Object.entries(t.table)) {
      const name = t.prefix + key;
      lines.push(
        typeof v === "bigint"
          ? `  printf("V ${name} %llu\\n", (unsigned long long)(${name}));`
          : `  printf("V ${name} %lld\\n", (long long)(${name}));`,
      );
    }
  }
  for (const name of ["RDMA_UDP_QKEY", "RDMA_MAX_PRIVATE_DATA"]) {
    lines.push(`  printf("V ${name} %lld\\n", (long long)(${name}));`);
  }
  for (const [tag, p] of Object.entries(STRING_PROBES)) {
    for (const v of p.values) lines.push(`  printf("S ${tag} ${v} %s\\n", ${p.fn}(${v}));`);
  }
  for (const v of range(-1, 26)) {
    lines.push(`  printf("R ${v} %d\\n", ibv_rate_to_mbps(${v}));`);
  }
  lines.push("  return 0;", "}");
  return lines.join("\n") + "\n";
}

interface CResult {
  values: Map<string, string>;
  strings: Map<string, string>;
  rates: Map<number, number>;
  preprocessed: string;
}

/** Compiles and runs the generated program; a string is the reason it could not. */
function runC(): CResult | string {
  const dir = mkdtempSync(join(tmpdir(), "rdma-enums-"));
  try {
    const src = join(dir, "enums.c");
    const exe = join(dir, "enums");
    writeFileSync(src, cProgram());
    const opts: ExecFileSyncOptionsWithStringEncoding = {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    };
    try {
      execFileSync("cc", ["-O0", "-o", exe, src, "-libverbs", "-lrdmacm"], opts);
    } catch (e) {
      const err = e as { code?: string; stderr?: string };
      if (err.code === "ENOENT") return "no C compiler (cc)";
      const msg = String(err.stderr ?? e);
      if (/No such file|cannot find -l/.test(msg)) {
        return "libibverbs-dev / librdmacm-dev not installed";
      }
      throw new Error(`the generated C program does not compile:\n${msg}`);
    }
    const out = execFileSync(exe, [], opts);
    const preprocessed = execFileSync("cc", ["-E", "-P", src], opts);
    const values = new Map<string, string>();
    const strings = new Map<string, string>();
    const rates = new Map<number, number>();
    for (const line of out.split("\n")) {
      const m = /^(V|S|R) (\S+) (.*)$/.exec(line);
      if (!m) continue;
      if (m[1] === "V") values.set(m[2], m[3]);
      else if (m[1] === "R") rates.set(Number(m[2]), Number(m[3]));
      else {
        const sp = m[3].indexOf(" ");
        strings.set(`${m[2]} ${m[3].slice(0, sp)}`, m[3].slice(sp + 1));
      }
    }
    return { values, strings, rates, preprocessed };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

let c: CResult | string | Error;
try {
  c = runC();
} catch (e) {
  c = e as Error; // reported by the tests below, not at load time
}
const cSkip = typeof c === "string" ? c : false;
const C = (): CResult => {
  if (c instanceof Error) throw c;
  return c as CResult;
};

test("enums: every value equals the C constant of the same name", () => {
  let n = 0;
  for (const t of ENUM_TABLES) {
    if (t.header === "kernel") continue;
    for (const [key, v] of Object.entries(t.table)) {
      const name = t.prefix + key;
      const got = C().values.get(name);
      assert.ok(got !== undefined, `${name} printed nothing`);
      assert.equal(String(v), got, `${t.name}.${key} (${name})`);
      n++;
    }
  }
  assert.equal(C().values.get("RDMA_UDP_QKEY"), String(RDMA_UDP_QKEY));
  assert.equal(C().values.get("RDMA_MAX_PRIVATE_DATA"), String(RDMA_MAX_PRIVATE_DATA));
  assert.ok(n > 300, `only ${n} constants compared`);
}, { skip: cSkip });

/** Macros that a table adds to the enumerators of its enum. */
const MACROS = new Set(["IBV_ACCESS_OPTIONAL_RANGE"]);

test("enums: each named C enum has exactly the enumerators of its table", () => {
  const src = C().preprocessed;
  for (const t of ENUM_TABLES) {
    const m = /^enum (\w+)$/.exec(t.c);
    if (!m) continue;
    const body = new RegExp(`enum\\s+${m[1]}\\s*\\{([^}]*)\\}`).exec(src);
    assert.ok(body, `${t.c} not found in the headers`);
    const inC = body[1].split(",")
      .map((s) => /^\s*([A-Za-z_]\w*)/.exec(s)?.[1])
      .filter((s): s is string => s !== undefined)
      .sort();
    const ours = Object.keys(t.table).map((k) => t.prefix + k).filter((k) => !MACROS.has(k)).sort();
    assert.deepEqual(ours, inC, `${t.name} vs ${t.c}`);
  }
}, { skip: cSkip });

test("enums: the string functions equal the C library's (compiled program)", () => {
  for (const [tag, p] of Object.entries(STRING_PROBES)) {
    for (const v of p.values) {
      assert.equal(p.ts(v), C().strings.get(`${tag} ${v}`), `${p.fn}(${v})`);
    }
  }
}, { skip: cSkip });

test("enums: rateToMbps equals ibv_rate_to_mbps", () => {
  for (const [v, mbps] of C().rates) assert.equal(rateToMbps(v), mbps, `ibv_rate_to_mbps(${v})`);
}, { skip: cSkip });

/** The loader, or why it cannot be used here. */
function loadNative(): ReturnType<typeof native> | string {
  try {
    const n = native();
    n.ibverbs.ibv_wc_status_str(0);
    n.rdmacm.rdma_event_str(0);
    return n;
  } catch (e) {
    return `libibverbs/librdmacm cannot be loaded: ${(e as Error).message}`;
  }
}
const n = loadNative();

test("enums: the string functions equal the C library's (through the FFI loader)", () => {
  const nat = n as ReturnType<typeof native>;
  const fns = {
    ibv_wc_status_str: nat.ibverbs.ibv_wc_status_str,
    ibv_event_type_str: nat.ibverbs.ibv_event_type_str,
    ibv_node_type_str: nat.ibverbs.ibv_node_type_str,
    ibv_port_state_str: nat.ibverbs.ibv_port_state_str,
    rdma_event_str: nat.rdmacm.rdma_event_str,
  };
  for (const p of Object.values(STRING_PROBES)) {
    for (const v of p.values) {
      assert.equal(p.ts(v), nat.cstring(fns[p.fn](v)), `${p.fn}(${v})`);
    }
  }
  for (const v of range(-1, 26)) {
    assert.equal(rateToMbps(v), nat.ibverbs.ibv_rate_to_mbps(v), `ibv_rate_to_mbps(${v})`);
  }
}, { skip: typeof n === "string" ? n : false });

test("enums: tables are frozen and keys carry no C prefix", () => {
  const names = new Set<string>();
  for (const t of ENUM_TABLES) {
    assert.ok(Object.isFrozen(t.table), t.name);
    assert.ok(!names.has(t.name), `duplicate ${t.name}`);
    names.add(t.name);
    for (const k of Object.keys(t.table)) {
      assert.match(k, /^[A-Z][A-Z0-9_]*$/, `${t.name}.${k}`);
      assert.ok(!k.startsWith(t.prefix), `${t.name}.${k} repeats the prefix`);
    }
  }
  assert.ok(Object.isFrozen(PrivateDataLimits) && Object.isFrozen(PrivateDataLimits.ib));
});

test("enums: enumName and flagNames", () => {
  assert.equal(enumName(WcStatus, WcStatus.WR_FLUSH_ERR, "IBV_WC_"), "IBV_WC_WR_FLUSH_ERR");
  assert.equal(enumName(WcStatus, 99, "IBV_WC_"), "<unknown 99>");
  assert.equal(enumName(NodeType, -1, "IBV_NODE_"), "IBV_NODE_UNKNOWN");
  assert.equal(enumName(CmEventType, 9, "RDMA_CM_EVENT_"), "RDMA_CM_EVENT_ESTABLISHED");
  assert.deepEqual(flagNames(SendFlags, 0, "IBV_SEND_"), []);
  assert.deepEqual(flagNames(SendFlags, SendFlags.SIGNALED | SendFlags.INLINE, "IBV_SEND_"), [
    "IBV_SEND_SIGNALED",
    "IBV_SEND_INLINE",
  ]);
  assert.deepEqual(flagNames(SendFlags, 0x102, "IBV_SEND_"), ["IBV_SEND_SIGNALED", "0x100"]);
  assert.deepEqual(flagNames(SendFlags, -0x80000000, "IBV_SEND_"), ["0x80000000"]);
  assert.deepEqual(flagNames(SendFlags, 2n, "IBV_SEND_"), ["IBV_SEND_SIGNALED"]);
});

test("enums: enumNamesByValue agrees with enumName for every value", () => {
  for (
    const [table, prefix] of [[WcStatus, "IBV_WC_"], [WcOpcode, "IBV_WC_"], [
      QpState,
      "IBV_QPS_",
    ]] as const
  ) {
    const names = enumNamesByValue(table, prefix);
    for (const v of Object.values(table)) assert.equal(names[v], enumName(table, v, prefix));
    assert.equal(names.filter((n) => n !== undefined).length, new Set(Object.values(table)).size);
  }
});

test("enums: the ibv_devinfo renderings", () => {
  assert.equal(widthStr(2), "4X");
  assert.equal(widthStr(16), "2X");
  assert.equal(widthStr(3), "invalid width");
  assert.equal(speedStr(32), "25.0 Gbps");
  assert.equal(speedStr(1), "2.5 Gbps");
  assert.equal(speedStr(8), "10.0 Gbps");
  assert.equal(speedStr(0), "invalid speed");
  assert.equal(mtuStr(Mtu.MTU_4096), "4096");
  assert.equal(mtuStr(0), "invalid MTU");
  assert.equal(mtuToBytes(Mtu.MTU_1024), 1024);
  assert.equal(bytesToMtu(2048), Mtu.MTU_2048);
  assert.equal(bytesToMtu(1500), undefined);
  assert.equal(mtuToBytes(6), undefined);
  assert.equal(linkLayerStr(0), "InfiniBand");
  assert.equal(linkLayerStr(2), "Ethernet");
  assert.equal(transportTypeStr(1), "iWARP");
  assert.equal(atomicCapStr(1), "ATOMIC_HCA");
  assert.equal(parseSysfsGidType("RoCE v2\n"), 1);
  assert.equal(parseSysfsGidType("IB/RoCE v1"), 0);
  assert.equal(portStateStr(PortState.ACTIVE), "active");
  assert.equal(eventTypeStr(EventType.PORT_ACTIVE), "port active");
  assert.equal(rateToMbps(Rate.RATE_100_GBPS), 103125);
});

test("enums: the private-data limits follow from the IB CM sizes and the rdma_cm header", () => {
  const { cmaHeader, ibCm, ib, iwarp } = PrivateDataLimits;
  assert.equal(cmaHeader, 1 + 1 + 2 + 16 + 16);
  assert.equal(ib.connect, ibCm.req - cmaHeader);
  assert.equal(ib.accept, ibCm.rep);
  assert.equal(ib.reject, ibCm.rej);
  assert.equal(ib.udConnect, ibCm.sidrReq - cmaHeader);
  assert.equal(ib.udAccept, ibCm.sidrRep);
  assert.equal(ib.udReject, ibCm.sidrRep);
  assert.equal(ib.connectAfIb, ibCm.req);
  assert.equal(ib.udConnectAfIb, ibCm.sidrReq);
  assert.equal(iwarp.connect, iwarp.eventLengthMax - iwarp.mpaV2IrdOrd);
  assert.ok(iwarp.connect < iwarp.mpaDriverMax);
  assert.equal(iwarp.mpaDriverMax, RDMA_MAX_PRIVATE_DATA);
  for (const v of [...Object.values(ib), iwarp.connect, iwarp.accept, iwarp.reject]) {
    assert.ok(v <= 255, "private_data_len is a uint8_t");
  }
});
