// Attention biases (ALiBi, T5 buckets, Shaw relative positions, DeBERTa relative positions)
// as a plan: the validated spec, the geometry and the table resolved by name, then either a
// new output (a [heads, q, k] bias, [q, k] ids, Shaw's [q, k, d] embeddings or query term)
// built into a caller-placed buffer or the bias added in place to attention scores. The
// caller (service/) converts the request and places tensors; this file decides what is
// built, its shape and dtype, and which kernel runs. Free functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/kernels/bias_kernel.h"
#include "server/schemes/absolute_scheme.h"
#include "server/tables/named_tables.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// The request's bias, converted but not yet checked. Exactly one scheme is set.
struct BiasSpec {
  std::optional<AlibiSpec> alibi;
  std::optional<T5Spec> t5;
  std::optional<ShawSpec> shaw;
  std::optional<DebertaSpec> deberta;
  std::string t5_table;    // --table name; empty: no table (bucket ids only)
  std::string shaw_table;  // --table name; empty: no table (indices only)
  BiasGeometry geom;
  bool add_to_scores = false;  // scores given: add in place instead of building
  // BiasRequest.query's shape and dtype when given (Shaw with a table).
  std::optional<Shape> query_shape;
  DType query_dtype = DType::kFloat32;
};

// A checked bias: what to build or add, and with what.
struct BiasPlan {
  BiasSpec spec;
  const Table* t5_table = nullptr;    // [num_buckets, heads]; owned by NamedTables
  const Table* shaw_table = nullptr;  // [2k + 1, d]; owned by NamedTables
  // ALiBi's num_heads, the T5 table's columns, or the Shaw query's heads.
  int64_t heads = 0;
  // Built outputs (add_to_scores false): [heads, q, k] FLOAT32; [q, k] INT32 ids (T5
  // without a table, Shaw without a table, DeBERTa); Shaw's [q, k, d] FLOAT32 embeddings; or
  // Shaw's query term [batch, heads, q, k] in the query's dtype.
  Shape output_shape;
  DType output_dtype = DType::kFloat32;
  bool shaw_query_term = false;  // Shaw with a table and a query
};

// Checks the geometry, the spec, the table (NOT_FOUND when not loaded, INVALID_ARGUMENT
// for a shape that does not fit) and which tensors go with which scheme: adding to scores
// needs a bias per head (ALiBi, T5 with a table, Shaw's query term); `query` is Shaw's with
// a table only.
absl::StatusOr<BiasPlan> PlanBias(const BiasSpec& spec, const NamedTables& tables);

// Bytes of the built output, RESOURCE_EXHAUSTED past limits.max_output_bytes. Checked
// before anything proportional to the output is allocated (not needed when the output goes
// to a client's shared memory, which has its own size).
absl::StatusOr<int64_t> BiasOutputBytes(const BiasPlan& plan, const SchemeLimits& limits);

// Builds the bias into `out` (plan.output_shape, plan.output_dtype; data set). `query` is
// the Shaw query when plan.shaw_query_term (else ignored).
absl::Status BuildBias(const BiasPlan& plan, const TensorView& out,
                       const ConstTensorView* query = nullptr);

// Checks `scores` ([batch, heads, q, k] float) and adds the bias to it in place.
absl::Status AddBias(const BiasPlan& plan, const TensorView& scores,
                     const ConstTensorView* query = nullptr);

}  // namespace posenc
