#!/usr/bin/env bash
# The Go or the Java example client (client/go, client/java), built from the proto with
# Debian's packages as their build.sh does, against a real posenc-server: each checks an
# Encode and an EncodeStream against the float64 formula and a request without a scheme
# against INVALID_ARGUMENT, and exits non-zero on any mismatch. Skipped (exit 77) when the
# language's toolchain is not installed (scripts/setup.sh --examples installs it).
# Builds in a temporary folder; nothing is written into the source tree.
# Usage: example_client_test.sh go|java BUILD_DIR SOURCE_DIR
set -euo pipefail
language=${1:?go or java}
build=${2:?build dir}
src=${3:?source dir}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
case "$language" in
  go) command -v go >/dev/null && [ -d /usr/share/gocode/src/google.golang.org/grpc ] ||
        skip "go or golang-google-grpc-dev is not installed" ;;
  java) command -v javac >/dev/null && [ -f /usr/share/java/grpc-netty.jar ] ||
          skip "javac or libgrpc-java is not installed" ;;
  *) fail "unknown language $language" ;;
esac

work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 >"$work/server.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/server.out" && break; sleep 0.1; done
target=$(grep -m1 " listening " "$work/server.out" | sed -E 's/.* grpc=([^ ]+) .*/\1/')
[ -n "$target" ] || { cat "$work/server.out"; fail "the server did not start"; }

"$src/client/$language/build.sh" "$work/out" || fail "client/$language/build.sh"
case "$language" in
  go) "$work/out/bin/encode" "$target" >"$work/client.out" 2>&1 || { cat "$work/client.out"; fail "the Go example"; } ;;
  java) "$src/client/java/run.sh" "$work/out" "$target" >"$work/client.out" 2>&1 || { cat "$work/client.out"; fail "the Java example"; } ;;
esac
cat "$work/client.out"
grep -q "^matches float64$" "$work/client.out" || fail "the $language example did not report a match"
grep -q "^no scheme: Invalid" "$work/client.out" || grep -q "^no scheme: INVALID_ARGUMENT" "$work/client.out" ||
  fail "the $language example did not see INVALID_ARGUMENT"
echo "PASS: the $language example against $target"
