#!/usr/bin/env bash
# Checks the code's shape; exits 1 on any finding, listing them:
#  1. clang-format-14 --dry-run -Werror (.clang-format) over the C++ of server/ client/
#     tests/ bench/;
#  2. clang-tidy-14 (.clang-tidy's checks) over server/ and client/ .cc files, in parallel on
#     every core, each file within LINT_TIDY_TIMEOUT seconds (default 300), with
#     build/compile_commands.json (configured and the two programs built when missing);
#  3. no function over 60 lines in server/ and client/: C++ as universal-ctags ends it,
#     Python and JavaScript of client/ (scripts/lib/function_lengths.py);
#  4. no server/service/ file includes a header of server/kernels/ or server/graph/ (the
#     service calls schemes, never a kernel or a solver).
#   scripts/lint.sh            # all four
#   scripts/lint.sh format     # one of: format tidy length layers
set -uo pipefail
cd "$(dirname "$0")/.."
only=${1:-}
status=0
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
result() {  # result NAME RC
  if [ "$2" = 0 ]; then echo "lint: $1 ok"; else echo "lint: $1 FAILED"; status=1; fi
}

if want format; then
  git ls-files 'server/*.cc' 'server/*.h' 'client/*.cc' 'client/*.h' 'tests/*.cc' 'tests/*.h' \
    'bench/*.cc' 'bench/*.h' | xargs -P"$(nproc)" -n 16 clang-format-14 --dry-run -Werror
  result "clang-format" "$?"
fi

if want tidy; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null &&
    ninja -C build posenc-server posenc-client >/dev/null  # the generated proto headers
  git ls-files 'server/*.cc' 'client/*.cc' | grep -v '^client/\(go\|java\|node\|python\)/' |
    xargs -P"$(nproc)" -I{} timeout "${LINT_TIDY_TIMEOUT:-300}" clang-tidy-14 -p build --quiet {} \
    2>/dev/null
  result "clang-tidy" "$?"
fi

if want length; then
  ctags -R --languages=C++ --kinds-C++=f --fields=+ne -x --_xformat='%{end} %{line} %N %F' \
    server client | /usr/bin/python3 scripts/lib/function_lengths.py 60 \
    $(git ls-files 'client/*.py' 'client/*.js')
  result "functions at most 60 lines" "$?"
fi

if want layers; then
  ! grep -rnE '#include "server/(kernels|graph)/' server/service/
  result "no server/service/ file includes server/kernels/ or server/graph/" "$?"
fi
exit "$status"
