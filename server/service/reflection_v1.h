// grpc.reflection.v1.ServerReflection: gRPC 1.51's reflection plugin answers only v1alpha,
// and current clients (grpcurl, grpc-js-reflection-client, Postman) ask for v1 first. The
// answers come from the same place v1alpha's do, protobuf's generated descriptor pool.
// Thread-safe; each stream answers its requests one at a time, in order.
#pragma once

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace posenc {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `services`: the full names ListServices reports.
  explicit ReflectionV1Service(std::vector<std::string> services)
      : services_(std::move(services)) {}

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // One request's answer (public for tests).
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  const std::vector<std::string> services_;
};

}  // namespace posenc
