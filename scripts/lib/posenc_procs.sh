# shellcheck shell=bash disable=SC2034  # fail is read by the scripts that source this
# Helpers that scripts/soak.sh, scripts/failover.sh and tests/load_test.sh source: start a
# real posenc-server and read its start line, sum its request counter, read its RSS, read
# and print `posenc-client load --json`, report checks. Needs bash, curl, /usr/bin/python3.

# start_server NAME LOGFILE SERVER_BINARY [FLAGS...]: runs the server in the background and
# waits (10 s at most) for its start line
#   "posenc-server ... listening grpc=HOST:PORT metrics=HOST:PORT ...";
# sets NAME_pid, NAME_grpc and NAME_metrics. Returns 1 if the server exits or never starts.
start_server() {
  local name=$1 log=$2 binary=$3
  shift 3
  "$binary" "$@" >"$log" 2>&1 &
  local pid=$!
  printf -v "${name}_pid" '%s' "$pid"
  local line=""
  for _ in $(seq 100); do
    line=$(grep -m1 " listening " "$log" 2>/dev/null || true)
    [ -n "$line" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$line" ]; then
    echo "FAIL: $name did not start; its output:" >&2
    cat "$log" >&2
    return 1
  fi
  printf -v "${name}_grpc" '%s' "$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$line")"
  printf -v "${name}_metrics" '%s' "$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")"
}

# requests_total METRICS_ADDR: the sum of posenc_requests_total over every series ("" when
# /metrics does not answer).
requests_total() {
  curl -sf --max-time 5 "http://$1/metrics" | awk '/^posenc_requests_total[{ ]/ { s += $NF } END { if (NR) printf "%.0f\n", s }'
}

# requests_total_when METRICS_ADDR EXPECTED: requests_total, polled for up to 5 s until it
# equals EXPECTED (the counter is bumped as each call ends, a moment after the client has
# its response); prints the last value read.
requests_total_when() {
  local value=""
  for _ in $(seq 20); do
    value=$(requests_total "$1")
    [ "$value" = "$2" ] && break
    sleep 0.25
  done
  echo "$value"
}

# rss_kib PID: the resident set size in KiB ("" once the process is gone).
rss_kib() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true
}

# json_field FILE KEY[.KEY...]: one value of a JSON object (dicts as compact JSON).
json_field() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2].split("."):
    value = value[key]
print(json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else value)
PY
}

# free_port: a TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# now_s: seconds since the epoch, with fractions.
now_s() { date +%s.%N; }

# check OK MESSAGE: prints "ok:   MESSAGE" when OK is 1, else "FAIL: MESSAGE" and sets fail=1.
check() {
  if [ "$1" = 1 ]; then echo "ok:   $2"; else echo "FAIL: $2"; fail=1; fi
}

# print_load_figures FILE: the throughput, latency and codes of `posenc-client load --json`.
print_load_figures() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("client: %d calls in %.1f s: %.1f calls/s, %.2f MB/s sent, %.2f MB/s received" % (
    r["calls"], r["seconds"], r["calls_per_second"], r["mb_per_second_sent"],
    r["mb_per_second_received"]))
print("client latency: p50 %.3f ms, p99 %.3f ms, max %.3f ms; codes %s" % (
    r["latency_ms"]["p50"], r["latency_ms"]["p99"], r["latency_ms"]["max"],
    " ".join("%s=%d" % kv for kv in r["codes"].items())))
for m in r["mix"]:
    print("  %-28s %8d calls, %d errors, p50 %.3f ms, p99 %.3f ms" % (
        m["item"], m["calls"], m["errors"], m["latency_ms"]["p50"], m["latency_ms"]["p99"]))
PY
}
