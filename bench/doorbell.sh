#!/usr/bin/env bash
# The soft-RoCE doorbell, C against Deno and Bun: rxe's post_send rings the kernel with a write()
# on the uverbs fd, and the kernel runs the whole send inline (packet, loopback, the responder,
# the ACK), so that one syscall is most of a small message's latency. bench/c/doorbell.c, loaded
# with LD_PRELOAD, times every such write in each process of a send_lat pair (C ib_send_lat,
# ours in Deno and in Bun) and of a 64 B stream ping-pong (C rstream, ours); this prints the
# medians (µs, both sides of a pair), the time spent in doorbells and each process's CPU time
# as a markdown table. The same kernel path costs what the calling process makes it cost:
# compare the rows, not the absolute figures.
#
#   bench/doorbell.sh [ITERS]          (on a machine with an RDMA device, e.g. in the guest)
#
# ITERS (default 100,000) round trips per pair, of which the last 40 % are measured (doorbell.c's
# DOORBELL_FROM): ours start cold, and in the emulated guest the engines' warm-up takes tens of
# thousands of round trips, whose compilers make the doorbells look dearer and preempt the
# process more often than at steady state (bench/results/2026-11-30-doorbell.md,
# bench/results/2026-12-02-faster-guest.md).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/pairs.sh
source bench/pairs.sh
export PATH="$PWD/node_modules/.bin:$PATH"
iters=${1:-100000}
export DOORBELL_FROM=$((iters * 6 / 10))
ip=${RDMA_GUEST_IP:-${RDMA_ADDR:-127.0.0.1}}
dev=${RDMA_DEVICE:-rxe0}
gid=${RDMA_GID_INDEX:-1}
lib=$(mktemp -d)/doorbell.so
trap 'rm -rf "$(dirname "$lib")"' EXIT
cc -shared -fPIC -O2 -o "$lib" bench/c/doorbell.c -ldl -lm || exit 1
port=$((7600 + RANDOM % 300))

# from both processes' last "doorbell" lines: the medians "p50a / p50b", the total ms in
# doorbells, the process's CPU ms, and its involuntary context switches (it was preempted)
medians() {
  awk '$1 == "doorbell" { m[$2] = $5; cs[$2] = $9; t[$2] = sprintf("%.0f", $10 / 1000); cpu[$2] = $11 }
    END { for (p in m) { a = a (a ? " / " : "") m[p]; b = b (b ? " / " : "") t[p]; c = c (c ? " / " : "") cpu[p]; d = d (d ? " / " : "") cs[p] }
      print a " | " b " | " c " | " d }' "$1"
}

# pair LABEL SERVER-ARGV... -- CLIENT-ARGV...
pair() {
  local label=$1; shift
  local server=() client=() out; out=$(mktemp)
  while [ "$1" != "--" ]; do server+=("$1"); shift; done; shift; client=("$@")
  LD_PRELOAD=$lib "${server[@]}" >/dev/null 2>>"$out" &
  local pid=$! i
  for i in $(seq 300); do listening "$port" && break; sleep 0.1; done
  sleep 1
  LD_PRELOAD=$lib "${client[@]}" >/dev/null 2>>"$out"
  wait "$pid"
  printf '| %s | %s |\n' "$label" "$(medians "$out")"
  rm -f "$out"
  port=$((port + 1))
}

echo "| the last 40 % of $iters round trips, 64 B | doorbell median µs (each side) | in doorbells, ms | process CPU, ms | involuntary context switches |"
echo "|---|---|---|---|---|"
for impl in C Deno Bun; do
  # shellcheck disable=SC2046
  pair "send_lat, $impl" $(pt send_lat $impl) -d "$dev" -x "$gid" -F -n "$iters" -p "$port" -R \
    -- $(pt send_lat $impl) -d "$dev" -x "$gid" -F -n "$iters" -p "$port" -R "$ip"
done
for impl in C Deno Bun; do
  label="stream, ours ($impl)"
  [ "$impl" = C ] && label="stream, C rstream"
  # shellcheck disable=SC2046
  pair "$label" $(rs "$impl") -b "$ip" -p "$port" -S 64 -C 1 -I "$iters" \
    -- $(rs "$impl") -s "$ip" -p "$port" -S 64 -C 1 -I "$iters"
done
