#include "server/schemes/positions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace posenc {
namespace {

absl::Status CheckPosition(absl::string_view field, size_t index, int64_t p) {
  if (p < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", index, "] is ", p, "; positions must be >= 0"));
  }
  if (p > kMaxPosition) {
    return absl::InvalidArgumentError(absl::StrCat(field, "[", index, "] is ", p,
                                                   "; positions must be <= 2^40"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PositionGrid> ResolvePositions(const PositionsSpec& spec, int64_t batch,
                                              int64_t seq) {
  PositionGrid grid;
  grid.batch = batch;
  grid.seq = seq;
  if (!spec.ids.empty()) {
    const int64_t n = static_cast<int64_t>(spec.ids.size());
    if (n != seq && n != batch * seq) {
      return absl::InvalidArgumentError(absl::StrCat(
          "positions.ids has ", n, " entries; need seq (", seq, ") or batch*seq (",
          batch * seq, ")"));
    }
    for (size_t i = 0; i < spec.ids.size(); ++i) {
      if (auto s = CheckPosition("positions.ids", i, spec.ids[i]); !s.ok()) return s;
    }
    grid.shared = (n == seq);
    const int64_t groups = grid.shared ? 1 : batch;
    // Consecutive ids in every row: use the contiguous fast path.
    bool consecutive = true;
    for (int64_t g = 0; g < groups && consecutive; ++g) {
      for (int64_t t = 1; t < seq; ++t) {
        if (spec.ids[g * seq + t] != spec.ids[g * seq] + t) {
          consecutive = false;
          break;
        }
      }
    }
    if (consecutive && seq > 0) {
      grid.contiguous = true;
      for (int64_t g = 0; g < groups; ++g) grid.starts.push_back(spec.ids[g * seq]);
    } else {
      grid.contiguous = false;
      grid.ids.assign(spec.ids.begin(), spec.ids.end());
    }
    if (seq > 0) grid.max_position = *std::max_element(spec.ids.begin(), spec.ids.end());
    return grid;
  }
  if (!spec.offsets.empty()) {
    const int64_t n = static_cast<int64_t>(spec.offsets.size());
    if (n != 1 && n != batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "positions.offsets has ", n, " entries; need 1 or batch (", batch, ")"));
    }
    for (size_t i = 0; i < spec.offsets.size(); ++i) {
      if (auto s = CheckPosition("positions.offsets", i, spec.offsets[i]); !s.ok()) return s;
      if (seq > 0 && spec.offsets[i] + seq - 1 > kMaxPosition) {
        return absl::InvalidArgumentError(absl::StrCat(
            "positions.offsets[", i, "] is ", spec.offsets[i], "; with seq ", seq,
            " the last position passes 2^40"));
      }
    }
    grid.shared = (n == 1) || std::all_of(spec.offsets.begin(), spec.offsets.end(),
                                          [&](int64_t o) { return o == spec.offsets[0]; });
    grid.contiguous = true;
    if (grid.shared) {
      grid.starts = {spec.offsets[0]};
    } else {
      grid.starts.assign(spec.offsets.begin(), spec.offsets.end());
    }
    if (seq > 0) {
      grid.max_position = *std::max_element(grid.starts.begin(), grid.starts.end()) + seq - 1;
    }
    return grid;
  }
  grid.shared = true;
  grid.contiguous = true;
  grid.starts = {0};
  grid.max_position = seq - 1;
  return grid;
}

}  // namespace posenc
