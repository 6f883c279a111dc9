#!/usr/bin/env bash
# Who runs while a ping-pong pair is in its steady state: C against Deno and Bun, every thread
# of the machine. Each pair (send_lat: C ib_send_lat and ours; 64 B streams: C rstream, ours
# spinning, ours by default) runs for WARM seconds, then every thread's CPU ticks (1/100 s, user
# and system) and context switches (voluntary: it slept; involuntary: it was preempted) are read
# from /proc before and after a WINDOW-second window, and the pair is stopped. This prints a
# markdown table: per process of the pair, its main thread and its other threads; then the rest
# of the machine (kernel threads, the shell) and the machine's idle ticks; beside them the packets
# rxe sent in the window (both directions of the pair: the rate of the ping-pong).
#
#   bench/steady-threads.sh [WARM] [WINDOW]    (default 25 and 10; where there is an RDMA device)
#
# bench/doorbell.sh counts a process's context switches with getrusage (all its threads) over
# the last 40 % of a fixed number of round trips, which in the emulated guest still holds part of
# the engines' warm-up; this reads them per thread, after a warm-up measured in seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/pairs.sh
source bench/pairs.sh
export PATH="$PWD/node_modules/.bin:$PATH" LC_ALL=C
warm=${1:-25}
window=${2:-10}
ip=${RDMA_GUEST_IP:-${RDMA_ADDR:-127.0.0.1}}
dev=${RDMA_DEVICE:-rxe0}
gid=${RDMA_GID_INDEX:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$((7900 + RANDOM % 300))

# snap NAME: "pid/tid comm utime stime voluntary involuntary" for every thread, sorted
snap() {
  grep -H ctxt_switches /proc/[0-9]*/task/*/status 2>/dev/null |
    awk -F'[:\t ]+' '{ split($1, p, "/"); k = p[3] "/" p[5]
      if ($2 == "voluntary_ctxt_switches") v[k] = $3; else i[k] = $3 }
      END { for (k in v) print k, v[k], i[k] }' | sort >"$tmp/ctx"
  local f l
  for f in /proc/[0-9]*/task/*/stat; do
    read -r l <"$f" 2>/dev/null && echo "$f $l"
  done 2>/dev/null | awk '{ split($1, p, "/"); k = p[3] "/" p[5]; s = $0
      sub(/^[^(]*\(/, "", s); c = s; sub(/\).*/, "", c); gsub(/ /, "_", c)
      sub(/^[^)]*\) /, "", s); split(s, f, " "); print k, c, f[12], f[13] }' | sort >"$tmp/st"
  join "$tmp/st" "$tmp/ctx" >"$tmp/$1"
}
idle() { awk '$1 == "cpu" { print $5 }' /proc/stat; }
pkts() { cat "/sys/class/infiniband/$dev/ports/1/hw_counters/sent_pkts" 2>/dev/null || echo 0; }

# the window's row for a pair whose processes are SERVER and CLIENT
row() {
  local label=$1 server=$2 client=$3 i0 i1 k0 k1
  i0=$(idle) k0=$(pkts)
  snap a
  sleep "$window"
  snap b
  i1=$(idle) k1=$(pkts)
  join "$tmp/a" "$tmp/b" | awk -v s="$server" -v c="$client" -v label="$label" -v idle=$((i1 - i0)) -v pk=$((k1 - k0)) '
    { split($1, p, "/"); u = $8 - $3; y = $9 - $4; v = $10 - $5; n = $11 - $6
      who = p[1] == s ? "s" : p[1] == c ? "c" : "o"
      if (who != "o" && p[1] == p[2]) { mu[who] = u; my[who] = y; mn[who] = n; mv[who] = v }
      else if (who != "o") { tu[who] += u + y; tv[who] += v; tn[who] += n }
      else if (u + y > 0 || v > 0) { ou += u + y; ov += v; if (u + y > top) { top = u + y; tname = $2 } } }
    END { printf "| %s | %d | %d / %d | %d / %d | %d / %d | %d / %d | %d / %d | %d / %d | %d, %d (%s %d) | %d |\n",
      label, pk, mu["s"], my["s"], mu["c"], my["c"], mn["s"], mn["c"], mv["s"], mv["c"],
      tu["s"], tu["c"], tn["s"] + tv["s"], tn["c"] + tv["c"], ou, ov, tname, top, idle }'
}

# pair LABEL SERVER-ARGV... -- CLIENT-ARGV... (the server must listen on $port)
pair() {
  local label=$1; shift
  local server=() client=() s c i
  while [ "$1" != "--" ]; do server+=("$1"); shift; done; shift; client=("$@")
  "${server[@]}" >"$tmp/out.s" 2>&1 &
  s=$!
  for i in $(seq 300); do listening "$port" && break; sleep 0.1; done
  sleep 1
  "${client[@]}" >"$tmp/out.c" 2>&1 &
  c=$!
  sleep "$warm"
  if kill -0 "$s" 2>/dev/null && kill -0 "$c" 2>/dev/null; then
    row "$label" "$s" "$c"
  else
    echo "| $label | ended before the window: $(tail -c 300 "$tmp/out.c" | tr '\n|' '  ') |"
  fi
  kill "$c" "$s" 2>/dev/null
  wait "$c" "$s" 2>/dev/null
  port=$((port + 1))
}

echo "$warm s into each pair, a $window s window; ticks are 1/100 s of CPU, user / system."
echo
echo "| pair, 64 B | packets sent (rxe) | server main thread, ticks | client main thread, ticks | main threads preempted (server / client) | main threads slept | the processes' other threads, ticks | their switches | the rest of the machine: ticks, wake-ups (busiest) | idle ticks |"
echo "|---|---|---|---|---|---|---|---|---|---|"
long=$((warm + window + 60))
for impl in C Deno Bun; do
  # shellcheck disable=SC2046
  pair "send_lat, $impl" $(pt send_lat "$impl") -d "$dev" -x "$gid" -F -s 64 -D "$long" -p "$port" -R \
    -- $(pt send_lat "$impl") -d "$dev" -x "$gid" -F -s 64 -D "$long" -p "$port" -R "$ip"
done
for impl in C Deno Bun; do
  for mode in spin default; do
    [ "$impl" = C ] && [ "$mode" = default ] && continue
    t=()
    [ "$mode" = default ] && t=(-T b)
    # shellcheck disable=SC2046
    pair "stream, $impl, $mode" $(rs "$impl") "${t[@]}" -b "$ip" -p "$port" -S 64 -C 1 -I 10000000 \
      -- $(rs "$impl") "${t[@]}" -s "$ip" -p "$port" -S 64 -C 1 -I 10000000
  done
done
