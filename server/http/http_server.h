// The Open Inference Protocol's HTTP/REST binding (KServe v2 REST as Triton serves it, with
// the binary tensor data and system shared-memory extensions) on --http_listen, served by
// http_core.h (Boost.Beast). A front of the same engine as the gRPC binding: an infer body
// becomes the ModelInferRequest the gRPC ModelInfer takes and runs through
// InferenceService::InferAsync (the same conversion, cost, admission and work pool); the
// metadata answers are the gRPC ones in JSON. Calls are counted in posenc_requests_total
// under the Http* method labels.
//
// Limits (docs/operations.md): a body over --max_message_bytes is refused (413) from its
// Content-Length before it is read; as it arrives, its bytes are granted from
// --http_max_upload_bytes (all uploads in progress together) and from --max_inflight_bytes,
// and it takes a call slot only once complete. A small body (SubmitInfer: at most 16 KiB of
// JSON and about 330 KiB in all) is parsed on the I/O thread it arrived on, and its work runs
// there when it may run inline, as a small gRPC call runs on gRPC's thread; larger bodies are
// parsed, and their answers written, on the work pool. Drain (ServerFront): once it starts, new
// requests get 503 and their connection closes; accepted ones run to completion; Stop
// closes whatever is still open.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/http/http_core.h"
#include "server/service/inference_service.h"
#include "server/service/server.h"

namespace posenc {

struct HttpOptions {
  std::string listen = "0.0.0.0:8000";           // host:port or [v6]:port; port 0 picks one
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files, as --tls_* for gRPC
  size_t max_body_bytes = size_t{64} << 20;      // --max_message_bytes
  // --http_read_timeout: a body must arrive within this of its headers, and a keep-alive
  // connection may idle this long between requests.
  std::chrono::milliseconds read_timeout{30000};
  // A request's headers must arrive within this of its first byte (of the connection, on a
  // new one, TLS handshake included).
  std::chrono::milliseconds header_timeout{5000};
  int threads = 2;  // --http_threads: I/O threads (event loops)
  // --http_max_upload_bytes: the bytes all uploads in progress may hold together; 0 is
  // half of --max_inflight_bytes.
  uint64_t max_upload_bytes = 0;
};

class HttpServer final : public ServerFront, private HttpHandler {
 public:
  // Binds the port. Errors name the flag at fault (--http_listen, --tls_*).
  // REQUIRES: `inference` and `tracker` outlive the server; `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           const InferenceService& inference,
                                                           CallTracker& tracker,
                                                           ServiceMetrics* metrics);
  ~HttpServer() override;

  // The bound address, e.g. "0.0.0.0:8000".
  const std::string& address() const { return core_->address(); }
  int port() const { return core_->port(); }

  void StartDrain() override;
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) override;
  void Stop() override;

 private:
  class Call;
  class Uploads;
  struct InferJob;
  HttpServer(const HttpOptions& options, const InferenceService& inference, CallTracker& tracker,
             ServiceMetrics* metrics);

  // HttpHandler
  std::optional<HttpResponse> Screen(HttpRequest& request) override;
  void Handle(HttpRequest request, HttpRespond respond) override;

  // The answers of the endpoints that are not infer, on the I/O thread.
  HttpResponse Answer(Call& call, const HttpRequest& request);
  // Infer: parse, run, write; on the I/O thread for a small body, else on the work pool
  // (RunInfer's `lane`: the lane it was handed to).
  void SubmitInfer(std::shared_ptr<Call> call, HttpRequest request, HttpRespond respond);
  void RunInfer(std::shared_ptr<InferJob> job, std::optional<Lane> lane);
  void FinishInfer(std::shared_ptr<InferJob> job, CallOutcome outcome);
  grpc::Status AdmitJsonAnswer(InferJob& job, bool& retryable);
  bool Ready() const;
  // Admits a tracked call: false (and the caller answers 503) once the drain began.
  bool Enter();
  void Leave();
  void JobDone();

  const HttpOptions options_;
  const InferenceService& inference_;
  CallTracker& tracker_;
  ServiceMetrics* const metrics_;
  std::unique_ptr<Uploads> uploads_;

  mutable std::mutex mu_;
  std::condition_variable idle_;
  bool draining_ = false;  // guarded by mu_
  int64_t inflight_ = 0;   // guarded by mu_: calls accepted and not yet answered
  int64_t jobs_ = 0;       // guarded by mu_: infer work handed to the pool, not yet answered
  std::atomic<bool> stopping_{false};
  std::once_flag stop_once_;
  std::unique_ptr<HttpCore> core_;  // last: stopped and destroyed first
};

}  // namespace posenc
