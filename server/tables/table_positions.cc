#include "server/tables/table_positions.h"

#include "absl/strings/str_cat.h"

namespace posenc {

absl::Status ValidateTablePositions(const TablePositions& p, int64_t length, bool allow_negative) {
  if (p.first < -kMaxTablePosition || p.first > kMaxTablePosition) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_position is ", p.first, "; it must be within +-2^40"));
  }
  if (p.step == 0) {
    return absl::InvalidArgumentError("position_step is 0; it must be nonzero");
  }
  if (p.step < -kMaxTablePosition || p.step > kMaxTablePosition) {
    return absl::InvalidArgumentError(
        absl::StrCat("position_step is ", p.step, "; it must be within +-2^40"));
  }
  if (p.clamp && (*p.clamp < 0 || *p.clamp > kMaxTablePosition)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clamp_position is ", *p.clamp, "; it must be in [0, 2^40]"));
  }
  // The last row unclamped, in 128 bits: |first + (length-1)*step| <= 2^40 + 2^80.
  const __int128 last = static_cast<__int128>(p.first) +
                        static_cast<__int128>(length - 1) * static_cast<__int128>(p.step);
  if (!p.clamp && (last < -kMaxTablePosition || last > kMaxTablePosition)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "first_position + (length - 1) * position_step is ", p.first, " + ", length - 1, " * ",
        p.step, ", outside +-2^40; shorten length or set clamp_position"));
  }
  if (!allow_negative) {
    const int64_t lowest = p.MinPosition(length);
    if (lowest < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("first_position ", p.first, " with position_step ", p.step, " and length ",
                       length, " gives position ", lowest,
                       "; rope tables need positions >= 0 (negative positions "
                       "are for sinusoidal tables only)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc
