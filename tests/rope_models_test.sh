#!/usr/bin/env bash
# RoPE of today's models (tests/python/test_rope_models.py, unittest with torch references)
# against a real posenc-server on 127.0.0.1:0 (with --shm), through the Python package and
# posenc-client.
# Usage: rope_models_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
[ -f "$build/client/python/posenc/v1/posenc_pb2.py" ] \
  || { echo "FAIL: no Python stubs in $build/client/python (ninja -C $build posenc_python)"; exit 1; }
"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=2 --shm=true \
  >"$work/server.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/server.out" && break; sleep 0.1; done
line=$(grep " listening " "$work/server.out") || { cat "$work/server.out" >&2; exit 1; }
export POSENC_TARGET
POSENC_TARGET=$(sed -E 's/.* grpc=([^ ]+) .*/\1/' <<<"$line")
export POSENC_CLIENT="$build/client/posenc-client" POSENC_SOURCE_DIR="$src"
PYTHONPATH="$build/client/python" /usr/bin/python3 "$src/tests/python/test_rope_models.py" -v
