/**
 * Fuzzing every public entry point on a real device: a seeded generator makes random calls
 * across verbs (objects, WRs with random opcodes, flags and SGE lists in and out of MR bounds,
 * QP attributes and transitions, CQ sizes), rdma_cm (ids, options, private data, addresses) and
 * the pure helpers (GIDs, socket addresses), with NaN, negative, huge, non-integer numbers and
 * wrong types among the arguments. Every call must succeed or throw one of the library's error
 * classes; a bare TypeError, a crash or a hang fails the run with its seed.
 *
 * `RDMA_FUZZ_SEED` repeats a run; `RDMA_FUZZ_CALLS` sets its length (default 10,000;
 * `bench/fuzz.ts` runs longer).
 */
import assert from "node:assert/strict";
import process from "node:process";
import { deviceTest } from "../harness.ts";
import * as rdma from "../lib.ts";
import { fuzzRun } from "./fuzz-run.ts";

const SEED = Number(process.env.RDMA_FUZZ_SEED ?? (Date.now() % 0x7fffffff));
const CALLS = Number(process.env.RDMA_FUZZ_CALLS ?? 10_000);

deviceTest(`fuzz: ${CALLS} random calls; each succeeds or throws a library error`, async (env) => {
  process.stderr.write(`fuzz: seed ${SEED} (repeat with RDMA_FUZZ_SEED=${SEED})\n`);
  const report = await fuzzRun(rdma, env, SEED, CALLS);
  process.stderr.write(
    `fuzz: seed ${SEED}: ${report.calls} calls, ${report.succeeded} succeeded, ` +
      `${report.typedErrors} typed errors (${
        Object.entries(report.byClass).map(([k, v]) => `${k} ${v}`).join(", ")
      }), ${report.promises} promises settled\n`,
  );
  assert.ok(report.calls >= CALLS, `only ${report.calls} calls ran`);
  assert.ok(report.succeeded > CALLS / 20, `only ${report.succeeded} calls succeeded`);
  assert.deepEqual(
    report.foreign,
    [],
    `seed ${SEED}: errors that are not the library's (repeat with RDMA_FUZZ_SEED=${SEED})`,
  );
}, { timeout: 900_000 });
