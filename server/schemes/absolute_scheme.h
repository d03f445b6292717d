// Absolute encodings added to (or concatenated with) embeddings [batch, seq, d] or [seq, d]:
// sinusoidal, learned tables, hierarchical levels and continuous (real-valued) positions.
// Each turns its parameters into encoding rows per position group, then one kernel combines
// them with the embeddings. Free functions; thread-safe given a thread-safe TableCache.
//
// Results are finite or refused. Every parameter that could take a row out of float range
// is bounded below (INVALID_ARGUMENT naming the field), and rows computed per request are
// checked finite before the add (a backstop, cheap next to their sin/cos); learned rows come
// from tables checked finite when loaded, and interpolating them stays between. The combined
// result (a NaN or inf in the input, or scales that overflow the dtype, e.g. float16 past
// 65504) is not checked here: the service scans every Encode result once, on the kernel
// threads when it is large (finite_kernel.h), and refuses one that is not finite.
// Parameters that multiply work have stated bounds (kMaxPeDim, kMaxHierarchicalLevels);
// over one, or over SchemeLimits, is RESOURCE_EXHAUSTED.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/schemes/positions.h"
#include "server/tables/fourier_features.h"
#include "server/tables/sinusoidal_2d_table.h"
#include "server/tables/sinusoidal_table.h"
#include "server/tables/table_cache.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

enum class Fusion { kAdd, kConcat, kMultiply };

// |input_scale|, |pe_scale| and every hierarchical level's |scale| are at most this: the
// encoding (|pe| <= 1 per level) times it stays far inside float range.
inline constexpr double kMaxScale = 1e6;
// Widest CONCAT encoding (pe_dim): the rows cost pe_dim per token however small the input.
inline constexpr int64_t kMaxPeDim = int64_t{1} << 16;
// Most hierarchical levels: each costs a sin/cos row per token.
inline constexpr int64_t kMaxHierarchicalLevels = 64;

// How the encoding meets the embeddings (proto/posenc/v1/posenc.proto, Fusion): ADD
// x*input_scale + pe*pe_scale; MULTIPLY (x*input_scale) * (pe*pe_scale), elementwise;
// CONCAT [x*input_scale, pe*pe_scale] along the last axis.
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

// Each position values[i] * value_scale must be within [-kMaxPosition, kMaxPosition]:
// as for integer positions, the angles stay below 1.1e24 (finite sin and cos). Near 1e308
// they would be inf and the rows NaN.
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
  // For a result written over the input (ADD, MULTIPLY): the index of its first element
  // that is not finite, or -1, as the kernel found it while writing; unset where the caller
  // must look itself (CONCAT).
  std::optional<int64_t> first_non_finite;
};

// `input` is the request's tensor; with ADD it is modified in place. Errors name the field.
// `sinusoidal.dim` is ignored: the width comes from the input (ADD) or pe_dim (CONCAT).
absl::StatusOr<AbsoluteResult> ApplySinusoidal(SinusoidalSpec sinusoidal,
                                               const CombineSpec& combine, TensorView input,
                                               const PositionsSpec& positions, TableCache& cache,
                                               const SchemeLimits& limits);

absl::StatusOr<AbsoluteResult> ApplyLearned(const LearnedSpec& learned, const CombineSpec& combine,
                                            TensorView input, const PositionsSpec& positions,
                                            const SchemeLimits& limits);

absl::StatusOr<AbsoluteResult> ApplyHierarchical(absl::Span<const HierarchicalLevel> levels,
                                                 TensorView input, const SchemeLimits& limits);

absl::StatusOr<AbsoluteResult> ApplyContinuous(const ContinuousSpec& continuous, TensorView input,
                                               const PositionsSpec& positions,
                                               const SchemeLimits& limits);

// ViT / MAE 2D sin-cos (server/tables/sinusoidal_2d_table.h) for input [batch, H*W (+1), d]:
// `sinusoidal_2d.dim` is ignored (the width is the input's, also for CONCAT); positions
// must be empty (the grid gives them). The table comes from `cache`.
absl::StatusOr<AbsoluteResult> ApplySinusoidal2D(Sinusoidal2DSpec spec, const CombineSpec& combine,
                                                 TensorView input, const PositionsSpec& positions,
                                                 TableCache& cache, const SchemeLimits& limits);

// Fourier features: B [F, num_axes] row-major in `frequencies` (from the request or a named
// table; `field` names it in errors). v per token from positions.values (num_axes per token,
// size seq*m or batch*seq*m, each finite within kMaxFourierCoordinate) or, with num_axes 1
// and no values, the integer positions. ADD and MULTIPLY need d_model = 2F; CONCAT appends
// 2F (combine.pe_dim must be unset).
struct FourierSpec {
  absl::Span<const double> frequencies;
  int64_t num_axes = 1;
  std::string field = "fourier.frequencies";
};

// Integer positions read rows of a cached table of positions 0..R-1 where the dense-table
// policy allows one (dense_table.h), as sinusoidal does.
absl::StatusOr<AbsoluteResult> ApplyFourier(const FourierSpec& fourier, const CombineSpec& combine,
                                            TensorView input, const PositionsSpec& positions,
                                            TableCache& cache, const SchemeLimits& limits);

}  // namespace posenc
