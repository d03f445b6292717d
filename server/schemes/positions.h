// Positions of the tokens of a [batch, seq] grid, resolved from the request's
// offsets / ids (proto/posenc/v1/posenc.proto, Positions). Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace posenc {

// Largest position accepted; keeps position arithmetic (and float64 angles) exact.
inline constexpr int64_t kMaxPosition = int64_t{1} << 40;

// One piece of a multimodal prompt (posenc.v1.MropeSegment): a text run or a vision grid.
struct MropeSegmentSpec {
  enum class Kind { kUnspecified, kText, kImage, kVideo };
  int64_t text_length = 0;
  int64_t grid_t = 0;
  int64_t grid_h = 0;
  int64_t grid_w = 0;
  std::optional<double> temporal_scale;
  // What the segment is (posenc.v1.MropeSegmentKind); decides the default temporal scale.
  Kind kind = Kind::kUnspecified;

  // Frame group t of a grid sits at s + floor(t * TemporalScale()): the given scale, else 0
  // for an image (HF Qwen2.5-VL's second_per_grid_t = 0 for images) and 1 otherwise.
  double TemporalScale() const { return temporal_scale.value_or(kind == Kind::kImage ? 0.0 : 1.0); }
};

// The request's positions, not yet checked. Spans point into the request.
struct PositionsSpec {
  absl::Span<const int64_t> offsets;
  absl::Span<const int64_t> ids;
  absl::Span<const double> values;
  // Multi-axis RoPE: [num_axes][batch or 1][seq] row-major, or the prompt's segments.
  absl::Span<const int64_t> axis_ids;
  std::vector<MropeSegmentSpec> mrope_segments;

  bool has_axis_positions() const { return !axis_ids.empty() || !mrope_segments.empty(); }
};

// Which position token t of batch row b has.
struct PositionGrid {
  int64_t batch = 1;
  int64_t seq = 0;
  // Every batch row has the same positions.
  bool shared = true;
  // Row b's token t has position starts[shared ? 0 : b] + t; otherwise `ids` holds them.
  bool contiguous = true;
  std::vector<int64_t> starts;  // contiguous: size 1 if shared else batch
  std::vector<int64_t> ids;     // !contiguous: size seq if shared else batch*seq
  int64_t max_position = -1;    // -1 when there are no tokens

  // Number of distinct position rows (1 if shared, else batch).
  int64_t groups() const { return shared ? 1 : batch; }
  int64_t At(int64_t b, int64_t t) const {
    const int64_t g = shared ? 0 : b;
    return contiguous ? starts[g] + t : ids[g * seq + t];
  }
};

// Resolves positions for a [batch, seq] grid. `ids` (size seq or batch*seq) overrides
// `offsets` (size 1 or batch); neither gives 0..seq-1. Errors name the field:
// INVALID_ARGUMENT for a wrong size, a negative position or one above kMaxPosition.
// An ids list that happens to be consecutive is recognised as contiguous.
absl::StatusOr<PositionGrid> ResolvePositions(const PositionsSpec& spec, int64_t batch,
                                              int64_t seq);

// Positions per axis of a [batch, seq] grid (multi-axis RoPE).
struct AxisPositionGrid {
  int num_axes = 1;
  int64_t batch = 1;
  int64_t seq = 0;
  bool shared = true;         // every batch row has the same positions
  std::vector<int64_t> pos;   // [num_axes][groups][seq]
  int64_t max_position = -1;  // over every axis; -1 when there are no tokens

  int64_t groups() const { return shared ? 1 : batch; }
  int64_t At(int axis, int64_t b, int64_t t) const {
    return pos[(static_cast<size_t>(axis) * groups() + (shared ? 0 : b)) * seq + t];
  }
};

// Resolves `axis_ids` ([num_axes][batch or 1][seq]) or `mrope_segments` (HF Qwen2-VL's
// get_rope_index layout, needing num_axes == 3) for a [batch, seq] grid; `offsets` (size 1
// or batch) add to every axis. REQUIRES: spec.has_axis_positions(). INVALID_ARGUMENT naming
// the field for: both given, `ids` given too, a wrong size, segments not totalling seq or
// malformed, a negative position or one above kMaxPosition.
absl::StatusOr<AxisPositionGrid> ResolveAxisPositions(const PositionsSpec& spec, int num_axes,
                                                      int64_t batch, int64_t seq);

}  // namespace posenc
