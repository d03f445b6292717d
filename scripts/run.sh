#!/usr/bin/env bash
# Sets up, builds and runs posenc-server with its defaults: gRPC on 0.0.0.0:50051, HTTP/REST
# (the Open Inference Protocol) on 0.0.0.0:8000, Prometheus metrics on 0.0.0.0:9464. Extra
# flags pass through (e.g. --listen=127.0.0.1:50052). Builds only the two programs, into
# build/: posenc-server, and posenc-client for the README's first calls
# (build/client/posenc-client), with ninja's progress lines; scripts/test.sh builds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "run: building posenc-server and posenc-client ($(nproc) jobs)"
ninja -C build -j"$(nproc)" posenc-server posenc-client
echo "run: the client is build/client/posenc-client (e.g. build/client/posenc-client health)"
exec build/server/posenc-server "$@"
