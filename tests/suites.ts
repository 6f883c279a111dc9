/**
 * Where each device test file runs, declared in one place that `scripts/test` reads: every
 * `tests/device/*.test.ts` has an entry here, and a file without one fails the run (and the host
 * test `tests/suites.test.ts`) instead of silently never running somewhere.
 *
 * - `iwarp`: the file also runs on iWARP devices (soft-iWARP). iWARP connects through rdma_cm
 *   only and has no UD or multicast: the file's tests that need those skip there with the reason
 *   (`needs: notOnIwarp(...)` in `harness.ts`). Without it the file runs on IB/RoCE only.
 * - `hosts`: `"one"` runs on one host (the peers in other processes of the same host); `"two"`
 *   runs only across two hosts (`scripts/test --two-hosts`: its peers on the other guest);
 *   `"both"` runs on one host and again across two hosts.
 * - `destructive`: the file takes the device away (removes and re-adds it), so it runs only in
 *   the VM, after every other file of that boot.
 *
 * As a program it lists the files of one run, one a line, for `scripts/test`:
 *
 * ```sh
 * deno run --allow-read tests/suites.ts device [--iwarp]       # single-host suites
 * deno run --allow-read tests/suites.ts destructive [--iwarp]  # the destructive ones
 * deno run --allow-read tests/suites.ts across                 # the two-host run
 * ```
 *
 * @module
 */

import { readdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

/** What a device test file needs of the machine it runs on. */
export interface Suite {
  /** It also runs on iWARP devices (its IB-only tests skip there). */
  readonly iwarp: boolean;
  /** One host, two hosts only, or both. */
  readonly hosts: "one" | "two" | "both";
  /** It removes the device: VM only, after everything else on that boot. */
  readonly destructive?: boolean;
}

const RC_ONLY: Suite = { iwarp: false, hosts: "one" };
const IWARP: Suite = { iwarp: true, hosts: "one" };

/** Every device test file (relative to the repository root) and what it needs. */
export const DEVICE_SUITES: Readonly<Record<string, Suite>> = {
  "tests/device/census.test.ts": IWARP,
  "tests/device/cm.test.ts": IWARP,
  "tests/device/cm-ex.test.ts": IWARP,
  "tests/device/cm-rc.test.ts": { iwarp: true, hosts: "both" },
  "tests/device/cm-ud.test.ts": IWARP,
  "tests/device/device-removal.test.ts": { iwarp: true, hosts: "one", destructive: true },
  "tests/device/examples-pingpong.test.ts": RC_ONLY,
  "tests/device/examples-rdmacm.test.ts": IWARP,
  "tests/device/examples-udaddy-mckey.test.ts": { iwarp: false, hosts: "both" },
  "tests/device/fault-local.test.ts": RC_ONLY,
  "tests/device/fault-soak.test.ts": IWARP,
  "tests/device/fault-wire.test.ts": { iwarp: false, hosts: "two" },
  "tests/device/fuzz.test.ts": RC_ONLY,
  "tests/device/guide-runnable.test.ts": RC_ONLY,
  "tests/device/http.test.ts": RC_ONLY,
  "tests/device/misuse.test.ts": IWARP,
  "tests/device/net.test.ts": RC_ONLY,
  "tests/device/perftest.test.ts": IWARP,
  "tests/device/poller.test.ts": RC_ONLY,
  "tests/device/remote-peers.test.ts": { iwarp: false, hosts: "two" },
  "tests/device/stream.test.ts": IWARP,
  "tests/device/stream-conn.test.ts": IWARP,
  "tests/device/stream-iomap.test.ts": IWARP,
  "tests/device/stream-strategies.test.ts": IWARP,
  "tests/device/verbs-async.test.ts": RC_ONLY,
  "tests/device/verbs-basic.test.ts": RC_ONLY,
  "tests/device/verbs-context.test.ts": IWARP,
  "tests/device/verbs-ex.test.ts": RC_ONLY,
  "tests/device/verbs-ex-support.test.ts": IWARP,
  "tests/device/verbs-failures.test.ts": RC_ONLY,
  "tests/device/verbs-ops.test.ts": RC_ONLY,
  "tests/device/verbs-safety.test.ts": RC_ONLY,
};

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The device test files on disk that have no entry, and the entries with no file. */
export function undeclared(): { files: string[]; entries: string[] } {
  const dir = join(ROOT, "tests", "device");
  const onDisk = readdirSync(dir).filter((f) => f.endsWith(".test.ts"))
    .map((f) => relative(ROOT, join(dir, f)));
  return {
    files: onDisk.filter((f) => !(f in DEVICE_SUITES)).sort(),
    entries: Object.keys(DEVICE_SUITES).filter((f) => !onDisk.includes(f)).sort(),
  };
}

/** The run kinds of `scripts/test`. */
export type RunKind = "device" | "destructive" | "across";

/** The files of one run: single-host or destructive (on an iWARP device or not), or two-host. */
export function filesFor(kind: RunKind, iwarp = false): string[] {
  return Object.entries(DEVICE_SUITES).filter(([, s]) => {
    if (kind === "across") return s.hosts !== "one";
    if (s.hosts === "two" || (iwarp && !s.iwarp)) return false;
    return kind === "destructive" ? s.destructive === true : !s.destructive;
  }).map(([f]) => f).sort();
}

if (import.meta.main) {
  const [kind, ...flags] = process.argv.slice(2);
  const missing = undeclared();
  if (missing.files.length > 0 || missing.entries.length > 0) {
    console.error(
      "tests/suites.ts: every device test file needs an entry in DEVICE_SUITES " +
        `(undeclared: ${missing.files.join(", ") || "none"}; ` +
        `entries without a file: ${missing.entries.join(", ") || "none"})`,
    );
    process.exit(1);
  }
  if (kind !== "device" && kind !== "destructive" && kind !== "across") {
    console.error("usage: tests/suites.ts device|destructive|across [--iwarp]");
    process.exit(2);
  }
  for (const f of filesFor(kind, flags.includes("--iwarp"))) console.log(f);
}
