// The service's Prometheus metrics (names and labels: README "Metrics", the proto's service).
// Every family and child is created once in Create(); recording is lock-free apart from
// prometheus-cpp's own atomics. Thread-safe. prometheus-cpp stays behind this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/tables/table_cache.h"

namespace posenc {

// posenc.v1's methods, then from kModelInfer on the Open Inference Protocol's
// (inference.GRPCInferenceService); MethodName is the rpc's name in its service.
enum class Method {
  kEncode,
  kEncodeStream,
  kAttentionBias,
  kGetTable,
  kListSchemes,
  kGraphEncode,
  kRegisterSharedMemory,
  kUnregisterSharedMemory,
  kSharedMemoryStatus,
  kModelInfer,
  kModelStreamInfer,
  kModelMetadata,
  kModelConfig,
  kServerMetadata,
  kRepositoryIndex,
  // The Open Inference Protocol's HTTP/REST binding (server/http).
  kHttpInfer,
  kHttpServerMetadata,
  kHttpModelMetadata,
  kHttpModelConfig,
  kHttpRepositoryIndex,
  kHttpSharedMemory,
  kCount
};
// How a call's tensor bytes travelled: inside the messages, or by shared-memory reference.
enum class Transport { kInline, kShm };

const char* MethodName(Method m);

// A value of the `scheme` label: its name and the methods that serve it, which get its
// series up front. The schemes are the service's (Create's caller's) to list; the label
// "none" (a call that names no scheme) is added for every method.
struct MetricsScheme {
  std::string name;
  std::vector<Method> methods;
};

class ServiceMetrics : public TableCacheObserver {
 public:
  // Registers every family and child. `version` labels posenc_build_info. A call's
  // `scheme` below is 0 for "none", or i for schemes[i - 1]; any other value, or a scheme
  // its method does not serve, counts as "none".
  static std::unique_ptr<ServiceMetrics> Create(const std::string& version,
                                                const std::vector<MetricsScheme>& schemes);
  ~ServiceMetrics() override;

  // `code` is a grpc::StatusCode value (0..16).
  void RecordRequest(Method method, int scheme, int code, double seconds);
  void RecordKernel(int scheme, double seconds);
  void AddBytes(Transport transport, uint64_t in, uint64_t out);
  // The registered shared-memory regions and the bytes they map.
  void SetSharedMemory(int64_t regions, uint64_t mapped_bytes);
  // Calls gRPC's transport ended before any handler saw them (a message over
  // --max_message_bytes, a client that gave up mid-upload), counted so far. The counter only
  // rises: a smaller value (calls still ending) is ignored.
  void SetTransportFailedCalls(int64_t total);
  // Calls gRPC's transport started (headers read), counted so far; only rises, likewise.
  void SetTransportStartedCalls(int64_t total);
  // One client connection ended for flooding streams without messages (rapid reset).
  void CountFloodedConnection();
  void InflightAdd(int delta);

  // TableCacheObserver
  void OnHit() override;
  void OnMiss() override;
  void OnEvict(size_t count) override;
  void OnBytes(size_t total_bytes) override;

  // Serves GET /metrics over HTTP on `address` (host:port or [v6]:port, port 0 picks one)
  // with server/http's core (one I/O thread). Returns the port; UNAVAILABLE "port N on ADDR
  // is in use (--metrics_listen)" for a busy port.
  absl::StatusOr<int> StartExposer(const std::string& address);

  // The metrics as Prometheus text, for tests.
  std::string Render() const;

 private:
  struct Impl;
  explicit ServiceMetrics(std::unique_ptr<Impl> impl);
  static void RegisterCallSeries(Impl& impl, const std::vector<MetricsScheme>& schemes);
  std::unique_ptr<Impl> impl_;
};

}  // namespace posenc
