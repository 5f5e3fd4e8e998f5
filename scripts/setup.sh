#!/usr/bin/env bash
# Installs what building and testing Tideway needs on a fresh Debian machine with a Rust
# toolchain: nothing beyond the toolchain's own rustfmt and clippy today. Benchmarks that
# compare against etcd install etcd and wrk themselves (../shared/tools/etcd-baseline.sh).
set -euo pipefail
for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$c"
  fi
done
