# posenc-server as a small runtime image. Everything comes from Debian 12's packages.
#   docker build -t posenc:dev .            (or podman build)
#   docker run --rm -p 50051:50051 -p 127.0.0.1:9464:9464 posenc:dev
# The server drains within --shutdown_grace (8 s), inside docker/podman stop's default 10 s.
FROM debian:bookworm-slim AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      cmake ninja-build g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
      protobuf-compiler libabsl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
      prometheus-cpp-dev nlohmann-json3-dev \
      libeigen3-dev libspectra-dev libpng-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto proto
COPY server server
COPY client client
COPY deploy/docker deploy/docker
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_BENCH=OFF \
    && ninja -C build posenc-server posenc-client \
    && strip build/server/posenc-server build/client/posenc-client

FROM debian:bookworm-slim
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libabsl20220623 libc-ares2 libcivetweb1 libdnnl2 libgomp1 libgrpc++1.51 libgrpc29 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprotobuf32 libre2-9 libssl3 libpng16-16 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home posenc
COPY --from=build /src/build/server/posenc-server /src/build/client/posenc-client /usr/local/bin/
COPY deploy/docker/healthcheck.sh /usr/local/bin/posenc-healthcheck
USER 10001
EXPOSE 50051 9464
# Health for plain Docker, on the address --listen names; Kubernetes uses its native gRPC
# probe (deploy/kubernetes).
HEALTHCHECK --interval=10s --timeout=3s CMD ["posenc-healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["posenc-server"]
CMD ["--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464"]
