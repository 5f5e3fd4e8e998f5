#!/usr/bin/env bash
# Acknowledged submissions of Tideway against a three-member etcd on the same machine, under the
# same wrk load, in back-to-back pairs so that both see the same background noise.
#   etcd: a new key per request through its JSON gateway (etcd_put.lua), value ~ a workload;
#   Tideway: a new workload per request (tw_post.lua); any answer but 201 stops the thread.
# Both are driven at their leader (a follower would forward). Needs wrk and etcd 3.4 in PATH
# (Debian: apt-get install wrk etcd-server etcd-client).
# Usage: side_by_side.sh [PAIRS=3] [SECONDS=10]; TIDEWAY_BIN defaults to target/release/tideway.
# Both clusters are started once and keep what every pair wrote: Tideway's rate falls as its state
# grows (docs/benchmarks/submissions.md), etcd's does not, so pairs after the
# first compare a fuller Tideway. etcd-baseline.sh, the shared anchor, starts a fresh etcd per run.
set -euo pipefail
pairs=${1:-3}
secs=${2:-10}
here=$(dirname "$(realpath "$0")")
bin=${TIDEWAY_BIN:-$here/../../target/release/tideway}
command -v wrk >/dev/null && command -v etcd >/dev/null || { echo "needs wrk and etcd" >&2; exit 2; }
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT

EP=${ETCD_PORT_BASE:-25790}   # clients on EP+1..3, peers on EP+11..13
CL="e1=http://127.0.0.1:$((EP + 11)),e2=http://127.0.0.1:$((EP + 12)),e3=http://127.0.0.1:$((EP + 13))"
for i in 1 2 3; do
  etcd --name e$i --data-dir "$tmp/e$i" --listen-peer-urls http://127.0.0.1:$((EP + 10 + i)) \
    --initial-advertise-peer-urls http://127.0.0.1:$((EP + 10 + i)) \
    --listen-client-urls http://127.0.0.1:$((EP + i)) --advertise-client-urls http://127.0.0.1:$((EP + i)) \
    --initial-cluster "$CL" --initial-cluster-state new --initial-cluster-token side-by-side \
    >"$tmp/e$i.log" 2>&1 &
  pids+=($!); disown
done

TP=${TIDEWAY_PORT_BASE:-27400}
"$bin" server --id 1 --listen 127.0.0.1:$((TP + 1)) --data "$tmp/t1" >"$tmp/t1.log" 2>&1 &
pids+=($!); disown
sleep 1
for i in 2 3; do
  "$bin" server --id $i --listen 127.0.0.1:$((TP + i)) --data "$tmp/t$i" \
    --join 127.0.0.1:$((TP + 1)) --auto-promote >"$tmp/t$i.log" 2>&1 &
  pids+=($!); disown
done
sleep 5

etcd_leader=""
for i in 1 2 3; do
  if etcdctl --endpoints=http://127.0.0.1:$((EP + i)) endpoint status -w fields 2>/dev/null \
    | grep -q '"Leader" : \(.*\)' ; then
    id=$(etcdctl --endpoints=http://127.0.0.1:$((EP + i)) endpoint status -w fields | sed -n 's/"MemberID" : //p')
    ld=$(etcdctl --endpoints=http://127.0.0.1:$((EP + i)) endpoint status -w fields | sed -n 's/"Leader" : //p')
    if [ "$id" = "$ld" ]; then etcd_leader=127.0.0.1:$((EP + i)); fi
  fi
done
etcd_leader=${etcd_leader:-127.0.0.1:$((EP + 1))}
tw_leader_id=$("$bin" cluster status --no-digest --addr 127.0.0.1:$((TP + 1)) -o json | sed -n 's/.*"leader": *\([0-9]*\).*/\1/p' | head -1)
tw_leader=127.0.0.1:$((TP + ${tw_leader_id:-1}))
echo "etcd leader $etcd_leader, Tideway leader $tw_leader; $pairs pairs of ${secs} s, wrk -t2 -c64"

rate() { sed -n 's/^Requests\/sec: *//p'; }
printf '%-5s %12s %12s %7s\n' pair etcd/s tideway/s ratio
for p in $(seq 1 "$pairs"); do
  e=$(wrk -t2 -c64 -d"${secs}s" -s "$here/etcd_put.lua" "http://$etcd_leader" | rate)
  t=$(wrk -t2 -c64 -d"${secs}s" -s "$here/tw_post.lua" "http://$tw_leader" | rate)
  printf '%-5s %12.0f %12.0f %7.2f\n' "$p" "$e" "$t" "$(echo "$t / $e" | bc -l)"
done
