// Sinusoidal position encodings ("Attention Is All You Need", fairseq, tensor2tensor, Marian),
// computed in float64 and rounded once. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/tables/table_cache.h"
#include "server/tables/table_positions.h"

namespace posenc {

enum class SinusoidalLayout { kInterleaved, kConcatenated };
enum class Timescale { kPerDim, kHalfMinusOne };

struct SinusoidalSpec {
  double base = 10000.0;
  SinusoidalLayout layout = SinusoidalLayout::kInterleaved;
  Timescale timescale = Timescale::kPerDim;
  int64_t dim = 0;  // width of the encoding
};

// Smallest base accepted. inv_freq_i = base^(-e) with e <= 2 (e <= 1 but for
// HALF_MINUS_ONE at odd d), so inv_freq <= 1e12 and every angle p * inv_freq with
// p <= 2^40 stays below 1.1e24: finite, and so are its sin and cos. A 5e-324 base would give
// inv_freq = inf and NaN rows. Larger bases only shrink the frequencies (towards 0, finite).
inline constexpr double kMinSinusoidalBase = 1e-6;

// INVALID_ARGUMENT naming `field` (e.g. "sinusoidal") when base is not finite or below
// kMinSinusoidalBase, or dim < 1. With it OK every row for positions in [0, 2^40] is finite.
absl::Status ValidateSinusoidal(const SinusoidalSpec& spec, absl::string_view field);

// Maps a position to its encoding row. Column rules (proto/posenc/v1/posenc.proto, Sinusoidal):
//   INTERLEAVED: column 2i = sin(p*w_i), 2i+1 = cos(p*w_i); ceil(d/2) sin, floor(d/2) cos.
//   CONCATENATED+PER_DIM (Marian): ceil(d/2) sin columns then floor(d/2) cos columns.
//   CONCATENATED+HALF_MINUS_ONE (fairseq): floor(d/2) sin, floor(d/2) cos, a zero column if odd.
//   PER_DIM: w_i = base^(-2i/d); HALF_MINUS_ONE: w_i = base^(-i/max(d/2-1, 1)).
class SinusoidalEncoder {
 public:
  // REQUIRES: ValidateSinusoidal(spec).ok()
  explicit SinusoidalEncoder(const SinusoidalSpec& spec);

  int64_t dim() const { return dim_; }
  // Writes the encoding of `position` into out[0..dim), float64.
  void RowF64(double position, double* out) const;
  // The same, rounded once to float32.
  void Row(double position, float* out) const;

 private:
  int64_t dim_;
  std::vector<double> inv_freq_;  // one per sin/cos pair
  std::vector<int64_t> sin_col_;  // column of sin(p*w_i), or -1
  std::vector<int64_t> cos_col_;  // column of cos(p*w_i), or -1
};

// Rows for positions first..first+n-1, [n, dim].
Table ComputeSinusoidalTable(const SinusoidalSpec& spec, int64_t first, int64_t n);

// Rows first_row..first_row+n-1 of a table whose row r is position positions.At(r) (negative
// positions too: sin is odd, cos even), [n, dim]. REQUIRES: ValidateSinusoidal(spec) and
// ValidateTablePositions OK for a table holding those rows.
Table ComputeSinusoidalTable(const SinusoidalSpec& spec, const TablePositions& positions,
                             int64_t first_row, int64_t n);

// Cache key naming every parameter that defines a table of positions 0..rows-1.
std::string SinusoidalTableKey(const SinusoidalSpec& spec, int64_t rows);

}  // namespace posenc
