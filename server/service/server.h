// A running posenc server: gRPC service + health + reflection on one port, tables loaded,
// cache and metrics wired. Start() returns once the port is bound; Shutdown() drains.
// Thread-safe: Shutdown may be called from any thread (e.g. a signal watcher).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "server/metrics/metrics.h"
#include "server/service/grpc_service.h"
#include "server/tables/named_tables.h"
#include "server/tables/table_cache.h"

namespace posenc {

inline constexpr char kVersion[] = "0.1.0";

struct ServerOptions {
  std::string listen = "0.0.0.0:50051";  // host:port or unix:/path; port 0 picks one
  std::vector<std::string> tables;       // name=path.npy | name=path.safetensors:tensor
  size_t cache_bytes = size_t{256} << 20;
  size_t max_message_bytes = size_t{64} << 20;
  std::string tls_cert, tls_key, tls_client_ca;  // PEM file paths
};

class PosencServer {
 public:
  // Loads the tables and binds the port. `metrics` may be null; it must outlive the server.
  static absl::StatusOr<std::unique_ptr<PosencServer>> Start(const ServerOptions& options,
                                                             ServiceMetrics* metrics);
  ~PosencServer();

  // The bound address, e.g. "0.0.0.0:41234" or "unix:/tmp/posenc.sock".
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // Health turns NOT_SERVING, new calls are refused, in-flight calls get until `grace` to
  // finish and are cancelled after it. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  // Blocks until the server has shut down.
  void Wait();

 private:
  PosencServer() = default;

  NamedTables tables_;
  std::unique_ptr<TableCache> cache_;
  std::unique_ptr<PositionalEncodingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

}  // namespace posenc
