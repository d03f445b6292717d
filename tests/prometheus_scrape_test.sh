#!/usr/bin/env bash
# The real Prometheus server scrapes a real posenc-server: starts both on free loopback
# ports with the shipped alert rules loaded, sends requests (good, refused, too large) with
# posenc-client, asks Prometheus' query API for them, then runs every dashboard query and
# every alert expression and requires data from each; stopping posenc makes PosencDown's
# expression true.
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

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen= --threads=1 \
  --max_message_bytes=1048576 >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 100); do grep -q "listening" "$work/server.out" && break; sleep 0.1; done
line=$(grep "listening" "$work/server.out")
grpc=$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$line")
metrics=$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")
echo "posenc-server: grpc=$grpc metrics=$metrics"

prom_port=$(free_port)
cp "$deploy/prometheus/alerts.yml" "$work/alerts.yml"
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - alerts.yml
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
# A refused call, and one the transport refuses (2 MiB over a 1 MiB limit).
"$build/client/posenc-client" encode --target="$grpc" --scheme=learned --table=missing \
  --shape=1,4,8 >/dev/null 2>&1 || true
"$build/client/posenc-client" encode --target="$grpc" --scheme=sinusoidal --shape=1,512,1024 \
  >/dev/null 2>&1 || true

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
[ "${buckets:-0}" -ge 22 ] || { echo "FAIL: expected >= 22 histogram buckets (5us..30s, +Inf), got '$buckets'"; exit 1; }
# The shipped alert rules load, and every metric they and the dashboard name exists.
promtool check rules "$deploy/prometheus/alerts.yml" >/dev/null || { echo "FAIL: alerts.yml"; exit 1; }
exported=$(curl -sf "http://$metrics/metrics")
for metric in $(grep -ohE 'posenc_[a-z_]+' "$deploy/prometheus/alerts.yml" "$deploy/grafana/posenc-dashboard.json" | sort -u); do
  grep -q "^$metric" <<<"$exported" || { echo "FAIL: $metric is not exported"; exit 1; }
done
# rate()s need the counters to move while Prometheus watches: 6 s of mixed load, with
# refused and too-large calls among it.
"$build/client/posenc-client" load --target="$grpc" --concurrency=2 --duration=6s --mix=mixed \
  >/dev/null &
load_pid=$!
for _ in $(seq 12); do
  "$build/client/posenc-client" encode --target="$grpc" --scheme=learned --table=missing \
    --shape=1,4,8 >/dev/null 2>&1 || true
  "$build/client/posenc-client" encode --target="$grpc" --scheme=sinusoidal --shape=1,512,1024 \
    >/dev/null 2>&1 || true
  sleep 0.5
done
wait "$load_pid"
sleep 2
/usr/bin/python3 - "$prom_port" "$deploy" <<'PY' || exit 1
import json, re, sys, urllib.parse, urllib.request
port, deploy = sys.argv[1], sys.argv[2]
def query(q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    return json.load(urllib.request.urlopen(url))["data"]["result"]
def finite(result):
    return [r for r in result if r["value"][1] not in ("NaN", "+Inf", "-Inf")]
rules = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules"))["data"]["groups"]
loaded = sum(len(g["rules"]) for g in rules)
import yaml
shipped = sum(len(g["rules"]) for g in yaml.safe_load(open(f"{deploy}/prometheus/alerts.yml"))["groups"])
assert loaded == shipped, f"Prometheus loaded {loaded} rules, alerts.yml has {shipped}"
failures = []
dash = json.load(open(f"{deploy}/grafana/posenc-dashboard.json"))
for panel in dash["panels"]:
    for t in panel.get("targets", []):
        q = t["expr"].replace("$instance", ".*")
        if not finite(query(q)):
            failures.append(f"dashboard '{panel['title']}': no data for {q}")
for group in yaml.safe_load(open(f"{deploy}/prometheus/alerts.yml"))["groups"]:
    for rule in group["rules"]:
        expr = " ".join(rule["expr"].split())
        m = re.fullmatch(r"absent\((.*)\)", expr)
        inner = m.group(1) if m else re.sub(r"\s*(>=|<=|==|!=|>|<)\s*[-0-9.e]+$", "", expr)
        if not finite(query(inner)):
            failures.append(f"alert {rule['alert']}: no data for {inner}")
for f in failures:
    print("FAIL:", f)
print(f"{len(dash['panels'])} panels and {shipped} alert rules queried")
sys.exit(1 if failures else 0)
PY
# With posenc gone, PosencDown's expression turns true.
kill "$server_pid"; wait "$server_pid" || true; server_pid=
for _ in $(seq 20); do
  down=$(query 'up{job="posenc"} == 0' | value)
  [ "$down" = "0" ] && break
  sleep 1
done
[ "$down" = "0" ] || { echo "FAIL: up{job=\"posenc\"} == 0 did not turn true after posenc stopped"; exit 1; }
echo "PASS: Prometheus scraped posenc's metrics; every dashboard query and alert expression has data; PosencDown's expression fires when posenc stops"
