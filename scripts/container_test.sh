#!/usr/bin/env bash
# Builds the image from the Dockerfile with docker or podman (CONTAINER=docker|podman picks;
# default: docker when its daemon answers, else podman), runs it on a non-default port, and checks
# the image's own HEALTHCHECK (run by the engine: `podman healthcheck run`, or docker's health
# status) and its script, health, ListSchemes, an Encode and /metrics from outside, then
# that `stop` drains and exits 0 within its 10 s. podman builds with --format docker: its
# default OCI format has no HEALTHCHECK and would drop it. On a machine with no registry,
# podman needs a debian:bookworm-slim image first (e.g. `debootstrap --variant=minbase
# bookworm DIR` then `tar -C DIR -c . | podman import - docker.io/library/debian:bookworm-slim`). Not part of ctest (it needs a
# container runtime and several minutes); run it by hand or in a pipeline that has one.
set -euo pipefail
cd "$(dirname "$0")/.."
# CONTAINER_IMAGE=TAG checks an image built before (with the engine's health check kept)
# instead of building one.
tag=${CONTAINER_IMAGE:-localhost/posenc:test}
engine=${CONTAINER:-$(docker info >/dev/null 2>&1 && echo docker || echo podman)}
command -v "$engine" >/dev/null || { echo "container_test: neither docker nor podman is installed"; exit 1; }
run=("$engine")
build_flags=(--network host)
if [ "$engine" = podman ]; then
  run=(podman --runtime "${PODMAN_RUNTIME:-runc}")
  build_flags+=(--format docker --isolation=chroot --pull=never)
fi
[ -n "${CONTAINER_IMAGE:-}" ] || "$engine" build "${build_flags[@]}" -t "$tag" . >/tmp/posenc-container-build.log
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
hport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
name=posenc-test-$$
"${run[@]}" run -d --name "$name" --network host "$tag" \
  --listen=127.0.0.1:$port --metrics_listen=127.0.0.1:$mport --http_listen=127.0.0.1:$hport >/dev/null
trap '"${run[@]}" rm -f "$name" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$mport/metrics" >/dev/null && break; sleep 0.2; done
cli=build/client/posenc-client
[ -x "$cli" ] || scripts/build.sh
$cli health --target=127.0.0.1:$port
$cli list --target=127.0.0.1:$port | sed -n 1,3p
$cli encode --target=127.0.0.1:$port --shape=1,8,16 >/dev/null
curl -sf "http://127.0.0.1:$hport/v2/health/ready" >/dev/null || { echo "FAIL: HTTP /v2/health/ready"; exit 1; }
curl -sf "http://127.0.0.1:$mport/metrics" >/tmp/posenc-container-metrics.txt
grep -Eq '^posenc_requests_total\{code="OK",method="Encode",scheme="sinusoidal"\} [1-9]' /tmp/posenc-container-metrics.txt
# The image's HEALTHCHECK follows --listen (not :50051).
[ "$("${run[@]}" exec "$name" posenc-healthcheck)" = SERVING ]
# The engine itself runs the image's HEALTHCHECK (none would mean the format dropped it).
[ -n "$("$engine" image inspect "$tag" --format '{{if .Config.Healthcheck}}{{.Config.Healthcheck.Test}}{{end}}')" ] \
  || { echo "FAIL: the image $tag has no HEALTHCHECK"; exit 1; }
if [ "$engine" = podman ]; then
  "${run[@]}" healthcheck run "$name" || { echo "FAIL: podman healthcheck run $name"; exit 1; }
else
  for _ in $(seq 30); do
    health=$(docker inspect "$name" --format '{{.State.Health.Status}}')
    [ "$health" = healthy ] && break; sleep 1
  done
  [ "$health" = healthy ] || { echo "FAIL: docker reports the container $health"; exit 1; }
fi
# stop sends SIGTERM and waits 10 s: the drain (8 s at most) ends first, with exit 0.
"${run[@]}" stop -t 10 "$name" >/dev/null
status=$("${run[@]}" inspect "$name" --format '{{.State.ExitCode}}')
[ "$status" = 0 ] || { echo "FAIL: the container exited $status on stop"; exit 1; }
size=$("$engine" image inspect "$tag" --format '{{.Size}}')
echo "PASS: container $tag ($((size / 1048576)) MiB, $engine) serves gRPC and metrics, its health check runs under $engine and follows --listen, stop drains to exit 0"
