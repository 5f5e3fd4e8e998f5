#!/usr/bin/env bash
# The test command: every unit, property, conformance and end-to-end test of the workspace.
# End-to-end tests start real `tideway` processes on loopback; the browser and deployment
# tests need chromium, promtool, playwright-core and helm, which scripts/setup.sh installs
# (idempotent: under a second when they are there).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec cargo test --workspace --locked "$@"
