#!/usr/bin/env bash
# Draws the pictures of docs/schemes.md (docs/images/) with `posenc-client plot` against a real posenc-server, so
# they always show what the server computes. Usage: scripts/make_pictures.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=docs/images
mkdir -p "$out"
log=$(mktemp)
"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
target=$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$(grep listening "$log")")
plot() { "$build/client/posenc-client" plot --target="$target" "$@"; }
plot --scheme=sinusoidal --length=128 --dim=128 --cell=3 --output="$out/sinusoidal.png"
plot --scheme=rope --length=128 --dim=64 --cell=3 --output="$out/rope_cos_sin.png"
plot --scheme=alibi --heads=4 --query-length=48 --key-length=48 --cell=3 --output="$out/alibi.png"
plot --scheme=t5 --query-length=64 --key-length=64 --cell=3 --output="$out/t5_buckets.png"
plot --scheme=graph --side=16 --k=6 --cell=6 --output="$out/grid_eigenvectors.png"
plot --scheme=sinusoidal_2d --side=14 --dim=16 --cell=4 --output="$out/sinusoidal_2d.png"
