#!/usr/bin/env bash
# Regenerates the contended table of docs/simulator.md: every policy of this directory on
# the Oct-Nov 2017 Philly window, then one Markdown table.
#
#   TRACES=/path/to/traces deploy/simulate/contended/run.sh [OUT_DIR]
#
# TIDEWAY picks the binary (default target/release/tideway; build it with
# `cargo build --release --bin tideway`). Needs jq and awk.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
: "${TRACES:?set TRACES to the directory holding philly/philly.csv}"
bin="${TIDEWAY:-$here/../../../target/release/tideway}"
out="${1:-/tmp/tideway-contended}"
trace="philly:$TRACES/philly/philly.csv"
mkdir -p "$out"

rows=(
  "global FIFO|clusters.yaml|policy-fifo.yaml"
  "FIFO + backfill|clusters.yaml|policy-backfill.yaml"
  "fair share, no reservations, no reclaim|clusters.yaml|policy-fair-noreserve.yaml"
  "fair share + reservations, no reclaim (the previous default)|clusters.yaml|policy-fair-reserve.yaml"
  "fair share + reservations + reclaim|clusters.yaml|policy-fair-reserve-reclaim.yaml"
  "**the default: fair share + reclaim when a workload would wait longer than on its partition**|clusters.yaml|policy-default.yaml"
  "fair share + reclaim for gangs of 12+ GPUs, no reservations (the previous default, history)|clusters.yaml|policy-fair.yaml"
  "the default, reclaim for every workload|clusters.yaml|policy-fair-reclaim-all.yaml"
  "the default, reclaim only for gangs of 16+ GPUs|clusters.yaml|policy-fair-reclaim16.yaml"
  "reclaim for every workload, a checkpoint every 30 min assumed|clusters.yaml|policy-fair-ckpt.yaml"
  "fair share + reservations, no estimates, no reclaim|clusters.yaml|policy-fair-none.yaml"
  "fair share + reservations, oracle, no reclaim|clusters.yaml|policy-fair-oracle.yaml"
  "oracle SJF: one queue, least true GPU-time first, no preemption (limit)|clusters.yaml|policy-oracle-sjf.yaml"
  "static partition (reservations, per VC)|clusters-partition.yaml|policy-partition.yaml"
)

for row in "${rows[@]}"; do
  IFS='|' read -r _ clusters policy <<<"$row"
  dir="$out/${policy%.yaml}"
  if [[ ! -f "$dir/summary.json" ]]; then
    "$bin" simulate --quiet --clusters "$here/$clusters" --policy "$here/$policy" \
      --trace "$trace" --from 2017-10-01 --to 2017-12-01 --out "$dir" >"$dir.log" 2>&1 \
      || { cat "$dir.log"; exit 1; }
  fi
done

# Mean queueing per VC (tenant) from jobs.csv, one "vc seconds" line each.
per_vc() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           $col["queueing_seconds"] != "" { s[$col["tenant"]] += $col["queueing_seconds"]; n[$col["tenant"]]++ }
           END { for (t in s) printf "%s %.0f\n", t, s[t] / n[t] }' "$1/jobs.csv" | sort
}
# Mean delay per VC: completion time minus run time, so a preempted job's wait to run again
# and the work it lost count too (queueing_seconds counts only the wait for its first start).
per_vc_delay() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           $col["jct_seconds"] != "" { t = $col["tenant"]; run = ($col["gpu_seconds"] - $col["lost_gpu_seconds"]) / $col["gpus"]
                                      s[t] += $col["jct_seconds"] - run; n[t]++ }
           END { for (t in s) printf "%s %.0f\n", t, s[t] / n[t] }' "$1/jobs.csv" | sort
}
static="$out/policy-partition"
per_vc "$static" >"$out/static.txt"

echo "| policy | avg JCT | p50 JCT | p99 JCT | VCs queueing longer than static (worst) | utilization | work lost | reserved idle | wall |"
echo "|---|---|---|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
  IFS='|' read -r label _ policy <<<"$row"
  dir="$out/${policy%.yaml}"
  worse=$(per_vc "$dir" | join - "$out/static.txt" | awk '
    { if ($2 > $3 && $2 > 60) { n++; r = ($3 > 0 ? $2 / $3 : 0); if ($2 - $3 > worst) { worst = $2 - $3; w = $1 " " $2 " s vs " $3 " s" } } }
    END { if (n) printf "%d (%s)", n, w; else printf "0" }')
  jq -r --arg row "$label" --arg worse "$worse" '
    def s: floor | tostring | explode | reverse | [range(0; length; 3) as $i | .[$i:$i+3]] | map(reverse | implode) | reverse | join(",");
    "| \($row) | \(.overall.jct.mean | s) s | \(.overall.jct.p50 | s) s | \(.overall.jct.p99 | s) s | \($worse) | \(.utilization * 1000 | round / 10)% | \(.overall.workLostGpuHours | round) GPU-h | \(if .estimates then (.estimates.reservedIdleGpuHours | round | tostring) + " GPU-h" else "-" end) | \(.run.wallSeconds * 10 | round / 10) s |"
  ' "$dir/summary.json"
done
echo
echo "Per-VC mean queueing (seconds):"
for row in "${rows[@]}"; do
  IFS='|' read -r label _ policy <<<"$row"
  printf '%s: %s\n' "$label" "$(per_vc "$out/${policy%.yaml}" | tr '\n' ' ')"
done
echo
echo "Per-VC mean delay, completion minus run time (seconds):"
for row in "${rows[@]}"; do
  IFS='|' read -r label _ policy <<<"$row"
  printf '%s: %s\n' "$label" "$(per_vc_delay "$out/${policy%.yaml}" | tr '\n' ' ')"
done
