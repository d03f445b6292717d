#!/usr/bin/env bash
# `cmake --install` as a user runs it: installs BUILD_DIR into a temporary prefix, checks
# bin/posenc-server and bin/posenc-client, builds tests/install_consumer (find_package(posenc),
# posenc::client) against that prefix alone, and runs it against the installed server;
# also checks that the CLI takes its connection flags before the command.
# Usage: cmake_install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
src=$(cd "${2:?source dir}" && pwd)
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
for f in bin/posenc-server bin/posenc-client lib/cmake/posenc/posencConfig.cmake \
         include/posenc/client/posenc_client.h include/posenc/posenc/v1/posenc.pb.h; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
grep -q 'CMAKE_INSTALL_PREFIX:PATH=/usr/local$' "$build/CMakeCache.txt" \
  || echo "NOTE: $build is configured with another CMAKE_INSTALL_PREFIX than /usr/local"

"$prefix/bin/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 >"$work/server.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/server.out" && break; sleep 0.1; done
target=$(grep -m1 " listening " "$work/server.out" | sed -E 's/.* grpc=([^ ]+) .*/\1/')
[ -n "$target" ] || { cat "$work/server.out"; fail "the installed server did not start"; }

# Connection flags before the command, after it, and both ways with a separate value.
"$prefix/bin/posenc-client" --target="$target" health >/dev/null || fail "posenc-client --target=X health"
"$prefix/bin/posenc-client" --target "$target" --timeout 5s list >/dev/null || fail "posenc-client --target X --timeout 5s list"
"$prefix/bin/posenc-client" health --target="$target" >/dev/null || fail "posenc-client health --target=X"
if "$prefix/bin/posenc-client" --shape=1,2,3 encode >"$work/usage" 2>&1; then fail "a command flag before the command was accepted"; fi
grep -q "comes before the command" "$work/usage" || { cat "$work/usage"; fail "no message for a flag before the command"; }

# The consumer sees only the installed tree (and the system's packages). A sanitizer build's
# libraries need the sanitizer runtime at the consumer's link: that build checks the rest,
# the normal build builds the consumer.
if grep -q '^POSENC_SANITIZE:BOOL=ON$' "$build/CMakeCache.txt"; then
  echo "PASS: cmake --install gives posenc-server, posenc-client and the package files (the consumer is built by the normal build)"
  exit 0
fi
cmake -S "$src/tests/install_consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configuring the consumer"; }
ninja -C "$work/consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building the consumer"; }
if grep "INCLUDES" "$work/consumer/build.ninja" | grep -q "$src"; then fail "the consumer includes from the source tree"; fi
"$work/consumer/consumer" "$target" || fail "the consumer's call"
echo "PASS: cmake --install gives posenc-server, posenc-client and find_package(posenc) with posenc::client"
