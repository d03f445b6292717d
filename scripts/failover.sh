#!/usr/bin/env bash
# shellcheck disable=SC2154  # start_server sets NAME_pid, NAME_grpc, NAME_metrics
# Failover: three posenc-server replicas on 127.0.0.1 ports, one `posenc-client load` over
# ipv4:127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 with round_robin, the retry policy and a
# per-call retry buffer raised above the 1 MiB calls in the mix. Under load, replica 2 is
# SIGKILLed at 30 % of the run and restarted on the same port at 45 %. Passes when the
# client saw 0 failed calls and the restarted replica served calls again (its
# posenc_requests_total grew after the restart). Prints the figures; exits 1 on failure.
#
# Usage: scripts/failover.sh [BUILD_DIR]      (default: build/ next to scripts/)
# Environment: FAILOVER_SECONDS (60), FAILOVER_CONCURRENCY (8), FAILOVER_CHANNELS (2),
#   FAILOVER_MIX (small calls and 1 MiB calls: sinusoidal:1,8,16*4;sinusoidal:1,1024,256),
#   FAILOVER_RECONNECT_BACKOFF (the client's --max-reconnect-backoff; default gRPC's 120s),
#   FAILOVER_RETRY (1; 0 drops --retry, to see the failures it prevents),
#   FAILOVER_CLIENT_FLAGS (more load flags, e.g. --retry-buffer-bytes=262144).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
# shellcheck source=lib/posenc_procs.sh
source "$root/scripts/lib/posenc_procs.sh"

seconds=${FAILOVER_SECONDS:-60}
concurrency=${FAILOVER_CONCURRENCY:-8}
channels=${FAILOVER_CHANNELS:-2}
mix=${FAILOVER_MIX:-"sinusoidal:1,8,16*4;sinusoidal:1,1024,256"}
kill_at=$(awk -v s="$seconds" 'BEGIN { print s * 0.30 }')
restart_at=$(awk -v s="$seconds" 'BEGIN { print s * 0.45 }')
server="$build/server/posenc-server"

work=$(mktemp -d)
cleanup() {
  for pid in ${load_pid:-} ${r1_pid:-} ${r2_pid:-} ${r3_pid:-}; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ports=()
for i in 1 2 3; do
  ports+=("$(free_port)")
  start_server "r$i" "$work/r$i.out" "$server" --listen="127.0.0.1:${ports[i - 1]}" \
    --metrics_listen=127.0.0.1:0 --http_listen=
done
target="ipv4:127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
client_flags=()
[ "${FAILOVER_RETRY:-1}" = 1 ] && client_flags+=(--retry)
[ -n "${FAILOVER_RECONNECT_BACKOFF:-}" ] && client_flags+=(--max-reconnect-backoff="$FAILOVER_RECONNECT_BACKOFF")
# shellcheck disable=SC2206  # FAILOVER_CLIENT_FLAGS is a list of flags
client_flags+=(${FAILOVER_CLIENT_FLAGS:-})
echo "failover: $seconds s, concurrency $concurrency, $channels channels, mix '$mix', flags ${client_flags[*]}"
echo "          target $target; SIGKILL replica 2 at $kill_at s, restart at $restart_at s"

"$build/client/posenc-client" load --target="$target" --lb=round_robin \
  --channels="$channels" --concurrency="$concurrency" --duration="${seconds}s" --mix="$mix" \
  "${client_flags[@]}" --json >"$work/load.json" 2>"$work/load.err" &
load_pid=$!
start=$(now_s)
elapsed() { awk -v a="$(now_s)" -v b="$start" 'BEGIN { printf "%.1f", a - b }'; }
past() { awk -v e="$(elapsed)" -v t="$1" 'BEGIN { exit !(e >= t) }'; }

phase=running  # running -> killed -> restarted
while kill -0 "$load_pid" 2>/dev/null; do
  if [ "$phase" = running ] && past "$kill_at"; then
    killed_count=$(requests_total "$r2_metrics")
    kill -KILL "$r2_pid"
    wait "$r2_pid" 2>/dev/null || true
    echo "t=$(elapsed) s: SIGKILL replica 2 (pid $r2_pid) after it served $killed_count calls"
    phase=killed
  elif [ "$phase" = killed ] && past "$restart_at"; then
    start_server r2 "$work/r2.restart.out" "$server" --listen="127.0.0.1:${ports[1]}" \
      --metrics_listen=127.0.0.1:0 --http_listen=
    restarted_t=$(elapsed)
    others_at_restart=$(( $(requests_total "$r1_metrics") + $(requests_total "$r3_metrics") ))
    echo "t=$restarted_t s: replica 2 restarted on port ${ports[1]} (pid $r2_pid)"
    phase=restarted
  elif [ "$phase" = restarted ] && [ -z "${returned_t:-}" ] && [ "$(requests_total "$r2_metrics")" -gt 0 ]; then
    returned_t=$(elapsed)
    echo "t=$returned_t s: the restarted replica 2 serves calls again"
  fi
  sleep 0.5
done
load_rc=0
wait "$load_pid" || load_rc=$?
load_pid=""

fail=0
if [ ! -s "$work/load.json" ]; then
  echo "FAIL: posenc-client load printed no result (exit $load_rc):"
  cat "$work/load.err"
  exit 1
fi
print_load_figures "$work/load.json"
errors=$(json_field "$work/load.json" errors)
if [ "$errors" = 0 ]; then
  check 1 "failed calls during failover: 0"
else
  check 0 "failed calls during failover: $errors, first of each code: $(json_field "$work/load.json" first_error)"
fi
check "$([ "$phase" = restarted ] && echo 1)" "replica 2 was killed and restarted under load"
if [ "$phase" = restarted ]; then
  r1=$(requests_total "$r1_metrics")
  r3=$(requests_total "$r3_metrics")
  r2=$(requests_total "$r2_metrics")
  others_after=$(( r1 + r3 - others_at_restart ))
  share=$(awk -v a="$r2" -v b="$others_after" 'BEGIN { printf "%.1f", (a + b) ? 100 * a / (a + b) : 0 }')
  echo "replicas: 1 served $r1, 3 served $r3; 2 served $killed_count before the kill and $r2 after the restart"
  back="it never served a call"
  [ -n "${returned_t:-}" ] && back="back $(awk -v a="$returned_t" -v b="$restarted_t" 'BEGIN { printf "%.1f", a - b }') s after it"
  echo "          ($share % of the calls after the restart; $back)"
  check "$([ "${r2:-0}" -gt 0 ] && echo 1)" "traffic returned to the restarted replica: $r2 calls"
fi
[ "$fail" = 0 ] && echo "PASS: failover" || echo "FAIL: failover"
exit "$fail"
