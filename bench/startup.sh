#!/usr/bin/env bash
# Start-up: the time from process start until an rdma_cm id listens (`rdma res show cm_id`
# shows it), for C `rping -s` and for examples/rping.ts in Deno and in Bun, in interleaved
# rounds, beside each runtime's bare start (`deno eval 1`, `bun -e 1`, start to exit); prints the
# medians (min–max), the ratios to C and what the library and the tool take above the bare
# runtime as a markdown table. Deno's first round runs with an empty module cache in $TMPDIR (what
# a first `deno run` pays). In the guest the project and the default DENO_DIR are the host's, read
# over 9p, which a machine's own disk does not cost: the "in memory" columns run a copy of the
# package in $TMPDIR (guest memory) with that module cache there, warm.
#
#   bench/startup.sh [ROUNDS]          (on a machine with an RDMA device, e.g. in the guest)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
rounds=${1:-3}
ip=${RDMA_GUEST_IP:-${RDMA_ADDR:-127.0.0.1}}
port=$((7200 + RANDOM % 500))
cold=$(mktemp -d)
mem=$(mktemp -d)
trap 'rm -rf "$cold" "$mem"' EXIT
# the package's published files and its tools, copied into memory
cp -r mod.ts verbs.ts cm.ts deno.json types ffi verbs cm poller stream net examples "$mem/"

listening() { rdma res show cm_id 2>/dev/null | grep -q " state LISTEN .*:$port "; }

# measure CMD... : seconds until the listener shows (60 s at most), then the process is stopped.
# One `rdma` process answers every poll (its batch mode, reading commands from a pipe) and the
# loop sleeps in `read -t`: starting an `rdma` and a `sleep` per 10 ms poll took a vCPU's worth
# of exec work in the guest, which slowed the process being timed (a Deno rping reached its first
# module about 0.5-1.4 s later while polled that way than unpolled).
measure() {
  local t0 t1 pid line found=
  coproc WATCH { stdbuf -oL rdma -f -b - 2>/dev/null; }
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 6000); do
    echo "res show cm_id" >&"${WATCH[1]}"
    # the answer's lines, then the poll interval as the read's time-out
    while read -r -t 0.01 -u "${WATCH[0]}" line; do
      [[ $line == *" state LISTEN "*":$port "* ]] && found=1 && break
    done
    [ -n "$found" ] && break
    kill -0 "$pid" 2>/dev/null || break
  done
  t1=$(date +%s%N)
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  eval "exec ${WATCH[1]}>&- ${WATCH[0]}<&-"
  wait "$WATCH_PID" 2>/dev/null
  while listening; do sleep 0.05; done
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}

# bare CMD... : seconds from start to exit
bare() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}

declare -A times
for r in $(seq "$rounds"); do
  times[C]+="$(measure rping -s -a "$ip" -p "$port" -C 1) "
  if [ "$r" = 1 ]; then
    times[Deno-cold]="$(DENO_DIR=$cold measure deno run --allow-all "$mem/examples/rping.ts" -s -a "$ip" -p "$port" -C 1)"
  fi
  times[Deno]+="$(measure deno run --allow-all examples/rping.ts -s -a "$ip" -p "$port" -C 1) "
  times[Deno-mem]+="$(DENO_DIR=$cold measure deno run --allow-all "$mem/examples/rping.ts" -s -a "$ip" -p "$port" -C 1) "
  times[Bun]+="$(measure bun examples/rping.ts -s -a "$ip" -p "$port" -C 1) "
  times[Bun-mem]+="$(measure bun "$mem/examples/rping.ts" -s -a "$ip" -p "$port" -C 1) "
  times[deno-bare]+="$(bare deno eval 1) "
  times[bun-bare]+="$(bare bun -e 1) "
done

# stats "v1 v2 …" → "median (min–max)"
stats() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f s (%.2f–%.2f)", m, a[1], a[NR] }'; }
median() { stats "$1" | cut -d' ' -f1; }
c=$(median "${times[C]}")
echo "| start until listening ($rounds rounds) | C | Deno | Deno, in memory | Bun | Bun, in memory |"
echo "|---|---|---|---|---|---|"
echo "| rping -s | $(stats "${times[C]}") | $(stats "${times[Deno]}") |" \
  "$(stats "${times[Deno-mem]}") | $(stats "${times[Bun]}") | $(stats "${times[Bun-mem]}") |"
echo "| bare runtime (start to exit) | | $(stats "${times[deno-bare]}") | | $(stats "${times[bun-bare]}") | |"
ratio() { awk -v a="$1" -v b="$c" 'BEGIN { printf "%.2f×", a / b }'; }
above() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f s", a - b }'; }
db=$(median "${times[deno-bare]}")
bb=$(median "${times[bun-bare]}")
echo
echo "Above the bare runtime (medians): Deno $(above "$(median "${times[Deno]}")" "$db")," \
  "in memory $(above "$(median "${times[Deno-mem]}")" "$db");" \
  "Bun $(above "$(median "${times[Bun]}")" "$bb"), in memory $(above "$(median "${times[Bun-mem]}")" "$bb")."
echo "Against C: Deno $(ratio "$(median "${times[Deno]}")") (in memory $(ratio "$(median "${times[Deno-mem]}")")), " \
  "Bun $(ratio "$(median "${times[Bun]}")") (in memory $(ratio "$(median "${times[Bun-mem]}")"))."
echo "Deno with an empty module cache (first run, in memory): ${times[Deno-cold]} s."
