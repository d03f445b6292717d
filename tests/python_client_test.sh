#!/usr/bin/env bash
# The Python package `posenc` (client/python/posenc) against real posenc-servers: a plain one,
# a mutual-TLS one (certificates from openssl), and one with --shm. Runs tests/python/test_client.py (unittest) with Debian's /usr/bin/python3 and stops
# every server with SIGTERM.
# Usage: python_client_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
[ -f "$build/client/python/posenc/v1/posenc_pb2.py" ] \
  || { echo "FAIL: no Python stubs in $build/client/python (ninja -C $build posenc_python)"; exit 1; }

# start NAME ARGS...: runs posenc-server on 127.0.0.1:0 (in this shell, so its pid is
# kept for the SIGTERM check below) and writes the grpc= address of its start line
# "posenc-server VERSION listening grpc=HOST:PORT metrics=HOST:PORT ..." to $work/NAME.addr.
start() {
  local name=$1; shift
  "$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen= --threads=1 \
    "$@" >"$work/$name.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q " listening " "$work/$name.out" && break; sleep 0.1; done
  local line
  line=$(grep " listening " "$work/$name.out") || { cat "$work/$name.out" >&2; return 1; }
  sed -E 's/.* grpc=([^ ]+) .*/\1/' <<<"$line" >"$work/$name.addr"
}

export POSENC_TARGET POSENC_TLS_TARGET POSENC_TLS_DIR="$work" POSENC_SHM_TARGET=""
# A Shaw table [2k + 1 = 7, d = 8] that the tests read back for their numpy reference.
export POSENC_SHAW_TABLE="$work/shaw.npy"
/usr/bin/python3 -c 'import sys, numpy as np
np.save(sys.argv[1], (np.arange(56, dtype=np.float32).reshape(7, 8) % 11 - 5) / 8)' \
  "$POSENC_SHAW_TABLE"
start plain --table=shawrel="$POSENC_SHAW_TABLE"
POSENC_TARGET=$(cat "$work/plain.addr")

(cd "$work" &&
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=posenc test CA" \
    -keyout ca.key -out ca.pem 2>/dev/null &&
  for who in server client; do
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout $who.key -out $who.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >$who.ext
    openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
      -extfile $who.ext -out $who.pem 2>/dev/null
  done)
start tls --tls_cert="$work/server.pem" --tls_key="$work/server.key" \
  --tls_client_ca="$work/ca.pem"
POSENC_TLS_TARGET=$(cat "$work/tls.addr")
start shm --shm=true
POSENC_SHM_TARGET=$(cat "$work/shm.addr")

export POSENC_CLIENT="$build/client/posenc-client" POSENC_SOURCE_DIR="$src"
set +e  # a failing unittest must still reach the checks below
PYTHONPATH="$build/client/python" /usr/bin/python3 "$src/tests/python/test_client.py" -v \
  2>&1 | tee "$work/unittest.log"
status=${PIPESTATUS[0]}
set -e

# The README's Python example, as written, against the plain server.
readme_example=$(/usr/bin/python3 -c 'import re,sys; print(re.search(r"```python\n(.*?)```", open(sys.argv[1]).read(), re.S).group(1))' "$src/README.md")
(cd "$src" && PYTHONPATH="$build/client/python" /usr/bin/python3 -c "${readme_example//127.0.0.1:50051/$POSENC_TARGET}") \
  || { echo "FAIL: the README's Python example"; status=1; }

# Each server stops on SIGTERM within its grace and exits 0.
for p in "${pids[@]}"; do
  kill -TERM "$p"
  wait "$p" || { echo "FAIL: posenc-server $p exited $? after SIGTERM"; status=1; }
done
pids=()
[ "$status" = 0 ] && echo "PASS: the Python client against real servers"
exit "$status"
