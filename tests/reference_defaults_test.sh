#!/usr/bin/env bash
# Each reference implementation's own function with its defaults (HF DeBERTa
# build_relative_position, tensor2tensor's relative matrix, HF T5's decode slice, HF
# get_rope_index of Qwen2-VL, Qwen2.5-VL and Qwen3-VL) against a real posenc-server called
# with only the corresponding fields set (tests/python/test_reference_defaults.py).
# Usage: reference_defaults_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
[ -f "$build/client/python/posenc/v1/posenc_pb2.py" ] \
  || { echo "FAIL: no Python stubs in $build/client/python (ninja -C $build posenc_python)"; exit 1; }
"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen= \
  --threads=1 >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/out" && break; sleep 0.1; done
line=$(grep " listening " "$work/out") || { cat "$work/out" >&2; exit 1; }
export POSENC_TARGET="127.0.0.1:$(sed -E 's/.* grpc=[^ ]*:([0-9]+) .*/\1/' <<<"$line")"
PYTHONPATH="$build/client/python" /usr/bin/python3 "$src/tests/python/test_reference_defaults.py" -v
echo "PASS: DeBERTa, Shaw, T5 and Qwen-VL positions as their references compute them"
