#!/usr/bin/env bash
# The Node.js package posenc-client (client/node) as users install it, against a real
# posenc-server:
#  1. `npm install ./client/node` at the top of a copy of the checkout (its .npmrc makes npm
#     copy the package with its dependencies), then tests/node/package_test.js there:
#     require('posenc-client') and every Client method, checked against float64 formulas.
#  2. `npm install /path/to/client/node` from a project elsewhere (npm links the folder; its
#     dependencies come from the folder's node_modules, which scripts/setup.sh fills with
#     `npm ci --omit=dev`), then the same test.
#  3. The package's examples on top of it: encode.js, and reflect.js (server reflection only).
#  4. `npm pack` (the tarball carries the protos) and an install of the tarball away from any
#     checkout, then the same test.
# posenc-client has no install-time script, and npm must not name it as having one. Works on
# copies in a temporary folder; nothing is written into the source tree. Without node/npm, or
# when npm can reach neither its cache nor its registry, it is skipped (exit 77).
# Usage: node_client_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null || skip "node or npm is not installed"

work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
npm_quiet=(--no-audit --no-fund --prefer-offline --loglevel=warn)  # warn: npm names skipped scripts
# npm_or_skip DIR ARGS...: runs npm in DIR; skips the test when the registry is unreachable.
npm_or_skip() {
  local dir=$1; shift
  if ! (cd "$dir" && npm "$@" "${npm_quiet[@]}" >"$work/npm.log" 2>&1); then
    timeout 20 npm ping >/dev/null 2>&1 || skip "npm cannot reach its registry (npm $* failed offline)"
    cat "$work/npm.log"; fail "npm $* in $dir"
  fi
  # npm names each package with install scripts it did not run (protobufjs has one).
  if grep -q "posenc-client@.*(\(preinstall\|install\|postinstall\|prepare\):" "$work/npm.log"; then
    cat "$work/npm.log"; fail "npm $* in $dir: posenc-client has an install script"
  fi
}
grep -Eq '"(preinstall|install|postinstall|prepare)"' "$src/client/node/package.json" &&
  fail "client/node/package.json has an install-time script"

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 >"$work/server.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/server.out" && break; sleep 0.1; done
target=$(grep -m1 " listening " "$work/server.out" | sed -E 's/.* grpc=([^ ]+) .*/\1/')
[ -n "$target" ] || { cat "$work/server.out"; fail "the server did not start"; }

mkdir -p "$work/repo/client" "$work/app1" "$work/app2"
cp "$src/.npmrc" "$work/repo/"
(cd "$src/client" && tar --exclude=node/node_modules -cf - node) | tar -xf - -C "$work/repo/client"
for app in repo app1 app2; do cp "$src/tests/node/package_test.js" "$work/$app/"; done
for app in app1 app2; do
  echo "{\"name\": \"$app\", \"version\": \"1.0.0\", \"private\": true}" >"$work/$app/package.json"
done

# 1. npm install ./client/node at the top of the checkout.
npm_or_skip "$work/repo" install ./client/node
(cd "$work/repo" && node package_test.js "$target") || fail "package_test.js after npm install ./client/node"

# 2. npm install PATH from another project, after scripts/setup.sh's step.
npm_or_skip "$work/repo/client/node" ci --omit=dev
npm_or_skip "$work/app1" install "$work/repo/client/node"
(cd "$work/app1" && node package_test.js "$target") || fail "package_test.js after npm install PATH"

# 3. The examples, with the package's own dependencies (npm ci: the lock file).
npm_or_skip "$work/repo/client/node" ci
node "$work/repo/client/node/encode.js" "$target" || fail "encode.js"
node "$work/repo/client/node/reflect.js" "$target" --require-v1 || fail "reflect.js"

# 4. npm pack, then the tarball alone.
npm_or_skip "$work/repo/client/node" pack --pack-destination "$work"
tarball=$(ls "$work"/posenc-client-*.tgz) || fail "npm pack made no tarball"
tar -tzf "$tarball" >"$work/tarball.list"
for f in proto/posenc/v1/posenc.proto proto/grpc/health/v1/health.proto index.d.ts; do
  grep -q "^package/$f$" "$work/tarball.list" || fail "the tarball lacks $f"
done
rm -rf "$work/repo"
npm_or_skip "$work/app2" install "$tarball"
(cd "$work/app2" && node package_test.js "$target") || fail "package_test.js after installing $tarball"
echo "PASS: posenc-client from npm install ./client/node, npm install PATH elsewhere and its tarball, and the examples"
