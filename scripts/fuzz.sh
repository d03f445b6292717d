#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang-14 into build-fuzz/ and runs each over
# its seed corpus and its regression inputs. Fails on any crash, leak, UB, timeout or OOM.
#
#   scripts/fuzz.sh                     # each target for $FUZZ_SECONDS (default 30) seconds
#   scripts/fuzz.sh --time 300 graph    # one target for 5 minutes
#   scripts/fuzz.sh --runs 1000000      # each target for 1,000,000 executions
#   scripts/fuzz.sh --seed 1 --runs 100000   # reproducible: the same inputs on every run
#
# Targets: encode encode_stream bias table graph http_infer http_request. New inputs go to a
# temporary directory, never into the repo; a crashing input is left in
# build-fuzz/artifacts/<target>/ (keep it under tests/fuzz/regressions/<target>/ once fixed,
# and every run replays it).
set -euo pipefail
cd "$(dirname "$0")/.."

limit=(-max_total_time="${FUZZ_SECONDS:-30}")
seed=()
targets=()
while (($#)); do
  case "$1" in
    --time) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    --seed) seed=(-seed="$2"); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(encode encode_stream bias table graph http_infer http_request)

scripts/setup.sh
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPOSENC_FUZZ=ON -DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_BENCH=OFF >/dev/null
ninja -C build-fuzz -j"$(nproc)" "${targets[@]/%/_fuzzer}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "build-fuzz/artifacts/$t"
  inputs=(tests/fuzz/corpus/"$t")
  [ -d tests/fuzz/regressions/"$t" ] && inputs+=(tests/fuzz/regressions/"$t")
  echo "fuzz: $t (${limit[*]} ${seed[*]})"
  # The first directory takes new inputs; the others are only read.
  if ! build-fuzz/tests/fuzz/"$t"_fuzzer "$work/$t" "${inputs[@]}" "${limit[@]}" "${seed[@]}" \
      -rss_limit_mb=2048 -timeout=10 -max_len=8192 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/artifacts/$t/" >"$work/$t.log" 2>&1; then
    tail -n 60 "$work/$t.log"
    echo "fuzz: $t FAILED; the input is in build-fuzz/artifacts/$t/" >&2
    exit 1
  fi
  grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)' \
    "$work/$t.log" | sed "s/^/fuzz: $t /"
done
echo "fuzz: all ${#targets[@]} targets passed"
