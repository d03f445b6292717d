#!/usr/bin/env bash
# Installs what posenc needs to build, test and run, from Debian 12's packages.
# Safe to run again: only missing packages are installed.
#   scripts/setup.sh              # build, run and test the server and the C++/Python clients
#   scripts/setup.sh --examples   # also the Go and Java toolchains for client/go, client/java
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libeigen3-dev libspectra-dev libpng-dev
  python3-numpy python3-grpcio python3-yaml python3-h2  # h2: tests/hostile_client_test.py
  nghttp2-proxy  # nghttpx: deploy/nghttpx and tests/front_proxy_test.py
  python3-torch  # the float64 references of tests/python/test_rope_models.py
  libboost1.81-dev libssl-dev  # the HTTP/REST binding and /metrics (Boost.Beast, OpenSSL 3)
  python3-geventhttpclient python3-gevent python3-rapidjson python3-packaging  # tests/third_party/tritonclient
  prometheus curl openssl
  clang-14 libclang-rt-14-dev libomp-14-dev  # scripts/fuzz.sh: libFuzzer and OpenMP for clang
  clang-format-14 clang-tidy-14 universal-ctags  # scripts/lint.sh
)
if [ "${1:-}" = "--examples" ]; then
  packages+=(
    golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev
    protoc-gen-go-grpc  # client/go/build.sh
    default-jdk-headless libgrpc-java protobuf-compiler-grpc-java-plugin libprotobuf-java
    libnetty-java libperfmark-java libgoogle-gson-java libgeronimo-annotation-1.3-spec-java
    libguava-java libjsr305-java liberror-prone-java  # client/java (classpath.sh)
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"

# The Node package's dependencies into client/node/node_modules, so that `npm install
# /path/to/posenc/client/node` from any project (npm links the folder, and Node finds the
# dependencies beside it) works. Without npm nothing is done; a registry out of reach is a
# warning: only the Node client needs them.
node_dir="$(cd "$(dirname "$0")/.." && pwd)/client/node"
if command -v npm >/dev/null && [ ! -d "$node_dir/node_modules/@grpc/grpc-js" ]; then
  (cd "$node_dir" && npm ci --omit=dev --no-audit --no-fund --prefer-offline --loglevel=error \
    >/dev/null 2>&1) || echo "setup: npm could not install client/node's dependencies (the Node client needs them)"
fi
