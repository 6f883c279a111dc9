#!/usr/bin/env bash
# Smoke test of the guest's RDMA stack with the C tools (rdma-core, rdmacm-utils).
# Runs inside the soft-RoCE VM:
#   scripts/softroce-vm --devices both -- tests/vm/smoke-c.sh
# Prints one "ok - / not ok - / skip - NAME" line per check and a summary line;
# exits 1 if any check failed. Every server/client pair is bounded by a timeout.
set -u

PASSED=0 FAILED=0 SKIPPED=0
ok() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
not_ok() { echo "not ok - $1"; FAILED=$((FAILED + 1)); }
skip() { echo "skip - $1 ($2)"; SKIPPED=$((SKIPPED + 1)); }
note() { sed 's/^/# /'; }

T=${SMOKE_TIMEOUT:-60}    # seconds per server/client process
ITERS=${SMOKE_ITERS:-300} # rc_pingpong iterations
IP=${RDMA_GUEST_IP:-}
GID=${RDMA_GID_INDEX:-1}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/smoke-c.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PORT=$((18515 + RANDOM % 2000))
CM_DEV=

finish() {
  echo "[subtotal smoke-c] $PASSED passed / $FAILED failed / $SKIPPED skipped"
  [[ $FAILED -eq 0 ]]
  exit $?
}

if [[ -z ${RDMA_VM:-} || -z $IP ]]; then
  not_ok "environment (RDMA_VM/RDMA_GUEST_IP unset: run me through scripts/softroce-vm)"
  finish
fi
for tool in ibv_devinfo ibv_rc_pingpong rping timeout; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    not_ok "tool $tool (not installed)"
  fi
done
[[ $FAILED -eq 0 ]] || finish
if [[ -z ${RDMA_DEVICES:-} ]]; then
  skip "all checks" "RDMA_DEVICES is empty"
  finish
fi

# wait_tcp_listen PORT PID: a TCP listener on PORT (ibv_rc_pingpong's out-of-band channel)
wait_tcp_listen() {
  local hex end=$((SECONDS + T))
  hex=$(printf '%04X' "$1")
  while [[ $SECONDS -le $end ]]; do
    grep -q ":$hex [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# wait_cm_listen PORT PID: an rdma_cm listener on PORT bound to device $CM_DEV
# (rping server); proves which device rdma_cm picked for the address
wait_cm_listen() {
  local end=$((SECONDS + T)) start=$SECONDS
  while [[ $SECONDS -le $end ]]; do
    if command -v rdma >/dev/null 2>&1; then
      rdma res show cm_id 2>/dev/null | grep -q "^link $CM_DEV/[0-9]* .*state LISTEN.*src-addr [^ ]*:$1 " && return 0
    elif [[ $SECONDS -ge $((start + 2)) ]]; then
      return 0 # no rdma tool: give the server two seconds
    fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# pair NAME WAITFN "server cmd..." "client cmd..." (commands are word-split)
pair() {
  local name=$1 waitfn=$2 srv=$3 cli=$4 spid src crc
  # shellcheck disable=SC2086
  timeout -k 5 "$T" $srv >"$WORK/server.out" 2>&1 &
  spid=$!
  if ! "$waitfn" "$PORT" "$spid"; then
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    not_ok "$name (server did not start listening${CM_DEV:+ on $CM_DEV})"
    [[ -n ${CM_DEV:-} ]] && command -v rdma >/dev/null 2>&1 && rdma res show cm_id 2>&1 | note
    note <"$WORK/server.out"
    return
  fi
  # shellcheck disable=SC2086
  timeout -k 5 "$T" $cli >"$WORK/client.out" 2>&1
  crc=$?
  if [[ $crc -ne 0 ]]; then
    sleep 1
    kill "$spid" 2>/dev/null
  fi
  wait "$spid"
  src=$?
  if [[ $crc -eq 0 && $src -eq 0 ]]; then
    ok "$name"
    grep -E 'usec/iter|bytes in' "$WORK/client.out" | note
  else
    not_ok "$name (client exit $crc, server exit $src$([[ $crc -eq 124 || $src -eq 124 ]] && echo ', timed out'))"
    echo "client:" | note
    tail -n 15 "$WORK/client.out" | note
    echo "server:" | note
    tail -n 15 "$WORK/server.out" | note
  fi
  PORT=$((PORT + 1))
}

# 1. every device has an active port
for dev in $RDMA_DEVICES; do
  if out=$(timeout 20 ibv_devinfo -d "$dev" 2>&1) && grep -q 'PORT_ACTIVE' <<<"$out"; then
    ok "ibv_devinfo $dev PORT_ACTIVE"
  else
    not_ok "ibv_devinfo $dev PORT_ACTIVE"
    note <<<"$out"
  fi
done

# 2. RC ping-pong over verbs (RoCE only; the out-of-band exchange runs over TCP)
for dev in $RDMA_DEVICES; do
  if [[ $dev == "${RDMA_SIW_DEVICE:-}" ]]; then
    skip "ibv_rc_pingpong $dev" "iWARP connects only through rdma_cm; ibv_rc_pingpong sets up QPs with raw verbs"
    skip "ibv_rc_pingpong -e $dev" "iWARP connects only through rdma_cm; ibv_rc_pingpong sets up QPs with raw verbs"
    continue
  fi
  for ev in "" "-e"; do
    args="-d $dev -i ${RDMA_PORT:-1} -g $GID -n $ITERS $ev"
    pair "ibv_rc_pingpong${ev:+ $ev} $dev" wait_tcp_listen \
      "ibv_rc_pingpong $args -p $PORT" "ibv_rc_pingpong $args -p $PORT $IP"
  done
done

# 3. rping over rdma_cm (RoCE and iWARP). rdma_cm picks the device from the
# address (siw has its own, RDMA_SIW_IP); the listener's device is checked.
for dev in $RDMA_DEVICES; do
  addr=$IP
  [[ $dev == "${RDMA_SIW_DEVICE:-}" ]] && addr=${RDMA_SIW_IP:-$IP}
  CM_DEV=$dev
  pair "rping $dev" wait_cm_listen \
    "rping -s -a $addr -p $PORT -C 5 -v" "rping -c -a $addr -p $PORT -C 5 -v"
  CM_DEV=
done

finish
