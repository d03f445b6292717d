#!/usr/bin/env bash
# Builds the Go example (client/go/encode) against Debian 12's Go packages, offline:
#   apt-get install golang-go golang-google-grpc-dev golang-google-protobuf-dev protoc-gen-go-grpc
#   client/go/build.sh OUT            # then OUT/bin/encode HOST:PORT
# Generates the posenc.v1 stubs from proto/posenc/v1/posenc.proto into OUT/src/posenc/v1
# (the proto's go_package "posenc/v1"), with protoc-gen-go built from the packaged source
# when it is not on PATH, and builds in GOPATH mode over /usr/share/gocode. Elsewhere, with
# the module proxy: put the generated files in a module and `go mod tidy` instead.
set -euo pipefail
out=$(mkdir -p "${1:?usage: build.sh OUT}" && cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
export GO111MODULE=off GOPATH="$out:/usr/share/gocode" GOCACHE="$out/cache" GOFLAGS=
mkdir -p "$out/bin" "$out/src"
if ! command -v protoc-gen-go >/dev/null; then
  GOBIN="$out/bin" go install google.golang.org/protobuf/cmd/protoc-gen-go
fi
PATH="$out/bin:$PATH" protoc -I "$src/proto" --go_out="$out/src" --go-grpc_out="$out/src" \
  "$src/proto/posenc/v1/posenc.proto"
(cd "$src/client/go/encode" && go build -o "$out/bin/encode" .)
echo "built $out/bin/encode"
