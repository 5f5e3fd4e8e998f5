#!/usr/bin/env bash
# The robustness suite of issue 55: the default policy (`preemption: true`, nothing under
# `tuning`) and the no-reclaim row, replayed on fleets nobody tuned them for, each against
# the static partition of the same fleet. Prints one Markdown table.
#
#   TRACES=/path/to/traces deploy/simulate/robust/run.sh [OUT_DIR]
#
# Variants: NODES (default "76 68 60": about 80%, 87% and 95% offered load on Oct-Nov
# 2017, whose 11 VCs offer 472 GPUs on average) x SCHEMES ("demand equal": guarantees
# proportional to each VC's share of the window's GPU-time, or equal shares; either way at
# least the VC's biggest gang, whole nodes, adding up to the fleet) x WINDOWS (default
# "2017-10-01:2017-12-01"; e.g. WINDOWS="2017-10-01:2017-12-01 2017-09-24:2017-11-24
# 2017-10-08:2017-12-08" for the two shifted by a week). Each variant replays three
# scenarios: the default, no reclaim (fair share, no reservations), and the static
# partition (each VC alone on its guarantee's nodes, reservations on inside it), two at a
# time (JOBS). Everything is generated into OUT_DIR from the trace; nothing is fitted.
#
# TIDEWAY picks the binary (default target/release/tideway); REPLAY instead names the
# simulator's replay example (`cargo build --release -p tideway-simulate --example replay`,
# target/release/examples/replay: the same library, without building the federation).
# Needs jq, awk and xargs.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
: "${TRACES:?set TRACES to the directory holding philly/philly.csv}"
bin="${TIDEWAY:-$here/../../../target/release/tideway}"
out="${1:-/tmp/tideway-robust}"
csv="$TRACES/philly/philly.csv"
nodes_list="${NODES:-76 68 60}"
schemes="${SCHEMES:-demand equal}"
windows="${WINDOWS:-2017-10-01:2017-12-01}"
jobs="${JOBS:-2}"
vcs="6214e9 7f04ca 11cb48 b436b2 ee9e8c e13805 6c71a0 2869ce ed69ec 103959 0e4a51"
mkdir -p "$out"

# "vc nodes" lines: the guarantees in nodes of 8 GPUs for fleet size $1, scheme $2, window
# [$3, $4). Each VC gets at least its biggest gang's nodes; the rest goes by the scheme's
# shares, largest remainder first (ties by VC name), so the nodes add up to the fleet.
guarantees() {
  awk -F, -v n="$1" -v scheme="$2" -v from="$3" -v to="$4" -v vcs="$vcs" '
    BEGIN { k = split(vcs, v, " "); for (i = 1; i <= k; i++) known[v[i]] = 1 }
    NR > 1 && $1 >= from && $1 < to && ($5 in known) {
      g[$5] += $4; tot += $4; if ($3 + 0 > big[$5]) big[$5] = $3 + 0 }
    END {
      for (i = 1; i <= k; i++) {
        vc = v[i]; share[vc] = (scheme == "equal") ? 1 / k : g[vc] / tot
        fl[vc] = int((big[vc] + 7) / 8); if (fl[vc] < 1) fl[vc] = 1
      }
      # VCs whose share is below their floor get the floor; the others split the rest.
      do {
        changed = 0; left = n; s = 0
        for (i = 1; i <= k; i++) { vc = v[i]; if (pinned[vc]) left -= fl[vc]; else s += share[vc] }
        for (i = 1; i <= k; i++) { vc = v[i]
          if (!pinned[vc] && left * share[vc] / s < fl[vc]) { pinned[vc] = 1; changed = 1 } }
      } while (changed)
      used = 0
      for (i = 1; i <= k; i++) { vc = v[i]
        if (pinned[vc]) nodes[vc] = fl[vc]
        else { x = left * share[vc] / s; nodes[vc] = int(x); rem[vc] = x - int(x) }
        used += nodes[vc] }
      while (used < n) {
        best = ""
        for (i = 1; i <= k; i++) { vc = v[i]
          if (!pinned[vc] && (best == "" || rem[vc] > rem[best] || (rem[vc] == rem[best] && vc < best))) best = vc }
        nodes[best]++; rem[best] = -1; used++
      }
      for (i = 1; i <= k; i++) print v[i], nodes[v[i]]
    }' "$csv"
}

queues_yaml() { # $1: guarantees file
  echo "  queues:"
  while read -r vc n; do
    cat <<EOF
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: { name: "$vc" }
      spec:
        tenant: vc-$vc
        cohort: philly
        fairShareWeight: $n
        quotas: [{ flavor: P100, guaranteed: $((n * 8)) }]
EOF
  done <"$1"
}

write_variant() { # $1: dir, $2: nodes, $3: guarantees file
  local d="$1" n="$2" g="$3"
  cat >"$d/clusters.yaml" <<EOF
clusters:
  - name: philly
    region: philly
    uniform: { nodes: $n, nodesPerRack: 4, gpusPerNode: 8, model: P100 }
EOF
  { echo "clusters:"
    while read -r vc k; do
      printf '  - name: vc-%s\n    region: philly\n    uniform: { nodes: %s, nodesPerRack: 1, gpusPerNode: 8, model: P100 }\n' "$vc" "$k"
    done <"$g"; } >"$d/clusters-partition.yaml"
  for kind in default none partition; do
    { printf 'apiVersion: tideway.dev/v1alpha1\nkind: Policy\nmetadata:\n  name: robust-%s\nspec:\n' "$kind"
      queues_yaml "$g"
      echo "  scheduler:"
      echo "    fairSharing: true"
      case $kind in
        default) echo "    preemption: true"
                 echo "    tuning: { reclaimByPartitionWait: true }" ;;
        *) echo "    preemption: false" ;;
      esac
      echo "simulator:"
      echo "  mode: scheduler"
      if [[ $kind == partition ]]; then
        echo "  tuning: { maxReservations: 16 }"
        echo "  queueClusters:"
        while read -r vc _; do printf '    "%s": [vc-%s]\n' "$vc" "$vc"; done <"$g"
      fi
    } >"$d/policy-$kind.yaml"
  done
}

variants=()
for w in $windows; do
  from="${w%%:*}"; to="${w##*:}"
  for n in $nodes_list; do
    for scheme in $schemes; do
      v="$from-$n-$scheme"
      d="$out/$v"
      mkdir -p "$d"
      guarantees "$n" "$scheme" "$from" "$to" >"$d/guarantees.txt"
      write_variant "$d" "$n" "$d/guarantees.txt"
      variants+=("$v|$from|$to|$n|$scheme")
    done
  done
done

# One replay per line: dir, clusters file, policy, window. Skipped when already done.
for row in "${variants[@]}"; do
  IFS='|' read -r v from to _ _ <<<"$row"
  for kind in default none partition; do
    clusters=clusters.yaml; [[ $kind == partition ]] && clusters=clusters-partition.yaml
    [[ -f "$out/$v/$kind/summary.json" ]] || echo "$out/$v $clusters $kind $from $to"
  done
done | REPLAY="${REPLAY:-}" BIN="$bin" CSV="$csv" xargs -r -P "$jobs" -L 1 sh -c '
  d=$0; clusters=$1; kind=$2; from=$3; to=$4
  if [ -n "$REPLAY" ]; then
    "$REPLAY" "$d/$clusters" "$d/policy-$kind.yaml" "philly:$CSV" "$from" "$to" "$d/$kind" >"$d/$kind.log" 2>&1
  else
    "$BIN" simulate --quiet --clusters "$d/$clusters" --policy "$d/policy-$kind.yaml" \
      --trace "philly:$CSV" --from "$from" --to "$to" --out "$d/$kind" >"$d/$kind.log" 2>&1
  fi || { cat "$d/$kind.log" >&2; exit 255; }'

# "vc mean" lines of a replay: mean queueing (first start minus submission), or mean delay
# (completion minus run time: also a reclaimed job's wait to run again and what it lost).
per_vc() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           $col["queueing_seconds"] != "" { s[$col["tenant"]] += $col["queueing_seconds"]; n[$col["tenant"]]++ }
           END { for (t in s) printf "%s %.0f\n", t, s[t] / n[t] }' "$1/jobs.csv" | sort
}
per_vc_delay() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           $col["jct_seconds"] != "" { t = $col["tenant"]; run = ($col["gpu_seconds"] - $col["lost_gpu_seconds"]) / $col["gpus"]
                                      s[t] += $col["jct_seconds"] - run; n[t]++ }
           END { for (t in s) printf "%s %.0f\n", t, s[t] / n[t] }' "$1/jobs.csv" | sort
}
# VCs whose mean ($1: a per-VC file) is above the static partition's ($2) by more than a
# minute: "n (worst: vc x s vs y s)".
worse() {
  join "$1" "$2" | awk '
    { if ($2 > $3 && $2 > 60) { n++; if ($2 - $3 > worst) { worst = $2 - $3; w = $1 " " $2 " s vs " $3 " s" } } }
    END { if (n) printf "%d (%s)", n, w; else printf "0" }'
}
fmt='def s: floor | tostring | explode | reverse | [range(0; length; 3) as $i | .[$i:$i+3]] | map(reverse | implode) | reverse | join(",");'

echo "| window | nodes | guarantees | row | avg JCT | p50 JCT | p99 JCT | VCs worse off than static: queueing | delay | work lost | default vs no reclaim |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
misses=()
for row in "${variants[@]}"; do
  IFS='|' read -r v from to n scheme <<<"$row"
  d="$out/$v"
  per_vc "$d/partition" >"$d/static.txt"
  avg_none=$(jq '.overall.jct.mean' "$d/none/summary.json")
  p99_none=$(jq '.overall.jct.p99' "$d/none/summary.json")
  for kind in default none; do
    per_vc "$d/$kind" >"$d/$kind.queueing.txt"
    per_vc_delay "$d/$kind" >"$d/$kind.delay.txt"
    wq=$(worse "$d/$kind.queueing.txt" "$d/static.txt")
    wd=$(worse "$d/$kind.delay.txt" "$d/static.txt")
    verdict="-"
    if [[ $kind == default ]]; then
      verdict=$(jq -r --argjson a "$avg_none" --argjson p "$p99_none" --arg wq "$wq" --arg wd "$wd" '
        ((.overall.jct.mean / $a - 1) * 100) as $da | ((.overall.jct.p99 / $p - 1) * 100) as $dp |
        [ (if $wq != "0" or $wd != "0" then "VCs worse off" else empty end),
          (if $da > 5 then "avg +\($da * 10 | round / 10)% (> 5%)" else empty end),
          (if $dp > 10 then "p99 +\($dp * 10 | round / 10)% (> 10%)" else empty end) ] as $miss |
        "avg \(if $da >= 0 then "+" else "" end)\($da * 10 | round / 10)%, p99 \(if $dp >= 0 then "+" else "" end)\($dp * 10 | round / 10)%: " +
        (if ($miss | length) == 0 then "meets" else "misses (" + ($miss | join("; ")) + ")" end)
      ' "$d/default/summary.json")
      [[ $verdict == *misses* ]] && misses+=("$from, $n nodes, $scheme: ${verdict#*: }")
    fi
    label="the default"; [[ $kind == none ]] && label="no reclaim"
    jq -r --arg w "$from" --arg n "$n" --arg g "$scheme" --arg row "$label" --arg wq "$wq" --arg wd "$wd" --arg v "$verdict" "$fmt"'
      "| \($w) | \($n) | \($g) | \($row) | \(.overall.jct.mean | s) s | \(.overall.jct.p50 | s) s | \(.overall.jct.p99 | s) s | \($wq) | \($wd) | \(.overall.workLostGpuHours | round) GPU-h | \($v) |"
    ' "$d/$kind/summary.json"
  done
done
echo
if ((${#misses[@]})); then
  echo "Variants that miss a target:"
  printf -- '- %s\n' "${misses[@]}"
else
  echo "Every variant meets both targets."
fi
echo
echo "Per-VC mean queueing (seconds), static partition / the default / no reclaim:"
for row in "${variants[@]}"; do
  IFS='|' read -r v from to n scheme <<<"$row"
  d="$out/$v"
  printf '%s, %s nodes, %s: %s\n' "$from" "$n" "$scheme" \
    "$(join "$d/static.txt" "$d/default.queueing.txt" | join - "$d/none.queueing.txt" | awk '{ printf "%s %s/%s/%s  ", $1, $2, $3, $4 }')"
done
echo
echo "Wall seconds per replay:"
for row in "${variants[@]}"; do
  IFS='|' read -r v _ _ _ _ <<<"$row"
  printf '%s: %s\n' "$v" "$(for k in default none partition; do jq -r --arg k "$k" '"\($k) \(.run.wallSeconds | round)"' "$out/$v/$k/summary.json"; done | tr '\n' ' ')"
done
