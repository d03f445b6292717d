// Attention biases (ALiBi, T5 buckets) as a plan: the validated spec, the geometry and the
// T5 table resolved by name, then either a new [heads, q, k] bias (or [q, k] bucket ids)
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

// The request's bias, converted but not yet checked. Exactly one of alibi and t5 is set.
struct BiasSpec {
  std::optional<AlibiSpec> alibi;
  std::optional<T5Spec> t5;
  std::string t5_table;  // --table name; empty: no table (bucket ids only)
  BiasGeometry geom;
  bool add_to_scores = false;  // scores given: add in place instead of building
};

// A checked bias: what to build or add, and with what.
struct BiasPlan {
  BiasSpec spec;
  const Table* t5_table = nullptr;  // [num_buckets, heads]; owned by NamedTables
  int64_t heads = 0;                // ALiBi's num_heads or the T5 table's columns
  // Built outputs (add_to_scores false): [heads, q, k] FLOAT32, or [q, k] INT32 bucket ids
  // for T5 without a table.
  Shape output_shape;
  DType output_dtype = DType::kFloat32;
};

// Checks the geometry, the spec and the table (NOT_FOUND when not loaded, INVALID_ARGUMENT
// for a shape that does not fit num_buckets, or for adding T5 biases without a table).
absl::StatusOr<BiasPlan> PlanBias(const BiasSpec& spec, const NamedTables& tables);

// Bytes of the built output, RESOURCE_EXHAUSTED past limits.max_output_bytes. Checked
// before anything proportional to the output is allocated (not needed when the output goes
// to a client's shared memory, which has its own size).
absl::StatusOr<int64_t> BiasOutputBytes(const BiasPlan& plan, const SchemeLimits& limits);

// Builds the bias into `out` (plan.output_shape, plan.output_dtype; data set).
absl::Status BuildBias(const BiasPlan& plan, const TensorView& out);

// Checks `scores` ([batch, heads, q, k] float) and adds the bias to it in place.
absl::Status AddBias(const BiasPlan& plan, const TensorView& scores);

}  // namespace posenc
