#!/usr/bin/env bash
# shellcheck disable=SC2154  # start_server sets NAME_pid, NAME_grpc, NAME_metrics
# `posenc-client load` against a real posenc-server on a loopback port: a 3 s mixed run has
# 0 errors and its printed counts add up and equal the server's posenc_requests_total;
# --max-requests bounds the calls exactly; refused calls are counted by code (exit 1);
# bad flags exit 2 naming the flag.
# Usage: load_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?build dir}
source_dir=${2:?source dir}
# shellcheck source=../scripts/lib/posenc_procs.sh
source "$source_dir/scripts/lib/posenc_procs.sh"
client="$build/client/posenc-client"
work=$(mktemp -d)
cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail=0

start_server server "$work/server.out" "$build/server/posenc-server" \
  --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen=

# 1. Three seconds of the mixed preset; the text report's counts.
"$client" load --target="$server_grpc" --duration=3s --concurrency=4 >"$work/mixed.txt"
cat "$work/mixed.txt"
total=$(sed -nE 's/^total: ([0-9]+) calls in.*/\1/p' "$work/mixed.txt")
items=$(awk '$2 == "calls" { s += $3 } END { print s }' "$work/mixed.txt")
served=$(requests_total_when "$server_metrics" "$total")
check "$(grep -qx 'errors: 0' "$work/mixed.txt" && echo 1)" "mixed run: errors: 0"
check "$(grep -qx "codes: OK=$total" "$work/mixed.txt" && echo 1)" "mixed run: codes: OK=$total"
check "$([ "${total:-0}" -gt 0 ] && [ "$items" = "$total" ] && echo 1)" "mixed run: the 5 items' calls add up to the total ($items = $total)"
check "$([ "$(grep -c '^  [a-z]*:' "$work/mixed.txt")" = 5 ] && echo 1)" "mixed run: one line per mix item"
check "$([ "$served" = "$total" ] && echo 1)" "server posenc_requests_total $served = client total $total"

# 2. --max-requests stops at exactly that many calls, whatever the duration.
"$client" load --target="$server_grpc" --max-requests=50 --duration=60s --concurrency=8 \
  --channels=3 --lb=round_robin --retry --mix=small --json >"$work/bounded.json"
calls=$(json_field "$work/bounded.json" calls)
served2=$(requests_total_when "$server_metrics" "$((served + 50))")
check "$([ "$calls" = 50 ] && [ "$(json_field "$work/bounded.json" codes.OK)" = 50 ] && echo 1)" "--max-requests=50: $calls calls, all OK"
check "$([ "$((served2 - served))" = 50 ] && echo 1)" "--max-requests=50: the server counted $((served2 - served))"

# 3. A refused item: its calls are errors by code, and the exit code is 1.
rc=0
"$client" load --target="$server_grpc" --max-requests=20 --concurrency=2 \
  --mix='rope:1,8,2,15;sinusoidal:1,8,16' --json >"$work/refused.json" || rc=$?
check "$([ "$rc" = 1 ] && echo 1)" "refused calls: exit code $rc (1 expected)"
check "$([ "$(json_field "$work/refused.json" codes)" = '{"INVALID_ARGUMENT":10,"OK":10}' ] && echo 1)" \
  "refused calls by code: $(json_field "$work/refused.json" codes)"
check "$([ "$(json_field "$work/refused.json" errors)" = 10 ] && echo 1)" "refused calls: errors = 10"

# 4. Usage errors.
for bad in "--concurrency=0" "--mix=rope:1,2" "--duration=forever" "--lb=random" "--frobnicate"; do
  rc=0
  "$client" load --target="$server_grpc" "$bad" 2>"$work/usage.err" >/dev/null || rc=$?
  flag=${bad%%=*}
  [ "$flag" = "--mix" ] && flag="rope takes 4 dims"
  check "$([ "$rc" = 2 ] && grep -q -- "$flag" "$work/usage.err" && echo 1)" "$bad: exit $rc, $(head -1 "$work/usage.err")"
done

[ "$fail" = 0 ] && echo "PASS: load_test" || echo "FAIL: load_test"
exit "$fail"
