#include "server/http/oip_routes.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace posenc {
namespace {

// /v2/models/NAME[/versions/V][/ready|/config|/infer], from s[2] on.
void RouteModel(const std::vector<absl::string_view>& s, Route& r) {
  const size_t n = s.size();
  r.model = std::string(s[2]);
  size_t i = 3;
  if (i + 1 < n && s[i] == "versions") {
    r.version = std::string(s[i + 1]);
    i += 2;
  }
  if (i == n) {
    r.endpoint = Endpoint::kModelMetadata;
  } else if (i + 1 == n && s[i] == "ready") {
    r.endpoint = Endpoint::kModelReady;
  } else if (i + 1 == n && s[i] == "config") {
    r.endpoint = Endpoint::kModelConfig;
  } else if (i + 1 == n && s[i] == "infer") {
    r.endpoint = Endpoint::kInfer;
    r.method = "POST";
  }
}

// /v2/systemsharedmemory[/region/NAME]/(status|register|unregister).
void RouteSharedMemory(const std::vector<absl::string_view>& s, Route& r) {
  const size_t n = s.size();
  size_t i = 2;
  if (i + 1 < n && s[i] == "region") {
    r.region = std::string(s[i + 1]);
    i += 2;
  }
  if (i + 1 == n && s[i] == "status") {
    r.endpoint = Endpoint::kShmStatus;
  } else if (i + 1 == n && s[i] == "register" && !r.region.empty()) {
    r.endpoint = Endpoint::kShmRegister;
    r.method = "POST";
  } else if (i + 1 == n && s[i] == "unregister") {
    r.endpoint = Endpoint::kShmUnregister;
    r.method = "POST";
  }
}

}  // namespace

Route RouteOf(absl::string_view path) {
  std::vector<absl::string_view> s = absl::StrSplit(path, '/', absl::SkipEmpty());
  Route r;
  if (s.empty() || s[0] != "v2") return r;
  const size_t n = s.size();
  if (n == 1) {
    r.endpoint = Endpoint::kServerMetadata;
  } else if (s[1] == "health" && n == 3 && (s[2] == "live" || s[2] == "ready")) {
    r.endpoint = s[2] == "live" ? Endpoint::kLive : Endpoint::kReady;
  } else if (s[1] == "repository" && n == 3 && s[2] == "index") {
    r.endpoint = Endpoint::kRepositoryIndex;
    r.method = "POST";
  } else if (s[1] == "models" && n >= 3) {
    RouteModel(s, r);
  } else if (s[1] == "systemsharedmemory") {
    RouteSharedMemory(s, r);
  }
  return r;
}

bool MethodAllowed(const Route& route, absl::string_view method) {
  return method == route.method ||
         (route.endpoint == Endpoint::kRepositoryIndex && method == "GET");
}

Method MethodOf(Endpoint e) {
  switch (e) {
    case Endpoint::kInfer: return Method::kHttpInfer;
    case Endpoint::kModelMetadata:
    case Endpoint::kModelReady: return Method::kHttpModelMetadata;
    case Endpoint::kModelConfig: return Method::kHttpModelConfig;
    case Endpoint::kRepositoryIndex: return Method::kHttpRepositoryIndex;
    case Endpoint::kShmStatus:
    case Endpoint::kShmRegister:
    case Endpoint::kShmUnregister: return Method::kHttpSharedMemory;
    default: return Method::kHttpServerMetadata;
  }
}

int HttpStatusOf(grpc::StatusCode code, bool retryable) {
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED: return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return retryable ? 429 : 413;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    default: return 500;
  }
}

void Int64StringsToNumbers(nlohmann::json& value) {
  if (!value.is_object() && !value.is_array()) return;
  for (auto& item : value) Int64StringsToNumbers(item);
  if (!value.is_object()) return;
  for (const char* key : {"dims", "shape"}) {
    auto it = value.find(key);
    if (it == value.end() || !it->is_array()) continue;
    for (auto& d : *it) {
      int64_t n = 0;
      if (d.is_string() && absl::SimpleAtoi(d.get<std::string>(), &n)) d = n;
    }
  }
}

}  // namespace posenc
