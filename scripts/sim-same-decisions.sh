#!/usr/bin/env bash
# Whether two `tideway simulate` output directories hold the same decisions: jobs.csv (every
# job's start, end, cluster, preemptions, work and pending reasons) and timeseries.csv must be
# byte-identical, and summary.json identical but for what the wall clock measures
# (run.wallSeconds, run.eventsPerSecond, run.schedulerWallSeconds). Used to check that a
# speed-up changed no decision:
#
#   scripts/sim-same-decisions.sh REFERENCE_DIR NEW_DIR
#
# Exits 0 when identical, 1 with the first differences shown otherwise. Needs jq.
set -euo pipefail
a="${1:?reference output directory}"
b="${2:?new output directory}"
status=0
for f in jobs.csv timeseries.csv; do
  if ! cmp -s "$a/$f" "$b/$f"; then
    echo "$f differs:"
    diff "$a/$f" "$b/$f" | head -20
    status=1
  fi
done
strip='del(.run.wallSeconds, .run.eventsPerSecond, .run.schedulerWallSeconds)'
if ! diff <(jq -S "$strip" "$a/summary.json") <(jq -S "$strip" "$b/summary.json") >/tmp/sim-same-decisions.$$; then
  echo "summary.json differs:"
  head -40 /tmp/sim-same-decisions.$$
  status=1
fi
rm -f /tmp/sim-same-decisions.$$
[[ $status == 0 ]] && echo "same decisions"
exit $status
