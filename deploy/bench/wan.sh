#!/usr/bin/env bash
# Tideway and a three-member etcd with every node's peer plane behind a delaying TCP proxy
# (`tideway-testkit wan-proxy`), so that any two nodes are RTT_MS apart, on one machine.
# For each round trip given: leader changes over an idle and a loaded stretch, acknowledged
# writes/s and latency at the leader under wrk, and the time from kill -9 of the leader to the
# first acknowledged write at a survivor. Only 127.0.0.0/8 is used.
#
# Usage: wan.sh RTT_MS... (e.g. wan.sh 0 10 50 150)
# Env:   TW_LUA, ETCD_LUA  wrk scripts (tw_post.lua, etcd_put.lua; not in this repository)
#        TIDEWAY_BIN, TESTKIT_BIN  (default target/release/tideway, target/release/tideway-testkit)
#        CONNS=64 IDLE=60 LOADED=60  wrk connections, idle and loaded seconds
#        TW_FLAGS  extra `tideway server` flags (e.g. "--network wan")
#        ONLY=tideway|etcd  run one side only; KEEP=1 keeps the logs and wrk output
# Needs wrk and etcd 3.4 (Debian: apt-get install wrk etcd-server etcd-client) and curl.
set -uo pipefail
[ $# -ge 1 ] || { sed -n 2,15p "$0"; exit 2; }
here=$(dirname "$(realpath "$0")")
tw=${TIDEWAY_BIN:-$here/../../target/release/tideway}
kit=${TESTKIT_BIN:-$here/../../target/release/tideway-testkit}
tw_lua=${TW_LUA:?set TW_LUA to tw_post.lua}
etcd_lua=${ETCD_LUA:?set ETCD_LUA to etcd_put.lua}
conns=${CONNS:-64}; idle=${IDLE:-60}; loaded=${LOADED:-60}; only=${ONLY:-}
command -v wrk >/dev/null && command -v etcd >/dev/null || { echo "needs wrk and etcd" >&2; exit 2; }
tmp=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; pids=(); }
trap 'cleanup; [ -n "${KEEP:-}" ] && echo "# kept $tmp" || rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
proxy() { # listen upstream one-way-ms
  "$kit" wan-proxy --listen "$1" --to "$2" --delay-ms "$3" 2>>"$tmp/proxy.log" & pids+=($!); disown
}
wrk_line() { # label url lua -> "rate p50 p99"
  local out; out=$(wrk -t2 -c"$conns" -d"${loaded}s" --latency -s "$3" "$2" 2>&1)
  echo "$out" >"$tmp/wrk-$1.txt"
  local rate p50 p99
  rate=$(sed -n 's/^Requests\/sec: *//p' <<<"$out")
  p50=$(awk '$1=="50%"{print $2}' <<<"$out"); p99=$(awk '$1=="99%"{print $2}' <<<"$out")
  echo "${rate:-0} ${p50:--} ${p99:--}"
}

tw_status() { curl -s -m 2 "http://127.0.0.1:$1/v1/cluster/status?digest=false"; }
tw_field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
tw_run() { # one-way-ms
  local d=$1 TP=27500
  for i in 1 2 3; do
    proxy 127.0.0.1:$((TP + 20 + i)) 127.0.0.1:$((TP + 10 + i)) "$d"
  done
  for i in 1 2 3; do
    local join=(); [ "$i" -gt 1 ] && join=(--join 127.0.0.1:$((TP + 1)))
    # shellcheck disable=SC2086
    "$tw" server --id $i --listen 127.0.0.1:$((TP + i)) --data "$tmp/tw-$d/$i" \
      --peer-listen 127.0.0.1:$((TP + 10 + i)) --peer-advertise 127.0.0.1:$((TP + 20 + i)) \
      ${TW_FLAGS:-} "${join[@]}" >"$tmp/tw-$d-$i.log" 2>&1 & pids+=($!); disown
    # One join at a time: concurrent joins' membership changes collide, and at 150 ms the
    # second join's retries can outlast its 30 s budget (the node then exits).
    [ "$i" -eq 1 ] && sleep 1
    for _ in $(seq 1 300); do
      tw_status $((TP + 1)) | grep -q "\"voters\":\[[0-9,]*\]" &&
        [ "$(tw_status $((TP + 1)) | sed -n 's/.*"voters":\[\([0-9,]*\)\].*/\1/p' | tr ',' '\n' | wc -l)" -ge "$i" ] && break
      sleep 0.2
    done
  done
  local leader="" t0; t0=$(now)
  for _ in $(seq 1 300); do
    local s; s=$(tw_status $((TP + 1)))
    if grep -q '"voters":\[[0-9]*,[0-9]*,[0-9]*\]' <<<"$s"; then leader=$(tw_field leader <<<"$s"); break; fi
    sleep 0.2
  done
  [ -n "$leader" ] || { echo "tideway at ${d}x2 ms: no three-voter cluster" >&2; tail -n 5 "$tmp"/tw-$d-*.log >&2; cleanup; return; }
  local term0; term0=$(tw_status $((TP + leader)) | tw_field term)
  sleep "$idle"
  local lp=$((TP + leader)); local term1; term1=$(tw_status $lp | tw_field term)
  local w; w=$(wrk_line "tw-$d" "http://127.0.0.1:$lp" "$tw_lua")
  leader=$(tw_status $((TP + 1)) | tw_field leader); lp=$((TP + leader))
  local term2; term2=$(tw_status $lp | tw_field term)
  local rtt; rtt=$(tw_status $lp | grep -o '"rttMs":[0-9.]*' | cut -d: -f2 | tr '\n' '/')
  # Failover: kill -9 the leader, then submit at a survivor until one is acknowledged.
  local pid=${pids[$((2 + leader))]} other=$(( leader % 3 + 1 )) k
  kill -9 "$pid"; k=$(now)
  local n=0
  while :; do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      -H "Idempotency-Key: fo-$d-$n" "http://127.0.0.1:$((TP + other))/v1/workloads" \
      -d "{\"apiVersion\":\"tideway.dev/v1alpha1\",\"kind\":\"Workload\",\"metadata\":{\"name\":\"fo-$d-$n\"},\"spec\":{\"queue\":\"default\",\"class\":\"training\",\"podSets\":[{\"name\":\"w\",\"count\":1,\"gpusPerPod\":8,\"flavor\":\"H100\"}]}}")
    [ "$code" = 201 ] && break
    n=$((n + 1)); sleep 0.02
    awk -v a="$(now)" -v b="$k" 'BEGIN{exit !(a-b>30)}' && { code=timeout; break; }
  done
  local fo; fo=$(awk -v a="$(now)" -v b="$k" 'BEGIN{printf "%.2f", a-b}')
  [ "$code" = 201 ] || fo="none in 30 s"
  printf 'tideway rtt=%-4s measured=%-16s idle_changes=%s loaded_changes=%s  %s/s p50=%s p99=%s  failover=%s s\n' \
    $((2 * d)) "${rtt%/}" $((term1 - term0)) $((term2 - term1)) $w "$fo"
  cleanup
}

etcd_status() { curl -s -m 2 -X POST "http://127.0.0.1:$1/v3/maintenance/status" -d '{}'; }
etcd_run() { # one-way-ms
  local d=$1 EP=25800
  local CL="e1=http://127.0.0.1:$((EP + 21)),e2=http://127.0.0.1:$((EP + 22)),e3=http://127.0.0.1:$((EP + 23))"
  for i in 1 2 3; do proxy 127.0.0.1:$((EP + 20 + i)) 127.0.0.1:$((EP + 10 + i)) "$d"; done
  for i in 1 2 3; do
    etcd --name e$i --data-dir "$tmp/etcd-$d/e$i" --listen-peer-urls http://127.0.0.1:$((EP + 10 + i)) \
      --initial-advertise-peer-urls http://127.0.0.1:$((EP + 20 + i)) \
      --listen-client-urls http://127.0.0.1:$((EP + i)) --advertise-client-urls http://127.0.0.1:$((EP + i)) \
      --initial-cluster "$CL" --initial-cluster-state new --initial-cluster-token wan-$d \
      >"$tmp/etcd-$d-$i.log" 2>&1 & pids+=($!); disown
  done
  local leader="" term0
  for _ in $(seq 1 300); do
    for i in 1 2 3; do
      local s; s=$(etcd_status $((EP + i)))
      local me ld; me=$(sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p' <<<"$s"); ld=$(sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p' <<<"$s")
      [ -n "$me" ] && [ "$me" = "$ld" ] && { leader=$i; term0=$(sed -n 's/.*"raft_term":"\([0-9]*\)".*/\1/p' <<<"$s"); }
    done
    [ -n "$leader" ] && break; sleep 0.2
  done
  [ -n "$leader" ] || { echo "etcd at ${d}x2 ms: no leader" >&2; cleanup; return; }
  sleep "$idle"
  local lp=$((EP + leader)) term1 term2
  term1=$(etcd_status $lp | sed -n 's/.*"raft_term":"\([0-9]*\)".*/\1/p')
  local w; w=$(wrk_line "etcd-$d" "http://127.0.0.1:$lp" "$etcd_lua")
  term2=$(etcd_status $lp | sed -n 's/.*"raft_term":"\([0-9]*\)".*/\1/p')
  local pid=${pids[$((2 + leader))]} other=$(( leader % 3 + 1 )) k code n=0
  kill -9 "$pid"; k=$(now)
  while :; do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$((EP + other))/v3/kv/put" \
      -d "{\"key\":\"$(printf 'fo-%s-%s' "$d" "$n" | base64)\",\"value\":\"eA==\"}")
    [ "$code" = 200 ] && break
    n=$((n + 1)); sleep 0.02
    awk -v a="$(now)" -v b="$k" 'BEGIN{exit !(a-b>30)}' && break
  done
  local fo; fo=$(awk -v a="$(now)" -v b="$k" 'BEGIN{printf "%.2f", a-b}')
  [ "$code" = 200 ] || fo="none in 30 s"
  printf 'etcd    rtt=%-4s %-25s idle_changes=%s loaded_changes=%s  %s/s p50=%s p99=%s  failover=%s s\n' \
    $((2 * d)) "" $((term1 - term0)) $((term2 - term1)) $w "$fo"
  cleanup
}

echo "# $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); wrk -t2 -c$conns, idle ${idle}s, loaded ${loaded}s; TW_FLAGS='${TW_FLAGS:-}'"
for rtt in "$@"; do
  d=$((rtt / 2))
  [ "$only" = etcd ] || tw_run "$d"
  [ "$only" = tideway ] || etcd_run "$d"
done
