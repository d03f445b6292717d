#!/usr/bin/env bash
# The real Prometheus server scrapes a real posenc-server: starts both on free loopback
# ports, sends a few requests with posenc-client, and asks Prometheus' query API for them.
# Usage: prometheus_scrape_test.sh BUILD_DIR
set -euo pipefail
build=${1:?build dir}
deploy="$(cd "$(dirname "$0")/.." && pwd)/deploy"
command -v prometheus >/dev/null || { echo "prometheus is not installed (scripts/setup.sh installs it)"; exit 1; }
work=$(mktemp -d)
cleanup() {
  [ -n "${prom_pid:-}" ] && kill "$prom_pid" 2>/dev/null || true
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --threads=1 \
  >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 100); do grep -q "listening" "$work/server.out" && break; sleep 0.1; done
line=$(grep "listening" "$work/server.out")
grpc=$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$line")
metrics=$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")
echo "posenc-server: grpc=$grpc metrics=$metrics"

prom_port=$(free_port)
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: posenc
    static_configs:
      - targets: ["$metrics"]
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!

for i in 1 2 3; do
  "$build/client/posenc-client" encode --target="$grpc" --scheme=sinusoidal --shape=1,8,16 >/dev/null
done
"$build/client/posenc-client" list --target="$grpc" >/dev/null

query() { curl -sf "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1"; }
value() { /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'; }
for _ in $(seq 60); do
  got=$(query 'sum(posenc_requests_total{method="Encode",scheme="sinusoidal",code="OK"})' 2>/dev/null | value 2>/dev/null || true)
  [ "$got" = "3" ] && break
  sleep 1
done
up=$(query 'up{job="posenc"}' | value)
buckets=$(query 'count(posenc_request_duration_seconds_bucket{method="Encode",scheme="sinusoidal"})' | value)
echo "prometheus: up=$up encode_ok=$got duration_buckets=$buckets"
[ "$up" = "1" ] || { echo "FAIL: Prometheus could not scrape posenc"; cat "$work/prometheus.log" | tail -20; exit 1; }
[ "$got" = "3" ] || { echo "FAIL: expected 3 Encode OK requests in Prometheus, got '$got'"; exit 1; }
[ "${buckets:-0}" -ge 18 ] || { echo "FAIL: expected >= 18 histogram buckets (50us..10s, +Inf), got '$buckets'"; exit 1; }
# The shipped alert rules load, and every metric they and the dashboard name exists.
promtool check rules "$deploy/prometheus/alerts.yml" >/dev/null || { echo "FAIL: alerts.yml"; exit 1; }
exported=$(curl -sf "http://$metrics/metrics")
for metric in $(grep -ohE 'posenc_[a-z_]+' "$deploy/prometheus/alerts.yml" "$deploy/grafana/posenc-dashboard.json" | sort -u); do
  grep -q "^$metric" <<<"$exported" || { echo "FAIL: $metric is not exported"; exit 1; }
done
echo "PASS: Prometheus scraped posenc's metrics; the alert rules and dashboard name real metrics"
