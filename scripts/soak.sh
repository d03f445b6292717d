#!/usr/bin/env bash
# shellcheck disable=SC2154  # start_server sets NAME_pid, NAME_grpc, NAME_metrics
# Soak: one real posenc-server on loopback, `posenc-client load` at saturation for
# SOAK_SECONDS (default 300), the server's RSS sampled from /proc. Passes when the client
# saw 0 errors, the RSS grew < 5 % from after the warm-up to the end (medians of the first
# and last quarter of the samples after it), and the server's posenc_requests_total equals
# the calls the client completed. Prints the figures; exits 1 on a failed check.
#
# Usage: scripts/soak.sh [BUILD_DIR]      (default: build/ next to scripts/)
# Environment: SOAK_SECONDS (300), SOAK_CONCURRENCY (8), SOAK_MIX (mixed; see
#   posenc-client load --help), SOAK_SAMPLE_SECONDS (5), SOAK_WARMUP_SECONDS (the smaller
#   of 30 and 10 % of SOAK_SECONDS), SOAK_MAX_RSS_GROWTH_PCT (5), SOAK_SERVER_FLAGS (extra).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
# shellcheck source=lib/posenc_procs.sh
source "$root/scripts/lib/posenc_procs.sh"

seconds=${SOAK_SECONDS:-300}
concurrency=${SOAK_CONCURRENCY:-8}
mix=${SOAK_MIX:-mixed}
sample=${SOAK_SAMPLE_SECONDS:-5}
warmup=${SOAK_WARMUP_SECONDS:-$(awk -v s="$seconds" 'BEGIN { w = s / 10; if (w > 30) w = 30; print w }')}
max_growth=${SOAK_MAX_RSS_GROWTH_PCT:-5}

work=$(mktemp -d)
cleanup() {
  [ -n "${load_pid:-}" ] && kill "$load_pid" 2>/dev/null || true
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck disable=SC2086  # SOAK_SERVER_FLAGS is a list of flags
start_server server "$work/server.out" "$build/server/posenc-server" \
  --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen= ${SOAK_SERVER_FLAGS:-}
echo "soak: $seconds s, concurrency $concurrency, mix '$mix', server $server_grpc (pid $server_pid)," \
  "RSS every $sample s, warm-up $warmup s"

"$build/client/posenc-client" load --target="$server_grpc" --concurrency="$concurrency" \
  --duration="${seconds}s" --mix="$mix" --json >"$work/load.json" 2>"$work/load.err" &
load_pid=$!
start=$(now_s)
: >"$work/rss"
while kill -0 "$load_pid" 2>/dev/null; do
  rss=$(rss_kib "$server_pid")
  [ -z "$rss" ] && break  # the server died; the checks below say so
  echo "$(awk -v a="$(now_s)" -v b="$start" 'BEGIN { printf "%.1f", a - b }') $rss" >>"$work/rss"
  sleep "$sample"
done
load_rc=0
wait "$load_pid" || load_rc=$?
load_pid=""

fail=0
alive=1
kill -0 "$server_pid" 2>/dev/null || alive=0
check "$alive" "the server is still running"
if [ ! -s "$work/load.json" ]; then
  echo "FAIL: posenc-client load printed no result (exit $load_rc):"
  cat "$work/load.err"
  exit 1
fi
calls=$(json_field "$work/load.json" calls)
errors=$(json_field "$work/load.json" errors)
print_load_figures "$work/load.json"
if [ "$errors" = 0 ]; then
  check 1 "client errors: 0"
else
  check 0 "client errors: $errors, first of each code: $(json_field "$work/load.json" first_error)"
fi

# RSS: the median of the first quarter of the samples after the warm-up against the median
# of the last quarter (at least 3 each). Under this mix RSS swings +-2 MiB around a flat
# ~28 MiB line; single samples (or tenths) would read that noise as growth, while a steady
# leak still shows as most of its growth between the two quarters.
read -r first_rss base_rss last_rss peak_rss samples < <(/usr/bin/python3 - "$work/rss" "$warmup" <<'PY'
import statistics, sys
rows = [tuple(map(float, line.split())) for line in open(sys.argv[1]) if line.strip()]
after = [kib for t, kib in rows if t >= float(sys.argv[2])]
w = max(3, len(after) // 4)
if len(after) < 2 * w:
    print(int(rows[0][1]) if rows else 0, "", "", 0, len(rows))
else:
    print(int(rows[0][1]), statistics.median(after[:w]), statistics.median(after[-w:]),
          int(max(k for _, k in rows)), len(rows))
PY
)
if [ -z "$base_rss" ]; then
  check 0 "RSS: too few samples after the warm-up ($samples in all, 6 needed); run longer"
else
  growth=$(awk -v b="$base_rss" -v e="$last_rss" 'BEGIN { printf "%.2f", (e - b) * 100 / b }')
  mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
  echo "server RSS: $(mib "$first_rss") MiB at start, $(mib "$base_rss") MiB after the $warmup s warm-up," \
    "$(mib "$last_rss") MiB at end, peak $(mib "$peak_rss") MiB ($samples samples)"
  echo "server RSS samples (s:MiB): $(awk '{ printf "%s%.0f:%.1f", (NR > 1 ? " " : ""), $1, $2 / 1024 }' "$work/rss")"
  check "$(awk -v g="$growth" -v m="$max_growth" 'BEGIN { print (g < m) ? 1 : 0 }')" \
    "RSS growth after warm-up: ${growth} % (limit $max_growth %)"
fi

server_total=$(requests_total_when "$server_metrics" "$calls")
check "$([ "$server_total" = "$calls" ] && echo 1)" \
  "server posenc_requests_total $server_total = client calls $calls"

[ "$fail" = 0 ] && echo "PASS: soak" || echo "FAIL: soak"
exit "$fail"
