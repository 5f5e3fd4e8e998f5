#!/usr/bin/env bash
# Installs what building and testing Tideway needs on a fresh Debian (bookworm) machine with a
# Rust toolchain. Idempotent and quick when everything is there already.
#
# - rustfmt and clippy (toolchain components);
# - Debian's `chromium` (the dashboard's browser test drives it headless) and `prometheus`
#   (for `promtool`, which checks and unit-tests the alert rules in deploy/prometheus);
# - `playwright-core` from npm into tests/browser/node_modules, pinned by the committed
#   package-lock.json. playwright-core never downloads a browser; we never run
#   `playwright install`: the test uses /usr/bin/chromium.
#
# Benchmarks that compare against etcd install etcd and wrk themselves.
set -euo pipefail
cd "$(dirname "$0")/.."

for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$c"
  fi
done

# Debian packages: install only what is missing, and refresh the package lists at most once.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]} > 0)); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  echo "setup: installing ${missing[*]} from Debian's packages"
  if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# playwright-core, exactly as locked. Skip when the installed copy matches the lock file.
browser=tests/browser
installed="$browser/node_modules/playwright-core/package.json"
want=$(node -p "require('./$browser/package-lock.json').packages['node_modules/playwright-core'].version")
have=""
if [[ -f $installed ]]; then
  have=$(node -p "require('./$installed').version")
fi
if [[ $have != "$want" ]]; then
  echo "setup: installing playwright-core $want into $browser/node_modules"
  (cd "$browser" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi
