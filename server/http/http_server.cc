#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "civetweb.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "server/common/log.h"
#include "server/common/status_macros.h"
#include "server/http/civetweb_tls.h"
#include "server/http/infer_json.h"
#include "server/service/proto_convert.h"

namespace posenc {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The pieces a body is read in; the read deadline is checked between them.
constexpr size_t kReadPiece = size_t{256} << 10;

enum class Endpoint {
  kServerMetadata, kLive, kReady, kModelMetadata, kModelReady, kModelConfig, kInfer,
  kRepositoryIndex, kShmStatus, kShmRegister, kShmUnregister, kNotFound
};

struct Route {
  Endpoint endpoint = Endpoint::kNotFound;
  const char* method = "GET";  // the one the endpoint answers (POST for infer and updates)
  std::string model, version, region;
};

// /v2/... paths as Triton's HTTP server names them.
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
  } else if (s[1] == "systemsharedmemory") {
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
  return r;
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

// The HTTP status for a gRPC code, as KServe and Triton answer: a request over a size
// limit is 413, a full admission budget 429, a drain 503.
int HttpStatusOf(grpc::StatusCode code, bool refused) {
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
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return refused ? 429 : 413;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    default: return 500;
  }
}

struct Header {
  const char* name;
  std::string value;
};

void Send(mg_connection* conn, int status, const char* content_type,
          std::initializer_list<absl::string_view> pieces, const std::vector<Header>& headers = {}) {
  size_t total = 0;
  for (absl::string_view p : pieces) total += p.size();
  mg_response_header_start(conn, status);
  if (content_type != nullptr) mg_response_header_add(conn, "Content-Type", content_type, -1);
  const std::string length = std::to_string(total);
  mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
  for (const Header& h : headers) mg_response_header_add(conn, h.name, h.value.c_str(), -1);
  mg_response_header_send(conn);
  for (absl::string_view p : pieces) {
    if (!p.empty()) mg_write(conn, p.data(), p.size());
  }
}

void SendJson(mg_connection* conn, int status, absl::string_view body,
              const std::vector<Header>& headers = {}) {
  Send(conn, status, "application/json", {body}, headers);
}

// An answer that is not 200: its HTTP status, the gRPC status behind it (for the metrics
// and the log) and whether the connection must close (a body left unread).
struct Failure {
  Failure(int http_status, grpc::Status grpc_status, bool close_connection = false)
      : http(http_status), status(std::move(grpc_status)), close(close_connection) {}
  int http;
  grpc::Status status;
  bool close;
  std::vector<Header> headers;
};

Failure FailureOf(const grpc::Status& status, bool refused = false) {
  Failure f{HttpStatusOf(status.error_code(), refused), status};
  if (refused) f.headers.push_back({"Retry-After", "1"});
  return f;
}

Failure Invalid(const std::string& message) {
  return FailureOf(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message));
}

void SendFailure(mg_connection* conn, const Failure& f) {
  std::vector<Header> headers = f.headers;
  if (f.close) headers.push_back({"Connection", "close"});
  SendJson(conn, f.http, ErrorJson(f.status.error_message()), headers);
}

// protobuf's JSON writes int64 fields as strings; the KServe and Triton JSON has numbers.
void Int64StringsToNumbers(json& value) {
  if (value.is_object() || value.is_array()) {
    for (auto& item : value) Int64StringsToNumbers(item);
    if (value.is_object()) {
      for (const char* key : {"dims", "shape"}) {
        auto it = value.find(key);
        if (it == value.end() || !it->is_array()) continue;
        for (auto& d : *it) {
          int64_t n = 0;
          if (d.is_string() && absl::SimpleAtoi(d.get<std::string>(), &n)) d = n;
        }
      }
    }
  }
}

std::string PeerOf(const mg_request_info* ri) {
  return absl::StrCat(ri->remote_addr, ":", ri->remote_port);
}

std::string ListenPorts(const std::string& listen, bool tls) {
  return absl::StrCat(listen, tls ? "s" : "");
}

// civetweb's start-up messages, kept so a failed start can say why.
thread_local std::string* start_log = nullptr;

int LogMessage(const mg_connection*, const char* message) {
  if (start_log != nullptr) {
    absl::StrAppend(start_log, start_log->empty() ? "" : "; ", message);
  } else {
    Log(LogLevel::kWarning, "http", {{"message", message}});
  }
  return 1;
}

// The descriptor of the connection `ri` describes: the socket of this process whose peer is
// (remote_addr, remote_port) and whose local port is server_port; -1 if none is found.
// civetweb does not expose it, and the body-read watchdog needs it.
int FindSocket(const mg_request_info* ri) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_in peer{}, local{};
    socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        peer.sin_family != AF_INET || ntohs(peer.sin_port) != ri->remote_port ||
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        ntohs(local.sin_port) != ri->server_port) {
      continue;
    }
    char addr[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &peer.sin_addr, addr, sizeof(addr));
    if (std::strcmp(addr, ri->remote_addr) == 0) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

// Ends body reads that pass their deadline: civetweb waits up to the read timeout for each
// piece of a body but not for the whole of it, so a client trickling bytes could hold a
// worker for as long as it likes. At the deadline the watchdog shuts the socket's reading
// side, the read returns short and the handler answers 408. Thread-safe.
class HttpServer::ReadWatchdog {
 public:
  ReadWatchdog() : thread_([this] { Run(); }) {}
  ~ReadWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  // While armed (until Disarm), the handler owns `fd`: civetweb cannot close it, so the
  // watchdog never shuts a descriptor that was reused.
  void Arm(int fd, Clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_[fd] = deadline;
  }
  void Disarm(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_.erase(fd);
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; })) {
      const Clock::time_point now = Clock::now();
      for (auto it = armed_.begin(); it != armed_.end();) {
        if (it->second > now) {
          ++it;
          continue;
        }
        shutdown(it->first, SHUT_RD);
        it = armed_.erase(it);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;                            // guarded by mu_
  std::map<int, Clock::time_point> armed_;       // guarded by mu_
  std::thread thread_;
};

// A tracked HTTP call: counted in flight while it runs, then in posenc_requests_total and
// the failed-calls log under its Http* method. Refused (accepted() false) once the drain
// began.
class HttpServer::Call {
 public:
  Call(HttpServer& server, const mg_request_info* ri, Method method)
      : server_(server), start_(Clock::now()), accepted_(server.Enter()) {
    record_.method = method;
    record_.peer = PeerOf(ri);
    if (server_.metrics_) server_.metrics_->InflightAdd(1);
  }
  ~Call() {
    if (!finished_) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the call ended early"));
    if (accepted_) server_.Leave();
  }
  bool accepted() const { return accepted_; }
  void set_scheme(SchemeLabel s) { record_.scheme.store(s); }
  void set_request_id(const std::string& id) { record_.request_id = id; }

  void Finish(const grpc::Status& status) {
    finished_ = true;
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (server_.metrics_) {
      server_.metrics_->RecordRequest(record_.method, record_.scheme.load(),
                                      static_cast<int>(status.error_code()), seconds);
      server_.metrics_->InflightAdd(-1);
    }
    server_.tracker_.LogEnd(record_, status, seconds);
  }

 private:
  HttpServer& server_;
  const Clock::time_point start_;
  const bool accepted_;
  bool finished_ = false;
  TrackedCall record_;
};

namespace {

// Reads the request body: refused (413) from its Content-Length when over `limit`, before a
// byte of it is read; admitted for its size first (429 when the budget is full); read in
// pieces until `deadline` (408 past it). `ticket` holds the admission.
std::optional<Failure> ReadBody(mg_connection* conn, const mg_request_info* ri, size_t limit,
                                Clock::time_point deadline, Admission& admission,
                                Admission::Ticket& ticket, std::string& body) {
  const long long declared = ri->content_length;  // -1: chunked or unknown
  if (declared > 0 && static_cast<unsigned long long>(declared) > limit) {
    Failure f = FailureOf(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the request body is ", declared, " bytes; --max_message_bytes allows ",
                     limit)));
    f.close = true;
    return f;
  }
  const size_t expected = declared >= 0 ? static_cast<size_t>(declared) : limit;
  absl::StatusOr<Admission::Ticket> admitted = admission.Admit(declared >= 0 ? expected : limit);
  if (!admitted.ok()) {
    Failure f = FailureOf(ToGrpcStatus(admitted.status()), /*refused=*/true);
    f.close = true;
    return f;
  }
  ticket = std::move(*admitted);
  if (declared >= 0) body.resize(expected);
  const auto too_large = [&] {
    Failure f = FailureOf(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the request body is over --max_message_bytes (", limit, " bytes)")));
    f.close = true;
    return f;
  };
  size_t have = 0;
  while (declared < 0 || have < expected) {
    if (Clock::now() > deadline) {
      Failure f{408, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                  absl::StrCat("the request body did not arrive within the read "
                                               "timeout (--http_read_timeout): ", have, " of ",
                                               declared >= 0 ? absl::StrCat(expected)
                                                             : std::string("?"),
                                               " bytes"))};
      f.close = true;
      return f;
    }
    if (declared < 0 && have == body.size()) {  // chunked: grow up to one byte past the limit
      if (have > limit) return too_large();
      body.resize(std::min(limit + 1, have + kReadPiece));
    }
    const size_t want = std::min(kReadPiece, body.size() - have);
    const int n = mg_read(conn, body.data() + have, want);
    if (n <= 0 && Clock::now() > deadline) continue;  // the watchdog ended it: 408 above
    if (n <= 0) {
      if (declared < 0) break;  // the end of a chunked body
      Failure f = Invalid(absl::StrCat("the request body ended after ", have, " of the ",
                                       expected, " bytes its Content-Length announced"));
      f.close = true;
      return f;
    }
    have += static_cast<size_t>(n);
  }
  if (have > limit) return too_large();
  body.resize(have);
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              const InferenceService& inference,
                                                              CallTracker& tracker,
                                                              ServiceMetrics* metrics) {
  std::unique_ptr<HttpServer> server(new HttpServer(options, inference, tracker, metrics));
  server->watchdog_ = std::make_unique<ReadWatchdog>();
  const bool tls = !options.tls_cert.empty();
  if (tls && !(mg_check_feature(MG_FEATURES_SSL) & MG_FEATURES_SSL)) {
    return absl::FailedPreconditionError("--tls_cert: this civetweb has no TLS");
  }
  const unsigned features = tls ? MG_FEATURES_SSL : 0;
  server->library_initialized_ = true;  // Stop balances it, also on a failed start
  // Loads OpenSSL (libssl.so, libcrypto.so) for TLS; a failure shows in mg_start's log.
  mg_init_library(features);
  if (tls) RETURN_IF_ERROR(RepairCivetwebTls());
  const std::string ports = ListenPorts(options.listen, tls);
  const std::string threads = std::to_string(std::max(1, options.threads));
  const std::string timeout = std::to_string(options.read_timeout.count());
  std::vector<const char*> config = {
      "listening_ports", ports.c_str(),
      "num_threads", threads.c_str(),
      "request_timeout_ms", timeout.c_str(),
      "keep_alive_timeout_ms", timeout.c_str(),
      "enable_keep_alive", "yes",
      "tcp_nodelay", "1",
      "max_request_size", "65536",  // the request line and headers
      "decode_url", "yes",
  };
  if (tls) {
    config.push_back("ssl_protocol_version");
    config.push_back("4");  // TLS 1.2 and later
  }
  config.push_back(nullptr);
  mg_callbacks callbacks{};
  callbacks.log_message = &LogMessage;
  if (tls) {
    callbacks.init_ssl = [](void* ssl_ctx, void* user_data) -> int {
      const HttpOptions& o = static_cast<HttpServer*>(user_data)->options_;
      SSL_CTX* ctx = static_cast<SSL_CTX*>(ssl_ctx);
      if (SSL_CTX_use_certificate_chain_file(ctx, o.tls_cert.c_str()) != 1 ||
          SSL_CTX_use_PrivateKey_file(ctx, o.tls_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
          SSL_CTX_check_private_key(ctx) != 1) {
        return -1;
      }
      if (!o.tls_client_ca.empty()) {  // mutual TLS
        if (SSL_CTX_load_verify_locations(ctx, o.tls_client_ca.c_str(), nullptr) != 1) return -1;
        SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(o.tls_client_ca.c_str()));
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      }
      return 1;
    };
  }
  std::string log;
  start_log = &log;
  server->ctx_ = mg_start(&callbacks, server.get(), config.data());
  start_log = nullptr;
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve HTTP on --http_listen=", options.listen,
        tls ? " with --tls_cert/--tls_key" : "", ": ", log.empty() ? "civetweb failed" : log));
  }
  mg_set_request_handler(server->ctx_, "/v2", &HttpServer::HandleRequest, server.get());
  mg_set_request_handler(server->ctx_, "**", &HttpServer::HandleRequest, server.get());
  mg_server_port bound[4];
  const int n = mg_get_server_ports(server->ctx_, 4, bound);
  server->port_ = n > 0 ? bound[0].port : 0;
  server->address_ =
      absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":", server->port_);
  return server;
}

HttpServer::HttpServer(const HttpOptions& options, const InferenceService& inference,
                       CallTracker& tracker, ServiceMetrics* metrics)
    : options_(options), inference_(inference), tracker_(tracker), metrics_(metrics) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::StartDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool HttpServer::WaitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_until(lock, deadline, [&] { return inflight_ == 0; });
}

void HttpServer::Stop() {
  std::call_once(stop_once_, [&] {
    StartDrain();
    stopping_.store(true);  // long work polls it and stops
    if (ctx_ != nullptr) mg_stop(ctx_);  // joins the workers
    ctx_ = nullptr;
    if (library_initialized_) mg_exit_library();  // Start's mg_init_library
    library_initialized_ = false;
  });
}

bool HttpServer::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) return false;
  ++inflight_;
  return true;
}

void HttpServer::Leave() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--inflight_ == 0) idle_.notify_all();
}

int HttpServer::HandleRequest(mg_connection* conn, void* self) {
  return static_cast<HttpServer*>(self)->Serve(conn);
}

int HttpServer::Serve(mg_connection* conn) {
  const Clock::time_point arrival = Clock::now();
  const mg_request_info* ri = mg_get_request_info(conn);
  const Route route = RouteOf(ri->local_uri != nullptr ? ri->local_uri : "");
  const absl::string_view method = ri->request_method != nullptr ? ri->request_method : "";
  if (route.endpoint == Endpoint::kNotFound) {
    SendJson(conn, 404, ErrorJson(absl::StrCat("no endpoint at ", ri->local_uri ? ri->local_uri : "",
                                               "; the Open Inference Protocol's paths start "
                                               "with /v2")));
    return 404;
  }
  const bool method_ok = method == route.method ||
                         (route.endpoint == Endpoint::kRepositoryIndex && method == "GET");
  if (!method_ok) {
    SendJson(conn, 405,
             ErrorJson(absl::StrCat(method, " is not allowed on ", ri->local_uri, "; use ",
                                    route.method)),
             {{"Allow", route.method}});
    return 405;
  }
  // Probes: not tracked, as gRPC's health and ServerLive/ServerReady are not.
  if (route.endpoint == Endpoint::kLive) {
    Send(conn, 200, nullptr, {});
    return 200;
  }
  const bool ready = inference_.Ready() && !stopping_.load() && [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return !draining_;
  }();
  if (route.endpoint == Endpoint::kReady) {
    if (ready) {
      Send(conn, 200, nullptr, {});
      return 200;
    }
    SendJson(conn, 503, ErrorJson(kShuttingDown.error_message()));
    return 503;
  }

  Call call(*this, ri, MethodOf(route.endpoint));
  if (!call.accepted()) {
    SendFailure(conn, Failure{503, kShuttingDown, /*close=*/true});
    call.Finish(kShuttingDown);
    return 503;
  }
  auto fail = [&](const Failure& f) {
    SendFailure(conn, f);
    call.Finish(f.status);
    return f.http;
  };
  auto ok_json = [&](const std::string& body) {
    SendJson(conn, 200, body);
    call.Finish(grpc::Status::OK);
    return 200;
  };
  const SharedMemoryRegistry& shm = *inference_.runtime().shm;
  switch (route.endpoint) {
    case Endpoint::kServerMetadata: {
      inference::ServerMetadataResponse meta;
      inference_.FillServerMetadata(meta);
      json out = {{"name", meta.name()}, {"version", meta.version()}};
      json extensions = json::array({"binary_tensor_data"});
      for (const std::string& e : meta.extensions()) extensions.push_back(e);
      out["extensions"] = extensions;
      return ok_json(out.dump());
    }
    case Endpoint::kModelMetadata: {
      inference::ModelMetadataResponse meta;
      absl::Status s = InferenceService::FillModelMetadata(route.model, route.version, meta);
      if (!s.ok()) return fail(FailureOf(ToGrpcStatus(s)));
      auto tensors = [](const auto& list) {
        json out = json::array();
        for (const auto& t : list) {
          out.push_back({{"name", t.name()},
                         {"datatype", t.datatype()},
                         {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
        }
        return out;
      };
      json out = {{"name", meta.name()},
                  {"versions", std::vector<std::string>(meta.versions().begin(),
                                                        meta.versions().end())},
                  {"platform", meta.platform()},
                  {"inputs", tensors(meta.inputs())},
                  {"outputs", tensors(meta.outputs())}};
      return ok_json(out.dump());
    }
    case Endpoint::kModelReady: {
      inference::ModelMetadataResponse meta;
      absl::Status s = InferenceService::FillModelMetadata(route.model, route.version, meta);
      if (!s.ok()) return fail(FailureOf(ToGrpcStatus(s)));
      if (!inference_.ModelIsReady(route.model, route.version) || !ready) {
        return fail(Failure{503, kShuttingDown});
      }
      Send(conn, 200, nullptr, {});
      call.Finish(grpc::Status::OK);
      return 200;
    }
    case Endpoint::kModelConfig: {
      inference::ModelConfigResponse config;
      absl::Status s = InferenceService::FillModelConfig(route.model, route.version, config);
      if (!s.ok()) return fail(FailureOf(ToGrpcStatus(s)));
      std::string text;
      google::protobuf::util::JsonPrintOptions print;
      print.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(config.config(), &text, print);
      json out = json::parse(text);
      Int64StringsToNumbers(out);
      return ok_json(out.dump());
    }
    case Endpoint::kRepositoryIndex: {
      inference::RepositoryIndexResponse index;
      InferenceService::FillRepositoryIndex(index);
      json out = json::array();
      for (const auto& m : index.models()) {
        out.push_back({{"name", m.name()}, {"version", m.version()}, {"state", m.state()}});
      }
      return ok_json(out.dump());
    }
    case Endpoint::kShmStatus: {
      absl::StatusOr<std::vector<ShmRegionStatus>> regions = shm.Status(route.region);
      if (!regions.ok()) return fail(FailureOf(ToGrpcStatus(regions.status())));
      json out = json::array();
      for (const ShmRegionStatus& r : *regions) {
        out.push_back({{"name", r.name}, {"offset", r.offset}, {"byte_size", r.byte_size}});
      }
      return ok_json(out.dump());
    }
    case Endpoint::kShmUnregister: {
      absl::Status s = inference_.runtime().shm->Unregister(route.region);
      if (!s.ok()) return fail(FailureOf(ToGrpcStatus(s)));
      return ok_json("{}");
    }
    default: break;
  }

  // The calls with a body: shared-memory registration and inference.
  const Clock::time_point deadline = arrival + options_.read_timeout;
  if (const char* encoding = mg_get_header(conn, "Content-Encoding");
      encoding != nullptr && !absl::EqualsIgnoreCase(encoding, "identity")) {
    Failure f = Invalid(absl::StrCat("Content-Encoding '", encoding,
                                     "' is not supported; send the body uncompressed"));
    f.close = true;
    return fail(f);
  }
  std::optional<size_t> header_length;
  if (const char* h = mg_get_header(conn, "Inference-Header-Content-Length")) {
    absl::StatusOr<size_t> n = ParseHeaderLength(h);
    if (!n.ok()) {
      Failure f = Invalid(std::string(n.status().message()));
      f.close = true;
      return fail(f);
    }
    header_length = *n;
  }
  if (route.endpoint == Endpoint::kInfer) {
    absl::StatusOr<const ModelInfo*> model = FindModel(route.model, "");
    if (model.ok()) call.set_scheme((*model)->label);
  }
  Admission::Ticket upload;
  std::string body;
  // The socket is looked up once per connection (civetweb keeps it for its lifetime).
  intptr_t socket_plus_one = reinterpret_cast<intptr_t>(mg_get_user_connection_data(conn));
  if (socket_plus_one == 0 && ri->content_length != 0) {
    socket_plus_one = FindSocket(ri) + 1;
    mg_set_user_connection_data(conn, reinterpret_cast<void*>(socket_plus_one));
  }
  const int socket_fd = static_cast<int>(socket_plus_one) - 1;
  if (socket_fd >= 0) watchdog_->Arm(socket_fd, deadline);
  std::optional<Failure> read_failed = ReadBody(conn, ri, options_.max_body_bytes, deadline,
                                                *inference_.runtime().admission, upload, body);
  if (socket_fd >= 0) watchdog_->Disarm(socket_fd);
  if (read_failed) return fail(*read_failed);

  if (route.endpoint == Endpoint::kShmRegister) {
    json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!request.is_object()) return fail(Invalid("the body must be a JSON object"));
    auto key = request.find("key");
    if (key == request.end() || !key->is_string()) {
      return fail(Invalid("key must be a string (the shm_open name)"));
    }
    uint64_t field[2] = {0, 0};
    const char* names[2] = {"offset", "byte_size"};
    for (int i = 0; i < 2; ++i) {
      auto it = request.find(names[i]);
      if (it == request.end() && i == 0) continue;
      if (it == request.end() || !it->is_number_unsigned()) {
        return fail(Invalid(absl::StrCat(names[i], " must be an integer >= 0")));
      }
      field[i] = it->get<uint64_t>();
    }
    absl::Status s = inference_.runtime().shm->Register(route.region, key->get<std::string>(),
                                                        field[0], field[1]);
    if (!s.ok()) return fail(FailureOf(ToGrpcStatus(s)));
    return ok_json("{}");
  }

  // Inference: the gRPC ModelInfer's path from here on.
  InferRequestBody parsed;
  absl::Status parsed_ok = ParseInferRequest(body, header_length, route.model, route.version,
                                             parsed);
  call.set_request_id(parsed.request.id());
  if (!parsed_ok.ok()) {
    const std::string& id = parsed.request.id();
    return fail(Invalid(id.empty() ? std::string(parsed_ok.message())
                                   : absl::StrCat("request ", id, ": ", parsed_ok.message())));
  }
  std::string().swap(body);
  upload = Admission::Ticket();  // the call's own cost is admitted next
  inference::ModelInferResponse response;
  CallOutcome result =
      inference_.Infer(parsed.request, [this] { return stopping_.load(); }, response);
  if (!result.status.ok()) return fail(FailureOf(result.status, result.refused));
  const InferResponseBody out = WriteInferResponse(response, parsed.outputs);
  if (out.binary.empty()) {
    SendJson(conn, 200, out.json);
  } else {
    std::vector<Header> headers = {
        {"Inference-Header-Content-Length", std::to_string(out.json.size())}};
    mg_response_header_start(conn, 200);
    mg_response_header_add(conn, "Content-Type", "application/octet-stream", -1);
    const std::string length = std::to_string(out.json.size() + out.binary_bytes);
    mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
    mg_response_header_add(conn, "Inference-Header-Content-Length", headers[0].value.c_str(), -1);
    mg_response_header_send(conn);
    mg_write(conn, out.json.data(), out.json.size());
    for (absl::string_view piece : out.binary) {
      if (!piece.empty()) mg_write(conn, piece.data(), piece.size());
    }
  }
  call.Finish(grpc::Status::OK);
  return 200;
}

}  // namespace posenc
