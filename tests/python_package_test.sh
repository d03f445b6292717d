#!/usr/bin/env bash
# The Python package as a user installs it: `pip install ./client/python` into a fresh
# `python3 -m venv --system-site-packages` (no package index: grpcio, protobuf and numpy come
# from the system), then a wheel (`pip wheel`) and the sdist, each installed and calling a
# real posenc-server: health, an Encode checked against float64 numpy, an error's code.
# Usage: python_package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
python=/usr/bin/python3
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 >"$work/server.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/server.out" && break; sleep 0.1; done
target=$(grep -m1 " listening " "$work/server.out" | sed -E 's/.* grpc=([^ ]+) .*/\1/')
[ -n "$target" ] || { cat "$work/server.out"; fail "the server did not start"; }

# call VENV: imports posenc from VENV (never from the source tree) and calls the server.
call() {
  (cd "$work" && "$1/bin/python" - "$target" <<'PY'
import sys
import numpy as np
import posenc

assert "site-packages" in posenc.__file__, posenc.__file__
client = posenc.Client(sys.argv[1])
assert client.health() == "SERVING", client.health()
x = np.linspace(-1, 1, 2 * 5 * 8).reshape(2, 5, 8).astype(np.float32)
y = client.encode(x, posenc.Sinusoidal(), positions={"offsets": [0, 7]})
pos = (np.arange(5)[None, :] + np.array([0, 7])[:, None]).astype(np.float64)
inv = 10000.0 ** (-np.arange(0, 8, 2) / 8.0)
pe = np.zeros((2, 5, 8))
pe[..., 0::2] = np.sin(pos[..., None] * inv)
pe[..., 1::2] = np.cos(pos[..., None] * inv)
err = np.max(np.abs(y - (x.astype(np.float64) + pe)))
assert err < 1e-6, err
try:
    client.encode(x, posenc.Learned(table="missing"))
    raise AssertionError("a missing table was accepted")
except posenc.PosencError as e:
    assert e.code.name == "NOT_FOUND", e.code
print("posenc", posenc.__file__, "max error", err)
PY
  )
}

venv="$work/venv"
"$python" -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --no-index --no-input --disable-pip-version-check "$src/client/python" \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; fail "pip install ./client/python"; }
call "$venv" || fail "the package installed from the source folder"
git -C "$src" status --porcelain --ignored client/python | grep "^!!" | grep -v __pycache__ \
  && fail "pip install wrote into the source tree"

"$venv/bin/pip" wheel --no-deps --no-index --disable-pip-version-check -w "$work/dist" \
  "$src/client/python" >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; fail "pip wheel"; }
wheel=$(ls "$work"/dist/posenc-*-py3-none-any.whl) || fail "no wheel in $work/dist"
"$venv/bin/pip" install --no-index --force-reinstall --no-deps "$wheel" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log"; fail "pip install $wheel"; }
call "$venv" || fail "the wheel"

# The sdist carries posenc.proto, so it builds away from the repository.
(cd "$src/client/python" && "$python" -B -c \
  'import sys; sys.path.insert(0, "build_backend"); import posenc_build; print(posenc_build.build_sdist(sys.argv[1]))' \
  "$work/dist") >"$work/sdist.name"
sdist="$work/dist/$(cat "$work/sdist.name")"
tar -tzf "$sdist" >"$work/sdist.list"
grep -q "/proto/posenc/v1/posenc.proto$" "$work/sdist.list" || fail "the sdist lacks posenc.proto"
"$venv/bin/pip" install --no-index --force-reinstall --no-deps "$sdist" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log"; fail "pip install $sdist"; }
call "$venv" || fail "the sdist"
echo "PASS: pip install ./client/python, the wheel and the sdist each call a real server"
