// Fourier features (Tancik et al. 2020, "Fourier Features Let Networks Learn High Frequency
// Functions"): pe(v) = [cos(2 pi B v), sin(2 pi B v)] for B [F, m] and v of m axes, computed
// in float64 and rounded once. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tables/table_cache.h"

namespace posenc {

// Most frequencies F (the encoding is 2F wide, at most kMaxPeDim) and axes m served.
inline constexpr int64_t kMaxFourierFeatures = int64_t{1} << 15;
inline constexpr int64_t kMaxFourierAxes = 64;
// |B| entries and |v| coordinates are at most these: every angle 2 pi B v then stays below
// 2 pi * 64 * 1e12 * 2^40 (about 4.4e26), finite, and so are its cos and sin.
inline constexpr double kMaxFourierFrequency = 1e12;
inline constexpr double kMaxFourierCoordinate = 1099511627776.0;  // 2^40

class FourierEncoder {
 public:
  // b: [num_features, num_axes] row-major. Errors name `field` ("fourier.frequencies" or
  // the table): INVALID_ARGUMENT when num_axes < 1, b is empty or not a whole number of rows
  // of num_axes, or an entry is not finite or over kMaxFourierFrequency in magnitude;
  // RESOURCE_EXHAUSTED over kMaxFourierFeatures or kMaxFourierAxes.
  static absl::StatusOr<FourierEncoder> Create(absl::Span<const double> b, int64_t num_axes,
                                               absl::string_view field);

  int64_t num_features() const { return features_; }
  int64_t num_axes() const { return axes_; }
  int64_t dim() const { return 2 * features_; }

  // Writes pe(v) into out[0..2F): out[f] = cos(2 pi <B_f, v>), out[F + f] = sin(...), the
  // dot product and both functions in float64, each value rounded once to float32.
  // REQUIRES: v holds num_axes() coordinates, each within kMaxFourierCoordinate.
  void Row(const double* v, float* out) const;

  // The rows of integer positions 0..rows-1 (num_axes() == 1), [rows, dim()].
  Table IntegerRows(int64_t rows) const;
  // The cache key of IntegerRows(rows): every frequency's exact bytes.
  std::string IntegerRowsKey(int64_t rows) const;

 private:
  FourierEncoder(std::vector<double> b, int64_t features, int64_t axes)
      : b_(std::move(b)), features_(features), axes_(axes) {}

  std::vector<double> b_;  // [F, m]
  int64_t features_;
  int64_t axes_;
};

}  // namespace posenc
