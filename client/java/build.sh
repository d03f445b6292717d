#!/usr/bin/env bash
# Builds the Java example (client/java/src) against Debian 12's gRPC-Java, offline (the
# packages are listed in classpath.sh):
#   client/java/build.sh OUT        # then client/java/run.sh OUT HOST:PORT
# Generates the dev.posenc.v1 classes from proto/posenc/v1/posenc.proto (the proto's
# java_package) with protoc and grpc_java_plugin into OUT/gen, and compiles everything into
# OUT/classes.
set -euo pipefail
out=$(mkdir -p "${1:?usage: build.sh OUT}" && cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/client/java/classpath.sh"
plugin=$(command -v protoc-gen-grpc-java || command -v grpc_java_plugin) ||
  { echo "build.sh: no gRPC-Java protoc plugin (protobuf-compiler-grpc-java-plugin)" >&2; exit 1; }
rm -rf "$out/gen" "$out/classes"
mkdir -p "$out/gen" "$out/classes"
protoc -I "$src/proto" --java_out="$out/gen" --grpc-java_out="$out/gen" \
  --plugin=protoc-gen-grpc-java="$plugin" "$src/proto/posenc/v1/posenc.proto"
find "$out/gen" "$src/client/java/src" -name '*.java' >"$out/sources.txt"
javac -nowarn -d "$out/classes" -cp "$posenc_classpath" @"$out/sources.txt"
echo "built $out/classes"
