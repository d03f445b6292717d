// Which position each row of an exported table (GetTable) has: row r is
// first + r * step, clamped to [-clamp, clamp] when clamp is set (Transformer-XL's and XLNet's
// tables in descending relative order: first = klen - 1, step = -1, clamp = clamp_len).
// Plain value; thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace posenc {

// |position| of any row is at most this (2^40, as for request positions).
inline constexpr int64_t kMaxTablePosition = int64_t{1} << 40;

struct TablePositions {
  int64_t first = 0;
  int64_t step = 1;
  std::optional<int64_t> clamp;

  // REQUIRES: ValidateTablePositions(*this, length, ...) OK and 0 <= r < length.
  int64_t At(int64_t r) const {
    // |first|, |step| and r are at most 2^40: the product fits 128 bits; a clamp or the
    // check of an unclamped table's last row brings the result within +-2^40.
    __int128 p = static_cast<__int128>(first) + static_cast<__int128>(r) * step;
    if (clamp) p = std::clamp<__int128>(p, -*clamp, *clamp);
    return static_cast<int64_t>(p);
  }
  // Positions 0, 1, 2, ...
  bool Identity() const { return first == 0 && step == 1 && !clamp.has_value(); }
  // The largest position of rows 0..length-1 (At is monotonic in r).
  int64_t MaxPosition(int64_t length) const { return std::max(At(0), At(length - 1)); }
  int64_t MinPosition(int64_t length) const { return std::min(At(0), At(length - 1)); }
};

// INVALID_ARGUMENT naming the field (first_position, position_step, clamp_position) when
// step is 0, clamp < 0, |first|, |step| or clamp is over kMaxTablePosition, or, without a
// clamp, a row of the `length` (1 .. 2^40) rows falls outside +-kMaxTablePosition; with
// allow_negative false (RoPE tables) also when a row's position is negative.
absl::Status ValidateTablePositions(const TablePositions& positions, int64_t length,
                                    bool allow_negative);

}  // namespace posenc
