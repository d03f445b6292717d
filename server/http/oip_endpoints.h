// The Open Inference Protocol's HTTP/REST endpoints other than infer: each answers the
// gRPC binding's message for the same call in the REST binding's JSON. Cheap (no tensor
// work), so the I/O threads run them. Thread-safe.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "server/http/oip_routes.h"
#include "server/service/inference_service.h"
#include "server/shm/shared_memory_registry.h"

namespace posenc {

// 200 with `json` as the body, or `status`'s error.
struct EndpointAnswer {
  grpc::Status status;
  std::string json;
};

// The largest shared-memory registration body: a name, a key and two numbers.
inline constexpr size_t kMaxRegisterBodyBytes = size_t{64} << 10;

EndpointAnswer ServerMetadataAnswer(const InferenceService& inference);
EndpointAnswer ModelMetadataAnswer(const Route& route);
EndpointAnswer ModelConfigAnswer(const Route& route);
EndpointAnswer RepositoryIndexAnswer();
// The shared-memory endpoints for the HTTP client `owner` (ShmOwner::OfHttpPeer's name).
// The regions `owner` registered (all of them, or route.region's).
EndpointAnswer ShmStatusAnswer(const SharedMemoryRegistry& shm, const Route& route,
                               const std::string& owner);
// Registers route.region from the body {"key", "offset", "byte_size"}: INVALID_ARGUMENT
// naming the field for a malformed body; PERMISSION_DENIED for a client not on this host
// (kHttpRemoteOwner).
EndpointAnswer ShmRegisterAnswer(SharedMemoryRegistry& shm, const Route& route,
                                 absl::string_view body, const std::string& owner);
EndpointAnswer ShmUnregisterAnswer(SharedMemoryRegistry& shm, const Route& route,
                                   const std::string& owner);

}  // namespace posenc
