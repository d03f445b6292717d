#include "tests/fuzz/fuzz_state.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/tables/named_tables.h"
#include "server/tables/table_cache.h"
#include "server/tensor/dtype.h"

namespace posenc::fuzz {
namespace {

std::shared_ptr<const Table> MakeTable(int64_t rows, int64_t cols) {
  auto t = std::make_shared<Table>();
  t->rows = rows;
  t->cols = cols;
  t->data.resize(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < t->data.size(); ++i) t->data[i] = 0.01f * static_cast<float>(i % 97);
  return t;
}

NamedTables* MakeTables() {
  auto* tables = new NamedTables;
  if (!tables->Add({"pos", MakeTable(64, 16), DType::kFloat32, nullptr}).ok() ||
      !tables->Add({"t5", MakeTable(32, 4), DType::kFloat32, nullptr}).ok() ||
      !tables->Add({"fourier_b", MakeTable(6, 2), DType::kFloat32, nullptr}).ok() ||
      !tables->Add({"shaw", MakeTable(9, 8), DType::kFloat32, nullptr}).ok() ||
      !tables->Add({"kids", MakeTable(3, 4), DType::kFloat32, nullptr}).ok()) {
    std::abort();
  }
  return tables;
}

[[noreturn]] void Fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "fuzz check failed: %s: %s\n", what, why.c_str());
  std::abort();
}

}  // namespace

const RequestHandlers& Handlers() {
  // Leaked on purpose: lives for the whole fuzzing process.
  static const RequestHandlers* handlers = [] {
    ServiceState state;
    state.cache = new TableCache(kCacheBytes);
    state.tables = MakeTables();
    state.limits.max_output_bytes = kMaxOutputBytes;
    // Graphs big enough to reach every solver path, small enough to solve in milliseconds.
    state.graph_limits.max_nodes = 4096;
    state.graph_limits.max_edges = 16384;
    state.graph_limits.max_k = 16;
    state.graph_limits.dense_max_nodes = 64;
    // Random walks, hop distances and trees: small enough that no input runs long.
    state.graph_limits.max_walk_length = 64;
    state.graph_limits.max_anchors = 64;
    state.graph_limits.max_tree_depth = 64;
    state.graph_limits.max_work = int64_t{1} << 24;
    state.version = "fuzz";
    return new RequestHandlers(state);
  }();
  return *handlers;
}

void CheckStatus(const absl::Status& status, const char* what) {
  // POSENC_FUZZ_VERBOSE=1 prints each status: to check that seeds are valid requests.
  static const bool verbose = std::getenv("POSENC_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  if (status.code() == absl::StatusCode::kInternal || status.code() == absl::StatusCode::kUnknown) {
    Fail(what, status.ToString());
  }
}

void CheckTensor(const v1::Tensor& t, const char* what) {
  size_t elem = 0;
  switch (t.dtype()) {
    case v1::FLOAT32:
    case v1::INT32: elem = 4; break;
    case v1::FLOAT16:
    case v1::BFLOAT16: elem = 2; break;
    case v1::INT64: elem = 8; break;
    default: Fail(what, "output dtype is not a known dtype");
  }
  uint64_t count = 1;
  for (int64_t d : t.shape()) {
    if (d < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(d), &count)) {
      Fail(what, "output shape is negative or its product overflows");
    }
  }
  if (t.data().size() != count * elem) {
    Fail(what, "output holds " + std::to_string(t.data().size()) + " bytes, shape says " +
                   std::to_string(count * elem));
  }
}

std::optional<Admission::Ticket> Admit(const absl::StatusOr<CallCost>& cost) {
  static Admission* const admission = new Admission(AdmissionLimits{uint64_t{64} << 20, 64});
  CheckStatus(cost.status(), "CostOf");
  if (!cost.ok()) return std::nullopt;
  absl::StatusOr<Admission::Ticket> ticket = admission->Admit(cost->bytes);
  CheckStatus(ticket.status(), "Admit");
  if (!ticket.ok()) return std::nullopt;
  return std::move(*ticket);
}

void RunEncode(v1::EncodeRequest& request) {
  const std::optional<Admission::Ticket> ticket = Admit(CostOf(request));
  if (!ticket) return;
  const std::string id = request.request_id();
  const bool has_key = request.has_key();
  const bool rope = request.has_rope();
  v1::EncodeResponse response;
  SchemeLabel scheme = kNoScheme;
  const absl::Status status = Handlers().Encode(request, response, &scheme);
  CheckStatus(status, "Encode");
  if (response.request_id() != id) Fail("Encode", "request_id is not echoed");
  if (!status.ok()) return;
  CheckTensor(response.output(), "Encode output");
  if (rope && has_key) CheckTensor(response.key_output(), "Encode key_output");
}

}  // namespace posenc::fuzz
