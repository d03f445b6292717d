#include "server/http/oip_endpoints.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "server/service/proto_convert.h"
#include "server/shm/peer_identity.h"

namespace posenc {
namespace {

using nlohmann::json;

// The nesting a registration body may have (it needs one level).
constexpr int kMaxRegisterDepth = 4;

EndpointAnswer Error(const absl::Status& status) { return {ToGrpcStatus(status), ""}; }

EndpointAnswer Invalid(std::string message) {
  return {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message)), ""};
}

// Whether `text`'s arrays and objects nest deeper than `limit` (strings skipped).
bool NestsDeeper(absl::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

template <typename List>
json TensorsJson(const List& list) {
  json out = json::array();
  for (const auto& t : list) {
    out.push_back({{"name", t.name()},
                   {"datatype", t.datatype()},
                   {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
  }
  return out;
}

}  // namespace

EndpointAnswer ServerMetadataAnswer(const InferenceService& inference) {
  inference::ServerMetadataResponse meta;
  inference.FillServerMetadata(meta);
  json out = {{"name", meta.name()}, {"version", meta.version()}};
  json extensions = json::array({"binary_tensor_data"});
  for (const std::string& e : meta.extensions()) extensions.push_back(e);
  out["extensions"] = extensions;
  return {grpc::Status::OK, out.dump()};
}

EndpointAnswer ModelMetadataAnswer(const Route& route) {
  inference::ModelMetadataResponse meta;
  absl::Status s = InferenceService::FillModelMetadata(route.model, route.version, meta);
  if (!s.ok()) return Error(s);
  json out = {{"name", meta.name()},
              {"versions",
               std::vector<std::string>(meta.versions().begin(), meta.versions().end())},
              {"platform", meta.platform()},
              {"inputs", TensorsJson(meta.inputs())},
              {"outputs", TensorsJson(meta.outputs())}};
  return {grpc::Status::OK, out.dump()};
}

EndpointAnswer ModelConfigAnswer(const Route& route) {
  inference::ModelConfigResponse config;
  absl::Status s = InferenceService::FillModelConfig(route.model, route.version, config);
  if (!s.ok()) return Error(s);
  std::string text;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(config.config(), &text, print);
  json out = json::parse(text);
  Int64StringsToNumbers(out);
  return {grpc::Status::OK, out.dump()};
}

EndpointAnswer RepositoryIndexAnswer() {
  inference::RepositoryIndexResponse index;
  InferenceService::FillRepositoryIndex(index);
  json out = json::array();
  for (const auto& m : index.models()) {
    out.push_back({{"name", m.name()}, {"version", m.version()}, {"state", m.state()}});
  }
  return {grpc::Status::OK, out.dump()};
}

EndpointAnswer ShmStatusAnswer(const SharedMemoryRegistry& shm, const Route& route,
                               const std::string& owner) {
  absl::StatusOr<std::vector<ShmRegionStatus>> regions = shm.Status(route.region, owner);
  if (!regions.ok()) return Error(regions.status());
  json out = json::array();
  for (const ShmRegionStatus& r : *regions) {
    out.push_back({{"name", r.name}, {"offset", r.offset}, {"byte_size", r.byte_size}});
  }
  return {grpc::Status::OK, out.dump()};
}

EndpointAnswer ShmRegisterAnswer(SharedMemoryRegistry& shm, const Route& route,
                                 absl::string_view body, const std::string& owner) {
  if (shm.enabled() && owner == kHttpRemoteOwner) {
    return Error(absl::PermissionDeniedError(
        "shared memory over HTTP is for clients on the server's host; this client's "
        "connection comes from elsewhere"));
  }
  if (body.size() > kMaxRegisterBodyBytes || NestsDeeper(body, kMaxRegisterDepth)) {
    return Invalid(absl::StrCat("the body must be a flat JSON object of at most ",
                                kMaxRegisterBodyBytes, " bytes"));
  }
  json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) return Invalid("the body must be a JSON object");
  auto key = request.find("key");
  if (key == request.end() || !key->is_string()) {
    return Invalid("key must be a string (the shm_open name)");
  }
  uint64_t field[2] = {0, 0};
  const char* names[2] = {"offset", "byte_size"};
  for (int i = 0; i < 2; ++i) {
    auto it = request.find(names[i]);
    if (it == request.end() && i == 0) continue;
    if (it == request.end() || !it->is_number_unsigned()) {
      return Invalid(absl::StrCat(names[i], " must be an integer >= 0"));
    }
    field[i] = it->get<uint64_t>();
  }
  absl::Status s = shm.Register(route.region, key->get<std::string>(), field[0], field[1], owner);
  if (!s.ok()) return Error(s);
  return {grpc::Status::OK, "{}"};
}

EndpointAnswer ShmUnregisterAnswer(SharedMemoryRegistry& shm, const Route& route,
                                   const std::string& owner) {
  absl::Status s = shm.Unregister(route.region, owner);
  if (!s.ok()) return Error(s);
  return {grpc::Status::OK, "{}"};
}

}  // namespace posenc
