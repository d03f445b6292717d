#!/usr/bin/env bash
# The server's log against a real posenc-server: JSON lines for start, every failed call
# (method, code, message, request id, peer), drain and stop; --log_requests logs calls that
# succeed too; a flood of failures is rate-limited (20 lines a second); numbers are JSON
# numbers; a busy port is one line on stderr. Usage: log_test.sh BUILD_DIR
set -euo pipefail
build=${1:?build dir}
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

start() {
  "$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen= --threads=1 "$@" \
    >"$work/out" 2>"$work/log" &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$work/out" && break; sleep 0.1; done
  target=$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$(grep listening "$work/out")")
}
stop() { kill -TERM "$pid"; wait "$pid" || fail "exit status $?"; pid=; }
cli() { "$build/client/posenc-client" "$1" --target="$target" "${@:2}"; }

start --log_format=json
cli encode --scheme=learned --table=missing --shape=1,4,8 --request-id=req-42 >/dev/null 2>&1 &&
  fail "encode with a missing table succeeded"
cli encode --scheme=sinusoidal --shape=1,4,8 >/dev/null || fail "good encode"
# 300 failures from one process (8 threads on one channel): they land within a second or
# two even in a sanitizer build, far above the 20 lines a second the log allows.
PYTHONPATH="$build/client/python" /usr/bin/python3 - "$target" <<'PY'
import sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import posenc
client = posenc.Client(sys.argv[1])
x = np.zeros((1, 1, 2), np.float32)
def fails(_):
    try:
        client.encode(x, posenc.Learned("missing"))
    except posenc.PosencError:
        return True
    return False
with ThreadPoolExecutor(8) as pool:
    assert all(pool.map(fails, range(300))), "an encode with a missing table succeeded"
PY
stop
/usr/bin/python3 - "$work/log" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]  # every line is JSON
events = [l["event"] for l in lines]
assert events[0] == "start" and events[-1] == "stopped" and "drain" in events, events
failed = [l for l in lines if l["event"] == "call_failed"]
first = failed[0]
assert first["method"] == "Encode" and first["code"] == "NOT_FOUND", first
assert first["request_id"] == "req-42" and "missing" in first["message"], first
assert first["peer"].startswith("ipv4:127.0.0.1:"), first
# Numbers are JSON numbers, text stays text.
start = lines[0]
for key in ("threads", "tables", "max_message_bytes", "max_inflight_bytes", "max_concurrent_calls"):
    assert type(start[key]) is int, (key, start[key])
assert start["threads"] == 1 and start["tables"] == 0, start
assert isinstance(start["grace"] if "grace" in start else start["shutdown_grace"], str), start
assert type(first["duration_ms"]) in (int, float) and first["duration_ms"] >= 0, first
assert type(first["suppressed_before"]) is int, first
drain = next(l for l in lines if l["event"] == "drain")
assert type(drain["signal"]) is int and isinstance(drain["grace"], str), drain
assert not any(l["event"] == "call" for l in lines), "a good call was logged without --log_requests"
# At most 20 lines a second: bound the count by the seconds the failed-call lines span.
import datetime
ts = [datetime.datetime.strptime(l["ts"], "%Y-%m-%dT%H:%M:%S.%fZ") for l in failed]
span = (max(ts) - min(ts)).total_seconds()
assert len(failed) <= 20 * (int(span) + 2), f"{len(failed)} failed-call lines in {span:.1f} s: not rate-limited"
assert len(failed) < 301, f"301 failures made {len(failed)} lines: not rate-limited"
# What was left out is counted: the lines plus their suppressed_before counts cover every
# failure but those after the last line.
assert len(failed) + sum(l["suppressed_before"] for l in failed) <= 301, failed
print("json log:", len(lines), "lines,", len(failed), "failed-call lines for 301 failures")
PY

start --log_requests
cli encode --scheme=sinusoidal --shape=1,4,8 >/dev/null || fail "good encode"
stop
grep -E ' INFO call method=Encode scheme=sinusoidal code=OK duration_ms=' "$work/log" >/dev/null ||
  fail "--log_requests did not log the call: $(cat "$work/log")"
# A second server on a busy port: exit status 1 and one line naming the flag, no gRPC dump.
start
set +e
"$build/server/posenc-server" --listen="$target" --metrics_listen= --http_listen= --threads=1 >"$work/busy_out" 2>"$work/busy_err"
code=$?
set -e
stop
[ "$code" = 1 ] || fail "a busy port should exit 1, got $code"
[ "$(wc -l <"$work/busy_err")" = 1 ] || fail "a busy port printed more than one line: $(cat "$work/busy_err")"
grep -q "^posenc-server: port ${target##*:} on ${target%:*} is in use (--listen)$" "$work/busy_err" || fail "busy port: $(cat "$work/busy_err")"
echo "log_test: ok"
