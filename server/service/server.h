// A running posenc server: gRPC service + health + reflection on one port, tables loaded,
// cache and metrics wired, the work pool and admission control behind the handlers.
// Start() returns once the port is bound; Shutdown() drains. Thread-safe: Shutdown may be
// called from any thread (e.g. a signal watcher).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "server/common/version.h"
#include "server/metrics/metrics.h"
#include "server/service/admission.h"
#include "server/service/call_tracker.h"
#include "server/service/grpc_service.h"
#include "server/service/health_service.h"
#include "server/service/inference_service.h"
#include "server/service/reflection_v1.h"
#include "server/service/stream_flood_guard.h"
#include "server/service/work_pool.h"
#include "server/shm/shared_memory_registry.h"
#include "server/tables/named_tables.h"
#include "server/tables/table_cache.h"

namespace posenc {

// The largest --max_message_bytes: protobuf refuses messages of 2 GiB, and a response's
// framing needs room beside its tensor bytes.
inline constexpr size_t kMaxMessageBytesLimit = (size_t{2} << 30) - (size_t{64} << 10);
// Room a response keeps for its own fields (shape, dtype, request id) beside its tensor.
inline constexpr size_t kResponseFramingBytes = 4096;

// A front served beside gRPC on a port of its own (the HTTP/REST binding, server/http),
// on the same services: drained and stopped with the server. Implementations are
// thread-safe.
class ServerFront {
 public:
  virtual ~ServerFront() = default;
  // Calls arriving from now on are refused (503); accepted ones run on.
  virtual void StartDrain() = 0;
  // Blocks until no accepted call is in progress, or until `deadline`. True when idle.
  virtual bool WaitIdle(std::chrono::steady_clock::time_point deadline) = 0;
  // Cancels what is still running and stops serving; returns once no handler runs.
  virtual void Stop() = 0;
};

// Everything posenc-server is configured with, each limit in one place: main.cc fills it
// from the flags (named beside each field), and the defaults here are the flags' defaults.
struct ServerOptions {
  // --listen: host:port (port 0 picks one) or unix:/path. unix-abstract:NAME only with
  // --listen_allow_abstract (an abstract socket has no file mode: any local user connects).
  std::string listen = "0.0.0.0:50051";
  // --listen_socket_mode: permission bits of a unix:/path socket, in place before it accepts.
  // Group-accessible by default, so a client container running under another uid but the
  // same group (a sidecar's app) can connect.
  uint32_t listen_socket_mode = 0660;
  bool listen_allow_abstract = false;  // --listen_allow_abstract
  // --metrics_listen: the Prometheus /metrics address; empty = off. Started by main.
  std::string metrics_listen = "0.0.0.0:9464";
  std::vector<std::string> tables;         // --table: name=path.npy | name=path.safetensors:tensor
  size_t cache_bytes = size_t{256} << 20;  // --cache_bytes: the table cache's budget
  // --max_message_bytes: the largest request or response message, framing included
  // (a response's tensor gets this less kResponseFramingBytes). At most
  // kMaxMessageBytesLimit.
  size_t max_message_bytes = size_t{64} << 20;
  // --accept_compressed: accept gzip/deflate requests. Off by default: gRPC 1.51 inflates a
  // compressed message whole before it checks the size, so a small request could cost
  // gigabytes before admission sees it.
  bool accept_compressed = false;
  // --stream_flood_guard: end connections that flood streams (StreamFloodGuard). Off only
  // where every connection is a trusted proxy's, which carries many clients' streams.
  bool stream_flood_guard = true;
  std::string tls_cert, tls_key, tls_client_ca;  // --tls_cert, --tls_key, --tls_client_ca
  int threads = 1;                               // --threads: workers per lane of the work pool
  // --max_inflight_bytes, --max_concurrent_calls: what admission lets run at once. The byte
  // budget also sizes gRPC's resource quota (transport buffers).
  AdmissionLimits admission;
  // --stall_threshold: health turns NOT_SERVING while a cheap call has waited this long for
  // a worker.
  std::chrono::milliseconds stall_threshold{2000};
  // --shutdown_grace: how long the drain lets accepted calls finish. Used by main.
  std::chrono::milliseconds shutdown_grace{8000};
  SharedMemoryRegistry::Options shm;  // --shm, --shm_key_prefix, --shm_max_bytes, ...
  bool log_requests = false;          // --log_requests: log every call, not only failed
};

class PosencServer {
 public:
  // Checks every option, reads the TLS files, loads the tables and builds the services, and
  // binds nothing: a bad flag is reported before any port is taken. `metrics` may be null;
  // it must outlive the server. Errors name the flag at fault (--table, --listen, --tls_*,
  // --max_message_bytes).
  static absl::StatusOr<std::unique_ptr<PosencServer>> Create(const ServerOptions& options,
                                                              ServiceMetrics* metrics);
  // Binds --listen and serves; once only. A port another socket holds is UNAVAILABLE
  // "port N on HOST is in use (--listen)".
  absl::Status Serve();
  // Create, then Serve.
  static absl::StatusOr<std::unique_ptr<PosencServer>> Start(const ServerOptions& options,
                                                             ServiceMetrics* metrics);
  ~PosencServer();

  // The bound address, e.g. "0.0.0.0:41234" or "unix:/tmp/posenc.sock".
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // The drain, in this order: health NOT_SERVING (Check answers it; open Watches end),
  // calls arriving from now get UNAVAILABLE, calls already accepted -- even ones still
  // uploading -- run to completion until `grace`, and whatever is left then is cancelled.
  // Returns when the server has stopped. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  // Blocks until the server has shut down.
  void Wait();

  // What another front serves through; valid while the server lives.
  const InferenceService& inference() const { return *inference_; }
  ServiceMetrics* metrics() const { return metrics_; }
  CallTracker& tracker() const { return *tracker_; }
  // Drained and stopped by Shutdown with the gRPC calls, destroyed before the services.
  // Call before Shutdown.
  void AddFront(std::unique_ptr<ServerFront> front);

 private:
  PosencServer() = default;
  // Every 100 ms: readiness follows whether cheap calls make progress; memory freed by large
  // calls goes back to the system once nothing runs.
  void Monitor(std::chrono::milliseconds stall_threshold);
  // The monitor's look at the client connections at tick `ticks`: ends those that flood
  // streams without messages (StreamFloodGuard), releases shared memory of those gone, and
  // sets the transport metrics.
  void WatchConnections(StreamFloodGuard& guard, int64_t ticks);
  // Create's and Serve's steps: the services and what they share, then the bound gRPC server.
  void CreateServices(const ServerOptions& options);
  absl::Status Listen(const ServerOptions& options,
                      const std::shared_ptr<grpc::ServerCredentials>& credentials);

  ServerOptions options_;                                 // as Create got them
  std::shared_ptr<grpc::ServerCredentials> credentials_;  // for Serve

  // Declared in the order they must outlive each other: the server goes first.
  NamedTables tables_;
  std::unique_ptr<TableCache> cache_;
  std::unique_ptr<CallTracker> tracker_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<SharedMemoryRegistry> shm_;
  std::unique_ptr<WorkPool> pool_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<CallRunner> runner_;  // the one call path of every service and front
  std::unique_ptr<ReflectionV1Service> reflection_v1_;
  std::unique_ptr<PositionalEncodingService> service_;
  std::unique_ptr<InferenceService> inference_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex fronts_mu_;
  std::vector<std::unique_ptr<ServerFront>> fronts_;  // guarded by fronts_mu_
  ServiceMetrics* metrics_ = nullptr;
  std::string address_;
  int port_ = 0;
  std::once_flag shutdown_once_;

  std::mutex monitor_mu_;
  std::condition_variable monitor_wake_;
  bool monitor_stop_ = false;
  std::thread monitor_;
};

}  // namespace posenc
