#!/usr/bin/env bash
# posenc-client and the Python grpcio example against a real posenc-server: every CLI
# command, .npy in and out, an HF config, and exit codes on errors.
# Usage: cli_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening "$work/out" && break; sleep 0.1; done
target=$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$(grep listening "$work/out")")
target="127.0.0.1:${target##*:}"
cli() { "$build/client/posenc-client" "$1" --target="$target" "${@:2}"; }

cli health | grep -q SERVING || fail "health"
"$build/client/posenc-client" --version | grep -qE '^posenc-client [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version"
"$build/server/posenc-server" --version | grep -qE '^posenc-server [0-9]+\.[0-9]+\.[0-9]+$' ||
  fail "server --version"
cli list | grep -q graph_laplacian || fail "list"

/usr/bin/python3 - "$work/x.npy" <<'PY'
import sys, numpy as np
np.save(sys.argv[1], np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6) / 10)
PY
cli encode --scheme=sinusoidal --input="$work/x.npy" --offsets=3 --output="$work/y.npy" >/dev/null
/usr/bin/python3 - "$work/x.npy" "$work/y.npy" <<'PY'
import sys, numpy as np
x, y = np.load(sys.argv[1]), np.load(sys.argv[2])
pos = np.arange(3, 7, dtype=np.float64)[:, None]
i = np.arange(0, 6, 2, dtype=np.float64)
pe = np.zeros((4, 6)); pe[:, 0::2] = np.sin(pos / 1e4 ** (i / 6)); pe[:, 1::2] = np.cos(pos / 1e4 ** (i / 6))
err = np.abs(y - (x + pe)).max()
assert y.shape == x.shape and err < 1e-6, err
print("cli encode matches numpy, max error", err)
PY

cli encode --hf-config="$src/tests/fixtures/hf_configs/llama-3.1-8b.json" --offsets=100000 \
  --output="$work/q.npy" | grep -qi "shape" || fail "encode with --hf-config"
# M-RoPE segments with their kind: an image grid's frames default to temporal scale 0 (HF
# Qwen2.5-VL), which "@0" spells out; without a kind the scale is 1.
/usr/bin/python3 -c "import numpy as np; np.save('$work/mq.npy', np.random.default_rng(3).standard_normal((1, 9, 1, 128)).astype(np.float32))"
vl="$src/tests/fixtures/hf_configs/qwen2.5-vl-7b-instruct.json"
for segs in "1,image:2x2x2" "1,2x2x2@0" "1,2x2x2" "1,video:2x2x2@2"; do
  cli encode --hf-config="$vl" --input="$work/mq.npy" --mrope-segments="$segs"     --output="$work/m_${segs//[^a-z0-9]/_}.npy" >/dev/null || fail "encode --mrope-segments=$segs"
done
/usr/bin/python3 - "$work" <<'PY' || fail "--mrope-segments kinds"
import sys, numpy as np
w = sys.argv[1]
image, zero, plain, video = (np.load("%s/m_%s.npy" % (w, n)) for n in
                             ("1_image_2x2x2", "1_2x2x2_0", "1_2x2x2", "1_video_2x2x2_2"))
assert np.array_equal(image, zero) and not np.array_equal(image, plain), "image kind"
assert not np.array_equal(video, plain), "video scale"
PY
if out=$(cli encode --hf-config="$vl" --input="$work/mq.npy" --mrope-segments="1,photo:2x2x2" 2>&1); then
  fail "--mrope-segments with an unknown kind was accepted"
fi
grep -q "neither a text length" <<<"$out" || fail "--mrope-segments with an unknown kind: $out"
cli table --scheme=rope --length=64 --dim=8 --output="$work/t.npy" >/dev/null
/usr/bin/python3 -c "import numpy as np,sys; t=np.load('$work/t.npy'); assert t.shape==(64,2,4), t.shape" \
  || fail "table shape"
cli stream --shape=1,16,32 --count=20 | grep -qE "20" || fail "stream"

cli bias --scheme=alibi --heads=4 --query-length=2 --key-length=4 --mode=causal \
  | grep -q "shape \[4,2,4\]" || fail "bias alibi"
cli bias --scheme=t5 --query-length=2 --key-length=4 --bidirectional | grep -q INT32 || fail "bias t5"
cli graph --nodes=5 --edges=0-1,1-2,2-3,3-4 --k=2 | grep -q "eigenvalues: 0.381966 1.38197" \
  || fail "graph path eigenvalues (2 - 2cos(pi j / 5))"
cli encode --scheme=hierarchical --shape=1,3,4 --fill=zeros --levels="0,1,0;0,0,1" \
  --level-scales=1,0.5 | grep -q "first: 0 1.5 0 1.5" || fail "hierarchical"
cli encode --scheme=continuous --shape=1,3,4 --fill=zeros --values=0,0.5,2 --value-scale=10 \
  | grep -q "first: 0 1 0 1 -0.958924" || fail "continuous"
cli encode --scheme=sinusoidal_2d --grid-height=2 --grid-width=3 --cls-token --shape=1,7,8 \
  --fill=zeros --output="$work/g.npy" >/dev/null || fail "sinusoidal_2d"
cli encode --scheme=fourier --frequencies=0.25,0.5,-1 --num-axes=1 --input="$work/x.npy" \
  --fusion=multiply --pe-scale=2 --values=0,0.5,1.5,4 --output="$work/f.npy" >/dev/null || fail "fourier"
cli table --scheme=sinusoidal --layout=concatenated --length=6 --dim=4 --first-position=4 \
  --position-step=-1 --clamp-position=2 --rows-per-chunk=4 --output="$work/xl.npy" >/dev/null \
  || fail "table in relative order"
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
w = sys.argv[1]
# MAE's get_2d_sincos_pos_embed(8, (2, 3), cls_token=True): [E(column), E(row)].
def e(p, dim):
    omega = 1.0 / 10000 ** (np.arange(dim // 2) / (dim / 2))
    return np.concatenate([np.sin(p * omega), np.cos(p * omega)])
want = np.zeros((7, 8))
for i in range(2):
    for j in range(3):
        want[1 + i * 3 + j] = np.concatenate([e(j, 4), e(i, 4)])
g = np.load(w + "/g.npy")[0]
assert np.abs(g - want).max() < 2e-7, np.abs(g - want).max()
x, f = np.load(w + "/x.npy"), np.load(w + "/f.npy")
b = np.array([0.25, 0.5, -1.0])
v = np.array([0, 0.5, 1.5, 4])[:, None]
pe = np.concatenate([np.cos(2 * np.pi * v * b), np.sin(2 * np.pi * v * b)], axis=1)
assert np.abs(f - x * (pe * 2)).max() < 1e-5, np.abs(f - x * pe * 2).max()
t = np.load(w + "/xl.npy")
pos = np.clip(np.arange(4, -2, -1.0), -2, 2)[:, None]
inv = 1 / 10000 ** (np.arange(0, 4, 2) / 4)
assert np.abs(t - np.concatenate([np.sin(pos * inv), np.cos(pos * inv)], 1)).max() < 2e-7
print("cli sinusoidal_2d, fourier multiply and the relative-order table match numpy")
PY

set +e
cli encode --scheme=learned --table=missing --shape=1,2,4 >/dev/null 2>"$work/err"
code=$?
set -e
[ "$code" = 1 ] || fail "missing table should exit 1, got $code"
grep -q NOT_FOUND "$work/err" || fail "missing table should print NOT_FOUND: $(cat "$work/err")"

# encode --shm against a server with --shm: the same answer as inline, nothing left in /dev/shm.
"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 --shm \
  >"$work/shm_out" 2>&1 &
shm_pid=$!
for _ in $(seq 100); do grep -q listening "$work/shm_out" && break; sleep 0.1; done
shm_target=127.0.0.1:$(sed -E 's/.*grpc=[^ ]+:([0-9]+) .*/\1/' <<<"$(grep listening "$work/shm_out")")
"$build/client/posenc-client" encode --target="$shm_target" --scheme=rope --shape=1,4,2,8 \
  --key-shape=1,4,1,8 --seed=5 --output="$work/inline.npy" --key-output="$work/inline_k.npy" >/dev/null
"$build/client/posenc-client" encode --target="$shm_target" --scheme=rope --shape=1,4,2,8 \
  --key-shape=1,4,1,8 --seed=5 --shm --output="$work/shm.npy" --key-output="$work/shm_k.npy" >/dev/null ||
  fail "encode --shm"
# A scheme without keys prints no key_output line.
"$build/client/posenc-client" encode --target="$shm_target" --scheme=sinusoidal --shape=1,4,8 --shm \
  >"$work/shm_sin" 2>&1 || { cat "$work/shm_sin"; fail "encode --shm (sinusoidal)"; }
grep -q "^output: shape \[1,4,8\]" "$work/shm_sin" || { cat "$work/shm_sin"; fail "encode --shm printed no output line"; }
! grep -q "key_output" "$work/shm_sin" || { cat "$work/shm_sin"; fail "encode --shm printed a key_output for sinusoidal"; }
kill "$shm_pid"; wait "$shm_pid" || true
cmp -s "$work/inline.npy" "$work/shm.npy" && cmp -s "$work/inline_k.npy" "$work/shm_k.npy" ||
  fail "encode --shm differs from inline"
! ls /dev/shm | grep -q posenc_cli_ || fail "encode --shm left its object in /dev/shm"

# make_samples.py without a folder writes into build/samples, never into the current folder.
mkdir "$work/cwd"
(cd "$work/cwd" && /usr/bin/python3 "$src/scripts/make_samples.py" >/dev/null) || fail "make_samples.py"
[ -z "$(ls -A "$work/cwd")" ] || fail "make_samples.py wrote into the current folder: $(ls "$work/cwd")"
[ -f "$src/build/samples/x.npy" ] || fail "make_samples.py wrote no build/samples/x.npy"

# plot: a PNG of the right size whose pixels follow the signs of sin/cos.
cli plot --scheme=sinusoidal --length=16 --dim=8 --cell=2 --output="$work/pe.png" >/dev/null ||
  fail "plot"
/usr/bin/python3 - "$work/pe.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", data[16:24])
assert (w, h) == (16, 32), (w, h)
idat = b"".join(data[i + 8:i + 8 + struct.unpack(">I", data[i:i + 4])[0]]
                for i in range(8, len(data)) if data[i + 4:i + 8] == b"IDAT")
raw = zlib.decompress(idat)
row = lambda y: raw[y * (1 + 3 * w) + 1:(y + 1) * (1 + 3 * w)]
# position 0: sin(0) = 0 is white, cos(0) = 1 is the reddest colour
assert row(0)[0:3] == b"\xff\xff\xff", row(0)[0:3]
r, g, b = row(0)[6:9]
assert r > 150 and g < 60 and b < 70, (r, g, b)
PY
POSENC_PYTHON_STUBS="$build/client/python/posenc" /usr/bin/python3 "$src/client/python/posenc_example.py" --target="$target" >"$work/py" 2>&1 \
  || { cat "$work/py"; fail "python example"; }
echo "PASS: posenc-client and the Python example against a real server"
