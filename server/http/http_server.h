// The Open Inference Protocol's HTTP/REST binding (KServe v2 REST as Triton serves it, with
// the binary tensor data and system shared-memory extensions) on --http_listen, served by
// civetweb. A front of the same engine as the gRPC binding: an infer body becomes the
// ModelInferRequest the gRPC ModelInfer takes and runs through InferenceService::Infer (the
// same conversion, cost, admission and work pool); the metadata answers are the gRPC ones
// in JSON. Calls are counted in posenc_requests_total under the Http* method labels.
//
// Limits: a body over --max_message_bytes is refused (413) from its Content-Length before
// it is read; its bytes are admitted (--max_inflight_bytes) before they are read; headers
// must arrive within the read timeout, and the body too (a watchdog cuts a trickling body
// off at its deadline). Drain (ServerFront): once it
// starts, new calls get 503 and accepted ones run to completion.
// Thread-safe; civetweb's worker threads call the handlers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "server/service/inference_service.h"
#include "server/service/server.h"

struct mg_context;
struct mg_connection;

namespace posenc {

struct HttpOptions {
  std::string listen = "0.0.0.0:8000";  // host:port; port 0 picks one
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files, as --tls_* for gRPC
  size_t max_body_bytes = size_t{64} << 20;      // --max_message_bytes
  // Headers must arrive within this of the connection's request start, and the body
  // within this of the headers; an idle keep-alive connection is closed after it.
  std::chrono::milliseconds read_timeout{30000};
  int threads = 32;  // civetweb workers: each serves one connection at a time
};

class HttpServer final : public ServerFront {
 public:
  // Binds the port. Errors name the flag at fault (--http_listen, --tls_*).
  // REQUIRES: `inference` and `tracker` outlive the server; `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           const InferenceService& inference,
                                                           CallTracker& tracker,
                                                           ServiceMetrics* metrics);
  ~HttpServer() override;

  // The bound address, e.g. "0.0.0.0:8000".
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  void StartDrain() override;
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) override;
  void Stop() override;

  // civetweb's entry point; `self` is the HttpServer.
  static int HandleRequest(mg_connection* conn, void* self);

 private:
  class Call;
  class ReadWatchdog;
  HttpServer(const HttpOptions& options, const InferenceService& inference,
             CallTracker& tracker, ServiceMetrics* metrics);
  int Serve(mg_connection* conn);
  // Admits a tracked call: false (and the caller answers 503) once the drain began.
  bool Enter();
  void Leave();

  const HttpOptions options_;
  const InferenceService& inference_;
  CallTracker& tracker_;
  ServiceMetrics* const metrics_;
  std::unique_ptr<ReadWatchdog> watchdog_;  // outlives ctx_ (stopped first)
  mg_context* ctx_ = nullptr;
  bool library_initialized_ = false;
  std::string address_;
  int port_ = 0;

  std::mutex mu_;
  std::condition_variable idle_;
  bool draining_ = false;  // guarded by mu_
  int64_t inflight_ = 0;   // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::once_flag stop_once_;
};

}  // namespace posenc
