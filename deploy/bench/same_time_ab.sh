#!/usr/bin/env bash
# Compares two Tideway builds' submission rates *at the same time*: two fresh three-node
# clusters, one per build, each under `wrk -t1 -c64 -s tw_post.lua` at its leader for the same
# seconds, after 3 s of warm-up. Both see the same machine, so the ratio of their rates is the
# ratio of their costs; runs taken one after another on a shared 2-core machine drifted by up
# to 2x within minutes, which no ratio of separate runs survives. Each round runs the pair
# twice, each build once on either side (ports and start order), and prints B's rate over A's
# for both; the same build against itself gives 0.99-1.03. A change to how much work a node keeps
# in flight (batches, pipelining) breaks the premise: the build with more runnable work takes a
# larger share of the saturated machine, so compare such builds alone as well (per-process CPU
# and rate of one cluster at a time; docs/benchmarks/submissions.md, "Appends pipelined").
# Usage: same_time_ab.sh BIN_A BIN_B [ROUNDS=2] [SECONDS=10]
#   ENV_A / ENV_B: extra environment for that build's nodes (e.g. ENV_B=TIDEWAY_LOG=warn), so
#   one binary against itself compares a setting.
set -euo pipefail
a=${1:?BIN_A}
b=${2:?BIN_B}
rounds=${3:-2}
secs=${4:-10}
here=$(dirname "$(realpath "$0")")
command -v wrk >/dev/null || { echo "needs wrk (Debian: apt-get install wrk)" >&2; exit 2; }
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # Until they are gone: a node still dying holds its port, and the next round's node on that
  # port would fail to bind (a rate of 0 for that side).
  # (A zombie has let go of its sockets already; at most 5 s per node.)
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do
      grep -qs '^State:[[:space:]]*[^Z]' "/proc/$p/status" || break
      sleep 0.1
    done
  done
  pids=()
}
trap 'cleanup; rm -rf "$tmp"' EXIT

# start BIN ENV PORT_BASE DIR: a three-node cluster, node 1 leading.
start() {
  env ${2:-TIDEWAY_AB=1} "$1" server --id 1 --listen 127.0.0.1:$(($3 + 1)) --data "$4/1" \
    >"$4.1.log" 2>&1 &
  pids+=($!); disown
  sleep 1
  for i in 2 3; do
    env ${2:-TIDEWAY_AB=1} "$1" server --id $i --listen 127.0.0.1:$(($3 + i)) --data "$4/$i" \
      --join 127.0.0.1:$(($3 + 1)) --auto-promote >"$4.$i.log" 2>&1 &
    pids+=($!); disown
  done
}

# once FIRST_BIN FIRST_ENV SECOND_BIN SECOND_ENV: the two rates, first then second.
once() {
  rm -rf "$tmp"/*
  start "$1" "$2" 28900 "$tmp/x"
  start "$3" "$4" 28910 "$tmp/y"
  sleep 5
  wrk -t1 -c64 -d3s -s "$here/tw_post.lua" http://127.0.0.1:28901 >/dev/null &
  wrk -t1 -c64 -d3s -s "$here/tw_post.lua" http://127.0.0.1:28911 >/dev/null
  wait
  wrk -t1 -c64 -d"${secs}"s -s "$here/tw_post.lua" http://127.0.0.1:28901 >"$tmp/x.wrk" &
  wrk -t1 -c64 -d"${secs}"s -s "$here/tw_post.lua" http://127.0.0.1:28911 >"$tmp/y.wrk"
  wait
  cleanup
  echo "$(sed -n 's/^Requests\/sec: *//p' "$tmp/x.wrk") $(sed -n 's/^Requests\/sec: *//p' "$tmp/y.wrk")"
}

echo "A $a${ENV_A:+ ($ENV_A)}"
echo "B $b${ENV_B:+ ($ENV_B)}"
echo "round  side        A/s       B/s     B/A"
for r in $(seq 1 "$rounds"); do
  read -r ra rb <<<"$(once "$a" "${ENV_A:-}" "$b" "${ENV_B:-}")"
  printf "%-6s %-7s %9.0f %9.0f %7.3f\n" "$r" "A first" "$ra" "$rb" "$(awk -v x="$rb" -v y="$ra" 'BEGIN { print x / y }')"
  read -r rb ra <<<"$(once "$b" "${ENV_B:-}" "$a" "${ENV_A:-}")"
  printf "%-6s %-7s %9.0f %9.0f %7.3f\n" "$r" "B first" "$ra" "$rb" "$(awk -v x="$rb" -v y="$ra" 'BEGIN { print x / y }')"
done
