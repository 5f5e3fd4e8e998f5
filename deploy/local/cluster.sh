#!/usr/bin/env bash
# Starts a three-node federation on loopback (ports 7401-7403), data under ${TW_DATA:-/tmp/tideway}.
# Stop with: kill $(cat ${TW_DATA:-/tmp/tideway}/*.pid)
set -euo pipefail
bin=${TIDEWAY_BIN:-$(dirname "$0")/../../target/release/tideway}
data=${TW_DATA:-/tmp/tideway}
mkdir -p "$data"
"$bin" server --id 1 --listen 127.0.0.1:7401 --data "$data/n1" >"$data/n1.log" 2>&1 &
echo $! >"$data/n1.pid"
sleep 1
for i in 2 3; do
  "$bin" server --id $i --listen 127.0.0.1:740$i --data "$data/n$i" --join 127.0.0.1:7401 >"$data/n$i.log" 2>&1 &
  echo $! >"$data/n$i.pid"
done
sleep 3
"$bin" cluster status --addr 127.0.0.1:7401
