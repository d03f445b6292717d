// The protocol-level work of each RPC: a request message in, a response message (or an
// error status) out. Finds the request's scheme in the registry (schemes/scheme_registry.h),
// places tensors (inline or shared memory) the way the scheme's family needs, runs the
// scheme's apply step and counts bytes and kernel time; no scheme is named here. Shared
// by the unary and streaming handlers of both fronts. Thread-safe: the state it touches
// (table cache, named tables, metrics, the shared-memory registry) is itself thread-safe or
// read-only.
//
// Zero copy: Encode works in place on the request's tensor bytes and then moves that buffer
// into the response, so the request must be mutable and is left without its data.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "posenc/v1/posenc.pb.h"
#include "server/common/cancel.h"
#include "server/metrics/metrics.h"
#include "server/schemes/scheme_registry.h"
#include "server/service/request_tensors.h"
#include "server/shm/peer_identity.h"
#include "server/shm/shared_memory_registry.h"
#include "server/tables/named_tables.h"
#include "server/tables/table_cache.h"

namespace posenc {

struct ServiceState {
  TableCache* cache = nullptr;                // not owned
  const NamedTables* tables = nullptr;        // not owned; read-only while serving
  ServiceMetrics* metrics = nullptr;          // not owned; may be null in tests
  const SharedMemoryRegistry* shm = nullptr;  // not owned; null: no shared memory
  // limits.max_output_bytes: a response's tensor bytes (--max_message_bytes less the room
  // kept for the response's own fields); the whole message is checked by the CallRunner.
  SchemeLimits limits;
  // GraphEncode's bounds; max_output_elements is always taken from limits.max_output_bytes.
  GraphLimits graph_limits;
  std::string version;

  // What the schemes' apply steps use.
  SchemeEnv Env() const { return SchemeEnv{cache, tables, limits, graph_limits}; }
};

class RequestHandlers {
 public:
  explicit RequestHandlers(const ServiceState& state) : state_(state) {}

  // Applies the request's scheme. `scheme` receives the metrics label even on error.
  // `shm_owner`: whose shared-memory regions the request may use (the client's connection,
  // SharedMemoryOwner in call_runner.h).
  absl::Status Encode(v1::EncodeRequest& request, v1::EncodeResponse& response, SchemeLabel* scheme,
                      const ShmOwner& shm_owner = {}) const;
  absl::Status AttentionBias(v1::BiasRequest& request, v1::BiasResponse& response,
                             SchemeLabel* scheme, const ShmOwner& shm_owner = {}) const;
  // Stops with CANCELLED when `cancelled` says so (polled inside the eigen-solve).
  absl::Status GraphEncode(v1::GraphRequest& request, v1::GraphResponse& response,
                           const CancelCheck& cancelled = {}) const;
  void ListSchemes(v1::ListSchemesResponse& response) const;

  // GetTable: checks the request and says how many rows each chunk carries.
  absl::StatusOr<int64_t> PlanTable(const v1::TableRequest& request, SchemeLabel* scheme) const;
  // Fills `chunk` with rows first..first+n-1 of the requested table.
  absl::Status TableChunk(const v1::TableRequest& request, int64_t first, int64_t n,
                          v1::TableChunk& chunk) const;

  const ServiceState& state() const { return state_; }

 private:
  // Adds a call's tensor bytes in and out to the metrics, inline and by reference.
  void CountBytes(uint64_t in_bytes, uint64_t out_bytes, const RequestTensors& tensors) const;

  ServiceState state_;
};

// Every registered scheme's metrics label and the methods that serve it (for
// ServiceMetrics::Create).
std::vector<MetricsScheme> MetricsSchemes();

}  // namespace posenc
