// Absolute encodings added to (or concatenated with) embeddings [batch, seq, d] or [seq, d]:
// sinusoidal, learned tables, hierarchical levels and continuous (real-valued) positions.
// Each turns its parameters into encoding rows per position group, then one kernel combines
// them with the embeddings. Free functions; thread-safe given a thread-safe TableCache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/schemes/positions.h"
#include "server/tables/sinusoidal_table.h"
#include "server/tables/table_cache.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

enum class Fusion { kAdd, kConcat };

// How the encoding meets the embeddings (shared/API.md "Sinusoidal").
struct CombineSpec {
  float input_scale = 1.0f;
  float pe_scale = 1.0f;
  Fusion fusion = Fusion::kAdd;
  std::optional<int64_t> pe_dim;  // CONCAT width; default d_model
};

enum class Overflow { kError, kClamp, kInterpolate };

struct LearnedSpec {
  std::string name;                    // for error messages
  std::shared_ptr<const Table> table;  // [max_positions, width], float32
  Overflow overflow = Overflow::kError;
};

struct HierarchicalLevel {
  absl::Span<const int64_t> ids;  // size seq or batch*seq
  double base = 10000.0;
  float scale = 1.0f;
};

struct ContinuousSpec {
  double base = 10000.0;
  double value_scale = 1.0;
  SinusoidalLayout layout = SinusoidalLayout::kInterleaved;
  Timescale timescale = Timescale::kPerDim;
};

// Limits that keep one request from taking the server's memory.
struct SchemeLimits {
  size_t max_output_bytes = size_t{64} << 20;
};

// What an absolute scheme produced: with ADD the input was changed in place and `concat`
// is empty; with CONCAT `concat` holds the new output bytes of shape `shape`.
struct AbsoluteResult {
  Shape shape;
  std::optional<std::string> concat;
};

// `input` is the request's tensor; with ADD it is modified in place. Errors name the field.
// `sinusoidal.dim` is ignored: the width comes from the input (ADD) or pe_dim (CONCAT).
absl::StatusOr<AbsoluteResult> ApplySinusoidal(SinusoidalSpec sinusoidal,
                                               const CombineSpec& combine, TensorView input,
                                               const PositionsSpec& positions,
                                               TableCache& cache, const SchemeLimits& limits);

absl::StatusOr<AbsoluteResult> ApplyLearned(const LearnedSpec& learned,
                                            const CombineSpec& combine, TensorView input,
                                            const PositionsSpec& positions,
                                            const SchemeLimits& limits);

absl::StatusOr<AbsoluteResult> ApplyHierarchical(absl::Span<const HierarchicalLevel> levels,
                                                 TensorView input,
                                                 const SchemeLimits& limits);

absl::StatusOr<AbsoluteResult> ApplyContinuous(const ContinuousSpec& continuous,
                                               TensorView input,
                                               const PositionsSpec& positions,
                                               const SchemeLimits& limits);

}  // namespace posenc
