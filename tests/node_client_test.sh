#!/usr/bin/env bash
# The Node.js examples (client/node: encode.js with @grpc/proto-loader, reflect.js through
# server reflection only) against a real posenc-server. npm installs the pinned packages
# (package-lock.json) into BUILD_DIR/client/node; without node/npm, or when npm cannot reach
# its registry, the test is skipped (exit 77) with a message saying so.
# Usage: node_client_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
skip() { echo "SKIP: $*"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null || skip "node or npm is not installed"

# Dependencies in the build tree, reinstalled only when the lock file changes.
deps="$build/client/node"
mkdir -p "$deps"
if ! cmp -s "$src/client/node/package-lock.json" "$deps/package-lock.json" || [ ! -d "$deps/node_modules" ]; then
  cp "$src/client/node/package.json" "$src/client/node/package-lock.json" "$deps/"
  if ! (cd "$deps" && npm ci --no-audit --no-fund --prefer-offline >"$deps/npm.log" 2>&1); then
    rm -f "$deps/package-lock.json"  # so the next run tries again
    timeout 20 npm ping >/dev/null 2>&1 || skip "npm cannot reach its registry (npm ci failed offline)"
    cat "$deps/npm.log"; echo "FAIL: npm ci"; exit 1
  fi
fi
export NODE_PATH="$deps/node_modules"

work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --threads=1 >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/out" && break; sleep 0.1; done
target=$(sed -E 's/.* grpc=([^ ]+) .*/\1/' <<<"$(grep " listening " "$work/out")")

node "$src/client/node/encode.js" "$target" || { echo "FAIL: encode.js"; exit 1; }
node "$src/client/node/reflect.js" "$target" --require-v1 | tee "$work/reflect" || { echo "FAIL: reflect.js"; exit 1; }
grep -q "^reflection v1: services" "$work/reflect" \
  || echo "NOTE: the server answers reflection v1alpha only (grpc.reflection.v1 is UNIMPLEMENTED)"
echo "PASS: the Node.js examples against a real server"
