#!/usr/bin/env bash
# The test command: every unit, property, conformance and end-to-end test of the workspace.
# End-to-end tests start real `tideway` processes on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --workspace --locked "$@"
