#include "server/service/server.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/common/status_macros.h"
#include "server/tables/table_file.h"

namespace posenc {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(
    const ServerOptions& options) {
  if (options.tls_cert.empty() && options.tls_key.empty()) {
    if (!options.tls_client_ca.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert.empty() || options.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  grpc::SslServerCredentialsOptions ssl;
  ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert, "--tls_cert"));
  ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key, "--tls_key"));
  ssl.pem_key_cert_pairs.push_back({key, cert});
  if (!options.tls_client_ca.empty()) {  // mutual TLS
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(options.tls_client_ca, "--tls_client_ca"));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PosencServer>> PosencServer::Start(const ServerOptions& options,
                                                                  ServiceMetrics* metrics) {
  std::unique_ptr<PosencServer> server(new PosencServer());
  for (const std::string& spec : options.tables) {
    ASSIGN_OR_RETURN(NamedTableData loaded, LoadTableSpec(spec));
    auto table = std::make_shared<Table>();
    table->rows = loaded.shape[0];
    table->cols = loaded.shape[1];
    table->data = std::move(loaded.data);
    RETURN_IF_ERROR(server->tables_.Add(
        NamedTable{loaded.name, std::move(table), loaded.source_dtype}));
  }
  server->cache_ = std::make_unique<TableCache>(options.cache_bytes, metrics);

  ServiceState state;
  state.cache = server->cache_.get();
  state.tables = &server->tables_;
  state.metrics = metrics;
  state.limits.max_output_bytes = options.max_message_bytes;
  state.version = kVersion;
  server->service_ = std::make_unique<PositionalEncodingService>(state);

  ASSIGN_OR_RETURN(auto credentials, Credentials(options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const int max_message = static_cast<int>(
      std::min<size_t>(options.max_message_bytes, std::numeric_limits<int>::max()));
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  int bound_port = 0;
  builder.AddListeningPort(options.listen, credentials, &bound_port);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (!server->server_) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen=", options.listen));
  }
  server->port_ = bound_port;
  if (absl::StartsWith(options.listen, "unix:")) {
    server->address_ = options.listen;
  } else {
    const size_t colon = options.listen.rfind(':');
    server->address_ = absl::StrCat(options.listen.substr(0, colon), ":", bound_port);
  }
  // "" is the whole server (Kubernetes' gRPC probe asks for it); the service is named too.
  auto* health = server->server_->GetHealthCheckService();
  health->SetServingStatus(v1::PositionalEncoding::service_full_name(), true);
  health->SetServingStatus(true);
  return server;
}

PosencServer::~PosencServer() {
  Shutdown(std::chrono::milliseconds(0));
  Wait();
}

void PosencServer::Shutdown(std::chrono::milliseconds grace) {
  std::call_once(shutdown_once_, [&] {
    server_->GetHealthCheckService()->SetServingStatus(false);
    service_->RefuseNewCalls();
    // Stops accepting, waits for in-flight calls until the deadline, then cancels them.
    server_->Shutdown(std::chrono::system_clock::now() + grace);
  });
}

void PosencServer::Wait() { server_->Wait(); }

}  // namespace posenc
