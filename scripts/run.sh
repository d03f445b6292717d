#!/usr/bin/env bash
# Sets up, builds and runs posenc-server with sensible defaults
# (gRPC on 0.0.0.0:50051, Prometheus metrics on 0.0.0.0:9464). Extra flags pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/server/posenc-server "$@"
