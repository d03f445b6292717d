# posenc-server as a small runtime image: built with Debian 12's packages, then only the
# binaries, the shared libraries they load and busybox go into an otherwise empty image
# (deploy/docker/rootfs.sh).
#   docker build -t posenc:dev .
#   podman build --format docker -t posenc:dev .   (podman's default OCI format has no
#                                                   HEALTHCHECK: it would be dropped)
#   docker run --rm -p 50051:50051 -p 8000:8000 -p 127.0.0.1:9464:9464 posenc:dev
# The server drains within --shutdown_grace (8 s), inside docker/podman stop's default 10 s.
FROM debian:bookworm-slim AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      cmake ninja-build g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
      protobuf-compiler libabsl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
      prometheus-cpp-dev nlohmann-json3-dev \
      libeigen3-dev libspectra-dev libpng-dev busybox-static libboost1.81-dev libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY proto proto
COPY server server
COPY client client
COPY deploy/docker deploy/docker
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_BENCH=OFF \
    && ninja -C build posenc-server posenc-client \
    && strip build/server/posenc-server build/client/posenc-client \
    && sh deploy/docker/rootfs.sh /rootfs build/server/posenc-server build/client/posenc-client \
    && cp deploy/docker/healthcheck.sh /rootfs/usr/local/bin/posenc-healthcheck

FROM scratch
COPY --from=build /rootfs /
ENV PATH=/usr/local/bin:/bin
USER 10001
# gRPC (posenc.v1 and the Open Inference Protocol), metrics, the Open Inference Protocol's
# HTTP/REST binding.
EXPOSE 50051 9464 8000
# Health for plain Docker, on the address --listen names; Kubernetes uses its native gRPC
# probe (deploy/kubernetes).
HEALTHCHECK --interval=10s --timeout=3s CMD ["posenc-healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["posenc-server"]
CMD ["--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464", "--http_listen=0.0.0.0:8000"]
