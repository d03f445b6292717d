#!/usr/bin/env bash
# Runs the README's examples against a real posenc-server, so the guide cannot rot.
#   ```sh blocks      run with bash (-e), each as one script; build/client/posenc-client
#                     (and `posenc-client` on PATH, for docs that assume `cmake --install`)
#                     with --target set to the test's server. In README.md a bare
#                     `posenc-client` command is a failure: it is not on PATH after the
#                     README's two commands.
#   ```python blocks  run with the venv an earlier sh block made (pip install), else with
#                     /usr/bin/python3 over the build tree's package
#   ```js blocks      run with node in the folder where an sh block ran npm install
#   other fences (console, py, cpp, cmake, json, ...) are shown, not run: `console` marks
#   commands that set up machines, need other services or run for minutes, `py` Python
#   that is a sketch (it names the user's own files or arrays).
# Blocks run in order in a copy of the checkout (its build/ is BUILD_DIR), with
# 127.0.0.1:50051 replaced by the server's gRPC address, localhost:8000 by its HTTP address
# and /tmp/ by a private folder. Without
# node/npm, or when npm can reach neither its cache nor its registry, npm lines and js
# blocks are skipped with a note.
# Usage: readme_test.sh BUILD_DIR SOURCE_DIR [FILE]   (FILE: README.md, or e.g. docs/schemes.md)
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
doc=${3:-README.md}
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$work/repo" "$work/tmp" "$work/bin"
(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$work/repo"
# build/ of the copy: the build tree's entries, with build/client/posenc-client a wrapper that
# adds the test server's --target.
mkdir -p "$work/repo/build/client"
for e in "$build"/* "$build"/.[!.]*; do [ -e "$e" ] && [ "${e##*/}" != client ] && ln -s "$e" "$work/repo/build/"; done
for e in "$build"/client/*; do [ "${e##*/}" != posenc-client ] && ln -s "$e" "$work/repo/build/client/"; done

"$build/server/posenc-server" --listen=127.0.0.1:0 --metrics_listen= --http_listen=127.0.0.1:0 \
  --threads=1 >"$work/server.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " listening " "$work/server.out" && break; sleep 0.1; done
target=$(grep -m1 " listening " "$work/server.out" | sed -E 's/.* grpc=([^ ]+) .*/\1/')
http=$(grep -m1 " listening " "$work/server.out" | sed -E 's/.* http=([^ ]+).*/\1/')
[ -n "$target" ] && [ -n "$http" ] || { cat "$work/server.out"; fail "the server did not start"; }
printf '#!/usr/bin/env bash\nexec %q --target=%q "$@"\n' "$build/client/posenc-client" "$target" >"$work/bin/posenc-client"
chmod +x "$work/bin/posenc-client"
cp "$work/bin/posenc-client" "$work/repo/build/client/posenc-client"

npm_ok=1
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  npm_ok=0; echo "NOTE: node or npm is not installed: npm lines and js blocks are skipped"
fi

# The blocks, numbered, as files: $work/blocks/NNN.LANG
/usr/bin/python3 - "$src/$doc" "$work/blocks" "$target" "$work/tmp/" "$http" <<'PY'
import os, re, sys
readme, out, target, tmp, http = sys.argv[1:]
os.makedirs(out)
n = 0
for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", open(readme).read(), re.M | re.S):
    if lang not in ("sh", "python", "js"):
        continue
    n += 1
    body = body.replace("127.0.0.1:50051", target).replace("/tmp/", tmp)
    body = body.replace("localhost:8000", http)
    open(os.path.join(out, "%03d.%s" % (n, lang)), "w").write(body)
print("readme_test: %d blocks of %s to run" % (n, readme))
PY

cd "$work/repo"
export PATH="$work/bin:$PATH"
for block in "$work"/blocks/*; do
  lang=${block##*.}
  echo "--- $(basename "$block")"; cat "$block"
  case $lang in
    sh)
      if [ "$doc" = README.md ] && grep -nE '^\s*posenc-client\b' "$block"; then
        fail "README.md calls a bare posenc-client (not on PATH): write build/client/posenc-client"
      fi
      if [ "$npm_ok" = 1 ] && grep -q "^npm " "$block" \
        && ! timeout 20 npm ping >/dev/null 2>&1; then
        npm_ok=0; echo "NOTE: npm cannot reach its registry: npm lines and js blocks are skipped"
      fi
      if [ "$npm_ok" = 0 ]; then sed -i 's/^npm /: npm /' "$block"; fi
      bash -eo pipefail "$block" >"$work/out" 2>&1 || { cat "$work/out"; fail "the sh block above"; } ;;
    python)
      py=/usr/bin/python3
      [ -x "$work/tmp/posenc-venv/bin/python" ] && py="$work/tmp/posenc-venv/bin/python"
      PYTHONPATH="$build/client/python" "$py" "$block" >"$work/out" 2>&1 || { cat "$work/out"; fail "the python block above"; } ;;
    js)
      if [ "$npm_ok" = 0 ]; then echo "(skipped)"; continue; fi
      cp "$block" "$work/repo/readme_block.js"
      node readme_block.js >"$work/out" 2>&1 || { cat "$work/out"; fail "the js block above"; } ;;
  esac
  sed 's/^/    /' "$work/out"
done
echo "PASS: every sh, python and js block of $doc ran against a real server"
