#!/usr/bin/env bash
# Sets up (with the Go and Java toolchains for the example clients), builds and runs every
# test (unit and integration) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --examples
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
