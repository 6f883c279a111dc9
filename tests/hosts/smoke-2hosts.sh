#!/usr/bin/env bash
# Smoke test of two guests joined by a link (scripts/softroce-vm --hosts 2), with
# the C tools: the peer agent (output, exit status, signals), both ports ACTIVE
# with RDMA MTU 4096, ibv_rc_pingpong and rping with the server on guest 1 and
# the client on guest 0, full-MTU frames on the link, ib_send_lat both ways,
# ibv_rc_pingpong through 10% frame loss on both guests (tc netem) and after the
# link went down and up.
#
#   scripts/softroce-vm --hosts 2 --devices both -- tests/hosts/smoke-2hosts.sh
#
# Prints "ok - / not ok - / skip - NAME" per check and
# "[subtotal smoke-2hosts] N passed / N failed / N skipped"; exits 1 if a check
# failed. Every process is bounded by `timeout` (SMOKE_TIMEOUT, default 90 s;
# iterations: SMOKE_ITERS, default 300).
set -u

PASSED=0 FAILED=0 SKIPPED=0
ok() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
not_ok() { echo "not ok - $1"; FAILED=$((FAILED + 1)); }
skip() { echo "skip - $1 ($2)"; SKIPPED=$((SKIPPED + 1)); }
note() { sed 's/^/# /'; }
finish() {
  echo "[subtotal smoke-2hosts] $PASSED passed / $FAILED failed / $SKIPPED skipped"
  [[ $FAILED -eq 0 ]]
  exit $?
}

T=${SMOKE_TIMEOUT:-90}
ITERS=${SMOKE_ITERS:-300}
HERE=$(cd "$(dirname "$0")" && pwd)
NETEM=$HERE/netem.sh
WORK=$(mktemp -d "${TMPDIR:-/tmp}/smoke-2hosts.XXXXXX")
PORT=$((18515 + RANDOM % 2000))
LAST_ACK_GRACE= # pair(): seconds a server may outlive a successful client (set per check)

cleanup() {
  "$NETEM" self clear 2>/dev/null
  "$NETEM" peer clear 2>/dev/null
  "$NETEM" peer up 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

if [[ ${RDMA_HOSTS:-} != 2 || ${RDMA_HOST_INDEX:-} != 0 || -z ${RDMA_PEER_IP:-} || ! -x ${RDMA_ON_PEER:-/nonexistent} ]]; then
  not_ok "environment (run me on guest 0 of scripts/softroce-vm --hosts 2)"
  finish
fi
ON_PEER=$RDMA_ON_PEER

# run_on self|peer SCRIPT: a bash script with the target guest's environment
run_on() {
  if [[ $1 == peer ]]; then "$ON_PEER" -- bash -c "$2"; else bash -c "$2"; fi
}

# Runs on the server's guest: starts the server (a bash script), waits until it
# listens (tcp PORT, or an rdma_cm listener on PORT bound to device DEV), then
# prints @@listening and waits for it. One job on the peer instead of a poll
# per round trip through the agent.
SERVE='kind=$1 port=$2 dev=$3 t=$4 cmd=$5
bash -c "$cmd" &
pid=$!
hex=$(printf %04X "$port")
end=$((SECONDS + t))
while [ $SECONDS -le $end ] && kill -0 $pid 2>/dev/null; do
  if [ "$kind" = tcp ]; then
    grep -q ":$hex [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && { echo @@listening; break; }
  else
    rdma res show cm_id 2>/dev/null | grep -q "^link $dev/[0-9]* .*state LISTEN.*src-addr [^ ]*:$port " && { echo @@listening; break; }
  fi
  sleep 0.05
done
wait $pid'

# stop PID: SIGTERM to a background job and to its children (the job is a subshell
# around the agent or the tool; the agent passes SIGTERM on to the peer's process)
stop() {
  pkill -TERM -P "$1" 2>/dev/null
  kill "$1" 2>/dev/null
}

# pair NAME SERVER_GUEST CLIENT_GUEST KIND DEV SERVER_SCRIPT CLIENT_SCRIPT [GREP]
# (scripts are evaluated on their guest, so $RDMA_* there are that guest's)
pair() {
  local name=$1 sg=$2 cg=$3 kind=$4 dev=$5 srv=$6 cli=$7 show=${8:-'usec/iter|bytes in'}
  local spid crc src end t0
  t0=$SECONDS
  run_on "$sg" "$(printf 'bash -c %q _ %q %q %q %q %q' "$SERVE" "$kind" "$PORT" "$dev" "$T" "timeout -k 5 $T $srv")" \
    >"$WORK/server.out" 2>&1 &
  spid=$!
  end=$((SECONDS + T))
  until grep -q '^@@listening' "$WORK/server.out" 2>/dev/null; do
    if ! kill -0 "$spid" 2>/dev/null || [[ $SECONDS -gt $end ]]; then
      stop "$spid"
      wait "$spid" 2>/dev/null
      not_ok "$name (the server on $sg did not start listening)"
      note <"$WORK/server.out"
      PORT=$((PORT + 1))
      return
    fi
    sleep 0.05
  done
  local cpid resending=
  run_on "$cg" "timeout -k 5 $T $cli" >"$WORK/client.out" 2>&1 &
  cpid=$!
  if [[ -n $LAST_ACK_GRACE ]]; then
    # Whichever side ends first with every round trip done: the other one, still running
    # after the grace, is resending its last send, whose ACK was lost after the first one
    # exited (soft-RoCE resends without end, docs/08). Exit 0 of a ping-pong side means
    # every message of both directions crossed (its sends were acknowledged, so the other
    # side received them; it received all of the other side's).
    while kill -0 "$cpid" 2>/dev/null && kill -0 "$spid" 2>/dev/null; do sleep 0.2; done
    local first=
    if ! kill -0 "$cpid" 2>/dev/null; then first=client; else first=server; fi
    if [[ $first == client ]]; then wait "$cpid"; else wait "$spid"; fi
    if [[ $? -eq 0 ]]; then
      end=$((SECONDS + LAST_ACK_GRACE))
      while kill -0 "$cpid" 2>/dev/null || kill -0 "$spid" 2>/dev/null; do
        [[ $SECONDS -ge $end ]] && break
        sleep 0.2
      done
      if [[ $first == client ]] && kill -0 "$spid" 2>/dev/null; then
        resending=server
        stop "$spid"
      elif [[ $first == server ]] && kill -0 "$cpid" 2>/dev/null; then
        resending=client
        stop "$cpid"
      fi
    fi
  fi
  wait "$cpid"
  crc=$?
  if [[ $crc -ne 0 && -z $resending ]]; then
    sleep 1
    stop "$spid"
  fi
  wait "$spid"
  src=$?
  if [[ ($crc -eq 0 || $resending == client) && ($src -eq 0 || $resending == server) ]]; then
    ok "$name ($((SECONDS - t0)) s)"
    grep -E "$show" "$WORK/$([[ $resending == client ]] && echo server || echo client).out" | note
    [[ -n $resending ]] && echo "the $resending had not exited ${LAST_ACK_GRACE} s after the other side completed every round trip and was stopped (its last send's ACK lost after the other side exited: soft-RoCE resends without end, docs/08)" | note
  else
    not_ok "$name (client exit $crc, server exit $src$([[ $crc -eq 124 || $src -eq 124 ]] && echo ', timed out'))"
    echo "client:" | note
    tail -n 15 "$WORK/client.out" | note
    echo "server:" | note
    grep -v '^@@listening' "$WORK/server.out" | tail -n 15 | note
  fi
  PORT=$((PORT + 1))
}

# ---------------------------------------------------------------- the peer agent
me=$(hostname)
out=$("$ON_PEER" -- hostname 2>&1)
if [[ -n $out && $out != "$me" ]]; then ok "agent runs commands on the peer guest ($out)"; else not_ok "agent runs commands on the peer guest (got '$out', this guest is '$me')"; fi

"$ON_PEER" -- bash -c 'echo to-out; echo to-err >&2; exit 3' >"$WORK/o" 2>"$WORK/e"
rc=$?
if [[ $rc == 3 && $(<"$WORK/o") == to-out && $(<"$WORK/e") == to-err ]]; then
  ok "agent returns stdout, stderr and the exit status separately"
else
  not_ok "agent returns stdout, stderr and the exit status separately (rc $rc)"
  note <"$WORK/o"
  note <"$WORK/e"
fi

t0=$SECONDS
"$ON_PEER" -- sleep 600 &
spid=$!
sleep 1
kill -TERM "$spid"
wait "$spid"
rc=$?
if [[ $rc == 143 && $((SECONDS - t0)) -lt 20 ]]; then ok "agent passes SIGTERM on (exit 143)"; else not_ok "agent passes SIGTERM on (exit $rc after $((SECONDS - t0)) s)"; fi

"$ON_PEER" -e SMOKE_VAR=from-a -C / -- bash -c 'echo "$SMOKE_VAR $PWD $RDMA_HOST_INDEX $RDMA_GUEST_IP"' >"$WORK/o" 2>&1
if [[ $(<"$WORK/o") == "from-a / 1 $RDMA_PEER_IP" ]]; then ok "agent applies env and cwd; the peer has its own RDMA_* environment"; else not_ok "agent env/cwd (got '$(<"$WORK/o")')"; fi

# ---------------------------------------------------------------- link and devices
for g in self peer; do
  out=$(run_on "$g" 'ip -o link show dev "$RDMA_NETDEV"; for d in $RDMA_DEVICES; do ibv_devinfo -d $d; done' 2>&1)
  mtu=$(grep -o 'mtu [0-9]*' <<<"$out" | head -1 | cut -d' ' -f2)
  if grep -q PORT_ACTIVE <<<"$out" && [[ $(grep -c PORT_ACTIVE <<<"$out") == $(wc -w <<<"$RDMA_DEVICES") ]]; then
    ok "$g: every device PORT_ACTIVE, link MTU $mtu, $(grep -m1 -o 'active_mtu:.*' <<<"$out" | tr -s '\t ' ' ')"
  else
    not_ok "$g: devices PORT_ACTIVE"
    note <<<"$out"
  fi
done

# full-size frames: an ICMP echo of 8972 bytes is a 9000-byte IP packet, one
# frame at MTU 9000 (busybox-static's ping; the VM harness needs that package)
mtu=$(cat "/sys/class/net/$RDMA_NETDEV/mtu")
if ! command -v busybox >/dev/null 2>&1; then
  skip "frames of the full MTU cross the link" "no busybox"
elif out=$(timeout 30 busybox ping -c 3 -W 5 -s $((mtu - 28)) "$RDMA_PEER_IP" 2>&1); then
  ok "frames of the full MTU ($mtu bytes) cross the link: $(grep -o '[0-9]* packets received' <<<"$out")"
else
  not_ok "frames of the full MTU ($mtu bytes) cross the link"
  note <<<"$out"
fi

if [[ -z ${RDMA_RXE_DEVICE:-} ]]; then
  skip "ibv_rc_pingpong, ib_send_lat, netem" "no rxe device (iWARP connects only through rdma_cm)"
else
  RC="ibv_rc_pingpong -d \$RDMA_RXE_DEVICE -g \$RDMA_GID_INDEX -m 4096"
  # ---------------------------------------------------------------- RC ping-pong across the link
  pair "ibv_rc_pingpong, server on the peer, RDMA MTU 4096" peer self tcp - \
    "$RC -n $ITERS -p $PORT" "$RC -n $ITERS -p $PORT $RDMA_PEER_IP"
  pair "ibv_rc_pingpong -e (events), server on the peer" peer self tcp - \
    "$RC -e -n $ITERS -p $PORT" "$RC -e -n $ITERS -p $PORT $RDMA_PEER_IP"
  pair "ibv_rc_pingpong 64 KiB messages (16 frames of 4096 each)" peer self tcp - \
    "$RC -s 65536 -n 50 -p $PORT" "$RC -s 65536 -n 50 -p $PORT $RDMA_PEER_IP"

  # ---------------------------------------------------------------- perftest both ways
  LAT="ib_send_lat -d \$RDMA_RXE_DEVICE -x \$RDMA_GID_INDEX -F -n 1000"
  pair "ib_send_lat, server on the peer" peer self tcp - \
    "$LAT -p $PORT" "$LAT -p $PORT $RDMA_PEER_IP" '^ *[0-9]+ +[0-9]+ '
  pair "ib_send_lat, server on this guest" self peer tcp - \
    "$LAT -p $PORT" "$LAT -p $PORT $RDMA_GUEST_IP" '^ *[0-9]+ +[0-9]+ '

  # ---------------------------------------------------------------- faults
  if "$NETEM" self loss 10% && "$NETEM" peer loss 10%; then
    LAST_ACK_GRACE=10 pair "ibv_rc_pingpong through 10% frame loss each way (tc netem)" peer self tcp - \
      "$RC -n 200 -p $PORT" "$RC -n 200 -p $PORT $RDMA_PEER_IP"
  else
    not_ok "tc netem loss 10% on both guests"
  fi
  "$NETEM" self clear
  "$NETEM" peer clear

  # link down: the peer's port leaves ACTIVE; up: it comes back and RC works again
  if "$NETEM" peer down; then
    out=$("$ON_PEER" -- bash -c 'sleep 0.5; cat /sys/class/infiniband/$RDMA_RXE_DEVICE/ports/1/state' 2>&1)
    "$NETEM" peer up
    back=$("$ON_PEER" -- bash -c 'for i in $(seq 200); do grep -q ACTIVE /sys/class/infiniband/$RDMA_RXE_DEVICE/ports/1/state && break; sleep 0.05; done; cat /sys/class/infiniband/$RDMA_RXE_DEVICE/ports/1/state' 2>&1)
    if [[ $out == *DOWN* && $back == *ACTIVE* ]]; then
      ok "peer link down: port '$out'; up again: '$back'"
      pair "ibv_rc_pingpong after the link came back" peer self tcp - \
        "$RC -n 100 -p $PORT" "$RC -n 100 -p $PORT $RDMA_PEER_IP"
    else
      not_ok "peer link down/up (port state '$out', then '$back')"
    fi
  else
    not_ok "ip link set down on the peer"
  fi
fi

# ---------------------------------------------------------------- rping over rdma_cm, every device
for dev in ${RDMA_DEVICES:-}; do
  if [[ $dev == "${RDMA_SIW_DEVICE:-}" ]]; then
    addr=${RDMA_PEER_SIW_IP:-}
  else
    addr=$RDMA_PEER_IP
  fi
  pair "rping $dev, server on the peer ($addr)" peer self cm "$dev" \
    "rping -s -a $addr -p $PORT -C 5 -v" "rping -c -a $addr -p $PORT -C 5 -v" 'ping data: rdma-ping-4'
done

finish
