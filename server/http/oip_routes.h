// The Open Inference Protocol's HTTP/REST paths (as Triton's HTTP server names them), the
// method label each is counted under, and the HTTP status of each gRPC status code.
// Stateless; thread-safe.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "nlohmann/json.hpp"
#include "server/metrics/metrics.h"

namespace posenc {

enum class Endpoint {
  kServerMetadata,
  kLive,
  kReady,
  kModelMetadata,
  kModelReady,
  kModelConfig,
  kInfer,
  kRepositoryIndex,
  kShmStatus,
  kShmRegister,
  kShmUnregister,
  kNotFound
};

struct Route {
  Endpoint endpoint = Endpoint::kNotFound;
  const char* method = "GET";  // the one the endpoint answers (POST for infer and updates)
  std::string model, version, region;
};

// The endpoint of a decoded path ("/v2/models/rope/infer"); kNotFound for any other.
Route RouteOf(absl::string_view path);

// Whether `method` may be used on `route` (the repository index takes GET and POST).
bool MethodAllowed(const Route& route, absl::string_view method);

// The endpoint's label in posenc_requests_total.
Method MethodOf(Endpoint endpoint);

// The HTTP status for a gRPC code, as KServe and Triton answer: a request over a size limit
// (or a cost that can never fit) is 413, admission that may succeed later (`retryable`)
// 429, a drain 503.
int HttpStatusOf(grpc::StatusCode code, bool retryable);

// protobuf's JSON writes int64 fields as strings; the KServe and Triton JSON has numbers.
void Int64StringsToNumbers(nlohmann::json& value);

}  // namespace posenc
