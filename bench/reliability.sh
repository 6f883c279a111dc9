#!/usr/bin/env bash
# The reliability suites at their full counts, which CI runs smaller: 1,000,000 messages over 64
# RC QPs sharing one CQ, 100,000 fuzzed calls, 1,000 soak cycles (one guest), the stream suite on
# rxe and soft-iWARP (10,000 writes, 1,000 cycles, rstream's whole sweep), every perftest pair,
# and 100,000 sequence-numbered messages per lossy wire (two guests). Both runtimes. Each test prints its
# figures; this script keeps the lines that carry them and the runner's summary.
#
#   bench/reliability.sh [--one-host | --two-hosts]     (default: both)
#
# Environment: RDMA_FUZZ_SEED fixes the fuzz seed (printed either way).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${RDMA_SKIP_SETUP:-}" = 1 ] || scripts/setup
export PATH="$PWD/node_modules/.bin:$PATH" NO_COLOR=1

which=${1:-both}
figures='fault|fuzz|soak|seed|stream|passed|failed| pass$| fail$'

inside() { # the suites in this guest, in both runtimes
  local files=("$@") rt
  for rt in deno bun; do
    echo "=== $rt: ${files[*]}"
    if [ "$rt" = deno ]; then
      deno test -P --v8-flags=--expose-gc "${files[@]}" 2>&1 | grep -E "$figures" || true
    else
      bun test --timeout 3600000 "${files[@]/#/./}" 2>&1 | grep -E "$figures" || true
    fi
  done
}

if [ "${RDMA_RELIABILITY_INSIDE:-}" = 1 ]; then
  inside "$@"
  exit 0
fi

env=(--env RDMA_RELIABILITY_INSIDE=1 --env RDMA_FAULT_MESSAGES=1000000 --env RDMA_FUZZ_CALLS=100000
  --env RDMA_SOAK_CYCLES=1000 --env RDMA_FAULT_LOSS_MESSAGES=100000 --env RDMA_FAULT_DREQ_GIVEUP=1 --env RDMA_STREAM_FULL=1
  --env RDMA_INTEROP_FULL=1 --env RDMA_TEST_TIMEOUT_MS=3600000)
[ -n "${RDMA_FUZZ_SEED:-}" ] && env+=(--env "RDMA_FUZZ_SEED=$RDMA_FUZZ_SEED")

if [ "$which" != --two-hosts ]; then
  scripts/softroce-vm --devices rxe --timeout 7200 "${env[@]}" -- bench/reliability.sh \
    tests/device/fault-local.test.ts tests/device/fuzz.test.ts tests/device/fault-soak.test.ts \
    tests/device/stream.test.ts tests/device/perftest.test.ts
  scripts/softroce-vm --devices siw --timeout 7200 "${env[@]}" -- bench/reliability.sh \
    tests/device/stream.test.ts tests/device/perftest.test.ts
fi
if [ "$which" != --one-host ]; then
  scripts/softroce-vm --devices rxe --hosts 2 --timeout 7200 "${env[@]}" -- bench/reliability.sh \
    tests/device/fault-wire.test.ts
fi
