// One policy for "a dense prefix table from the cache, or only the positions present":
// a table serves positions 0..R-1 (R a power of two, at least kMinDenseRows, so a growing
// context rebuilds rarely) when it is small next to the request and to the cache budget;
// otherwise the scheme computes rows for just the positions the request holds (a few
// tokens far out never build a huge table). Each scheme names its thresholds below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace posenc {

inline constexpr int64_t kMinDenseRows = 256;

struct DensePolicy {
  // The table may have at most rows_per_token * tokens + allowance rows ...
  int64_t rows_per_token;
  int64_t allowance;
  // ... and take at most 1/budget_divisor of the cache budget.
  size_t budget_divisor;
};

// RoPE rows are narrow (rotary_dim) and reused across layers: a generous allowance.
inline constexpr DensePolicy kRopeDensePolicy{64, 8192, 8};
// Sinusoidal rows are d_model wide: a tighter one.
inline constexpr DensePolicy kSinusoidalDensePolicy{16, 4096, 4};

// R for positions 0..max_position when the policy allows a dense table of rows of
// `row_bytes`; nullopt when only the positions present should be computed.
std::optional<int64_t> DenseTableRows(const DensePolicy& policy, int64_t max_position,
                                      int64_t tokens, int64_t row_bytes, size_t cache_budget);

}  // namespace posenc
