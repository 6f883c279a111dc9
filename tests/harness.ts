/**
 * One test API for both runtimes: `test()` maps to `Deno.test` or `bun:test`.
 * Assertions come from `node:assert/strict`. A test that cannot run says why:
 * it is registered as skipped and its reason is printed, never counted as passed.
 */

import process from "node:process";

type TestFn = () => void | Promise<void>;

/** Options of one test. */
export interface TestOptions {
  /** When a string, the test is skipped and the reason printed. */
  skip?: string | false;
  /**
   * Milliseconds before the test fails (default 120 s), in both runtimes. `RDMA_TEST_TIMEOUT_MS`
   * raises every test's limit to at least its value (the full-count runs of bench/reliability.sh).
   */
  timeout?: number;
}

const isBun = "Bun" in globalThis;
// deno-lint-ignore no-explicit-any
const bunTest: any = isBun ? (await import("bun:test")).test : undefined;

/** Registers a test in the running runtime's test runner. */
export function test(name: string, fn: TestFn, options: TestOptions = {}): void {
  const reason = options.skip;
  if (reason) {
    process.stderr.write(`skip: ${name} (${reason})\n`);
    if (isBun) bunTest.skip(name, fn);
    else Deno.test({ name: `${name} [skipped: ${reason}]`, ignore: true, fn });
    return;
  }
  const timeout = Math.max(
    options.timeout ?? 120_000,
    Number(process.env.RDMA_TEST_TIMEOUT_MS) || 0,
  );
  if (isBun) bunTest(name, fn, timeout);
  else {
    // Deno has no per-test timeout: a hung test fails with this one instead of stalling the run
    Deno.test({
      name,
      fn: () => within(timeout, name, fn),
      sanitizeOps: false,
      sanitizeResources: false,
    });
  }
}

async function within(ms: number, name: string, fn: TestFn): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      fn(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`test timed out after ${ms} ms: ${name}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The RDMA device a device test runs against, from the environment. */
export interface DeviceEnv {
  /** Device name, e.g. `rxe0` (env `RDMA_DEVICE`). */
  device: string;
  /** Port number (env `RDMA_PORT`, default 1). */
  port: number;
  /** GID index to use (env `RDMA_GID_INDEX`). */
  gidIndex: number;
  /** IPv4 address of the netdev the device sits on (env `RDMA_GUEST_IP` or `RDMA_ADDR`). */
  address: string;
  /** True inside the soft-RoCE VM. */
  vm: boolean;
  /** `iwarp` for soft-iWARP and other iWARP devices (connect through rdma_cm only; no UD, no multicast). */
  transport: "ib" | "iwarp";
}

/** A `needs` check for tests that use what iWARP lacks (UD, multicast, QPs connected without rdma_cm). */
export function notOnIwarp(what: string): (env: DeviceEnv) => string | false {
  return (env) => env.transport === "iwarp" ? `iWARP has no ${what}` : false;
}

/**
 * The device environment, or a skip reason when there is no device to test on.
 * Device tests never hard-code a device, GID index or address.
 */
export function deviceEnv(): DeviceEnv | { skip: string } {
  const env = process.env;
  const device = env.RDMA_DEVICE;
  if (!device) {
    return {
      skip:
        "no RDMA device: set RDMA_DEVICE/RDMA_GID_INDEX/RDMA_ADDR or run `scripts/test` (uses the soft-RoCE VM)",
    };
  }
  return {
    device,
    port: Number(env.RDMA_PORT ?? 1),
    gidIndex: Number(env.RDMA_GID_INDEX ?? 0),
    address: env.RDMA_GUEST_IP ?? env.RDMA_ADDR ?? "",
    vm: env.RDMA_VM === "1",
    transport: device === env.RDMA_SIW_DEVICE || env.RDMA_TRANSPORT === "iwarp" ? "iwarp" : "ib",
  };
}

/** Registers a device test: it gets the device environment or is skipped with the reason. */
export function deviceTest(
  name: string,
  fn: (env: DeviceEnv) => void | Promise<void>,
  options: TestOptions & { needs?: (env: DeviceEnv) => string | false } = {},
): void {
  const env = deviceEnv();
  if ("skip" in env) return test(name, () => {}, { ...options, skip: env.skip });
  const reason = options.skip || options.needs?.(env) || false;
  test(name, () => fn(env), { ...options, skip: reason });
}
