#!/usr/bin/env bash
# Network faults on a guest of a two-guest run (scripts/softroce-vm --hosts 2):
# tc netem (loss, delay, reordering) and link down/up on that guest's RDMA netdev.
#
#   tests/hosts/netem.sh self|peer ACTION [ARG...]
#     self   this guest;  peer   the other guest (through its peer agent)
#   ACTION:
#     loss PCT              drop PCT% of the frames it sends, e.g. loss 10%
#     delay MS [JITTER_MS]  delay every frame it sends
#     reorder PCT MS        send PCT% at once and delay the rest by MS (reorders)
#     netem ARG...          any other `tc qdisc replace ... root netem ARG...`
#     clear                 remove the netem qdisc (back to the default)
#     down | up             ip link set dev NETDEV down / up
#     show                  the qdisc and the link state
#   options (before ACTION): --dev NETDEV (default: $RDMA_NETDEV, else eth0)
#
# netem shapes what a guest sends, so "peer loss 10%" loses frames from the
# peer to this guest. The guest kernel loads sch_netem (softroce-vm puts it in
# the initramfs); tc and ip are the host's iproute2, shared with the guests.
set -euo pipefail

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
where=$1
shift
dev=${RDMA_NETDEV:-eth0}
if [[ $1 == --dev ]]; then
  dev=$2
  shift 2
fi
[[ $# -ge 1 ]] || usage

case $where in
  self) ;;
  peer)
    # the same script on the other guest, which shares this working directory
    [[ -n ${RDMA_ON_PEER:-} ]] || {
      echo "netem.sh: no peer guest (run under scripts/softroce-vm --hosts 2, on guest 0)" >&2
      exit 2
    }
    exec "$RDMA_ON_PEER" -- "$(cd "$(dirname "$0")" && pwd)/netem.sh" self --dev "$dev" "$@"
    ;;
  *) usage ;;
esac

# tc and ip live in /usr/sbin or /sbin, which a non-root PATH may lack
tool() {
  local t
  t=$(PATH=$PATH:/usr/sbin:/sbin command -v "$1") || {
    echo "netem.sh: '$1' not found (Debian package iproute2)" >&2
    exit 127
  }
  echo "$t"
}
TC=$(tool tc)
IP=$(tool ip)

action=$1
shift
case $action in
  loss) "$TC" qdisc replace dev "$dev" root netem loss "${1:?loss PCT}" ;;
  delay) "$TC" qdisc replace dev "$dev" root netem delay "${1:?delay MS}ms" ${2:+"${2}ms"} ;;
  reorder)
    # netem reorders by delaying all frames except PCT% that go out at once
    "$TC" qdisc replace dev "$dev" root netem delay "${2:?reorder PCT MS}ms" reorder "${1%\%}%" 50%
    ;;
  netem) "$TC" qdisc replace dev "$dev" root netem "$@" ;;
  clear) "$TC" qdisc del dev "$dev" root 2>/dev/null || true ;;
  down) "$IP" link set dev "$dev" down ;;
  up) "$IP" link set dev "$dev" up ;;
  show)
    "$TC" qdisc show dev "$dev"
    "$IP" -br link show dev "$dev"
    ;;
  *) usage ;;
esac
