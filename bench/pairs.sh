# shellcheck shell=bash
# What the bench scripts that run C and our tools in pairs share (bench/doorbell.sh,
# bench/steady-threads.sh): source it from the repository's root.

# listening PORT: whether an rdma_cm id listens on PORT
listening() { rdma res show cm_id 2>/dev/null | grep -q " state LISTEN .*:$1 "; }

# pt TOOL IMPL: the command line of perftest's TOOL (send_lat, ...) in C, Deno or Bun
pt() {
  case $2 in
    C) echo "ib_$1" ;;
    Deno) echo "deno run -A bench/perftest/$1.ts" ;;
    Bun) echo "bun bench/perftest/$1.ts" ;;
  esac
}

# rs IMPL: the command line of rstream in C, Deno or Bun
rs() {
  case $1 in
    C) echo "rstream" ;;
    Deno) echo "deno run -A examples/rstream.ts" ;;
    Bun) echo "bun examples/rstream.ts" ;;
  esac
}
