#!/usr/bin/env bash
# Runs the Java example built by build.sh: client/java/run.sh OUT [HOST:PORT]
set -euo pipefail
out=${1:?usage: run.sh OUT [HOST:PORT]}
. "$(dirname "$0")/classpath.sh"
exec java -cp "$out/classes:$posenc_classpath" dev.posenc.example.EncodeExample "${@:2}"
