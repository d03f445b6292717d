#!/usr/bin/env bash
# Sinusoidal2D, Fourier features, MULTIPLY fusion and relative-order tables from a real
# posenc-server against float64 numpy references (tests/python/test_absolute_references.py),
# with a learned table and a Fourier frequency table loaded by --table.
# Usage: absolute_references_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
[ -f "$build/client/python/posenc/v1/posenc_pb2.py" ] \
  || { echo "FAIL: no Python stubs in $build/client/python (ninja -C $build posenc_python)"; exit 1; }

/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(5)
np.save(sys.argv[1] + "/learned.npy", rng.uniform(-1, 1, size=(64, 16)).astype(np.float32))
np.save(sys.argv[1] + "/fourier_b.npy", rng.normal(0, 3, size=(6, 2)).astype(np.float32))
np.save(sys.argv[1] + "/fourier_b64.npy", rng.normal(0, 30, size=(5, 1)))  # float64, as numpy makes it
PY
"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen= --threads=1 --shm=true \
  --table="pos=$work/learned.npy" --table="fourier_b=$work/fourier_b.npy" \
  --table="fourier_b64=$work/fourier_b64.npy" >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/out" && break; sleep 0.1; done
line=$(grep " listening " "$work/out") || { cat "$work/out" >&2; exit 1; }
export POSENC_TARGET="127.0.0.1:$(sed -E 's/.* grpc=[^ ]*:([0-9]+) .*/\1/' <<<"$line")"
export POSENC_SOURCE_DIR="$src" POSENC_LEARNED="$work/learned.npy" POSENC_FOURIER_B="$work/fourier_b.npy" \
  POSENC_FOURIER_B64="$work/fourier_b64.npy"
PYTHONPATH="$build/client/python" /usr/bin/python3 "$src/tests/python/test_absolute_references.py" -v
# The calls above are counted under their schemes' labels, failures under their codes.
metrics=$(sed -E 's/.* metrics=([^ ]+).*/\1/' <<<"$line")
/usr/bin/python3 - "http://$metrics/metrics" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
def count(labels):
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith("posenc_requests_total{") and all(x in l for x in labels))
for scheme in ("sinusoidal_2d", "fourier"):
    for method in ("Encode", "EncodeStream", "ModelInfer"):
        assert count(['scheme="%s"' % scheme, 'method="%s"' % method, 'code="OK"']) >= 1, (scheme, method)
    assert count(['scheme="%s"' % scheme, 'code="INVALID_ARGUMENT"']) >= 1, scheme
    assert ('posenc_kernel_duration_seconds_count{scheme="%s"}' % scheme) in text, scheme
print("metrics count sinusoidal_2d and fourier calls under their labels")
PY
echo "PASS: sinusoidal_2d, fourier, multiply and relative-order tables against numpy"
