#!/usr/bin/env bash
# Builds the image from the Dockerfile with podman, runs it, and checks health, ListSchemes,
# an Encode and /metrics from outside the container. Not part of ctest (it needs podman and
# several minutes); run it by hand or in a pipeline that has podman.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=localhost/posenc:test
if [ -f ../shared/tools/container-env.sh ]; then bash ../shared/tools/container-env.sh >/dev/null; fi
podman build --isolation=chroot --pull=never --network host -t "$tag" . >/tmp/posenc-container-build.log
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
name=posenc-test-$$
podman --runtime runc run -d --rm --name "$name" --network host "$tag" \
  --listen=127.0.0.1:$port --metrics_listen=127.0.0.1:$mport >/dev/null
trap 'podman --runtime runc stop -t 5 "$name" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$mport/metrics" >/dev/null && break; sleep 0.2; done
cli=build/client/posenc-client
[ -x "$cli" ] || scripts/build.sh
$cli health --target=127.0.0.1:$port
$cli list --target=127.0.0.1:$port | head -3
$cli encode --target=127.0.0.1:$port --shape=1,8,16 >/dev/null
curl -sf "http://127.0.0.1:$mport/metrics" | grep -q 'posenc_requests_total{code="OK",method="Encode"'
size=$(podman image inspect "$tag" --format '{{.Size}}')
echo "PASS: container $tag ($((size / 1048576)) MiB) serves gRPC and metrics"
