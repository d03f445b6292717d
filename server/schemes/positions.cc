#include "server/schemes/positions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

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

// Explicit ids, shared by every row (seq of them) or one per token (batch*seq).
absl::Status ResolveIds(absl::Span<const int64_t> ids, PositionGrid& grid) {
  const int64_t batch = grid.batch, seq = grid.seq;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n != seq && n != batch * seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions.ids has ", n, " entries; need seq (", seq, ") or batch*seq (", batch * seq,
        ")"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (auto s = CheckPosition("positions.ids", i, ids[i]); !s.ok()) return s;
  }
  grid.shared = (n == seq);
  const int64_t groups = grid.shared ? 1 : batch;
  // Consecutive ids in every row: use the contiguous fast path.
  bool consecutive = true;
  for (int64_t g = 0; g < groups && consecutive; ++g) {
    for (int64_t t = 1; t < seq; ++t) {
      if (ids[g * seq + t] != ids[g * seq] + t) {
        consecutive = false;
        break;
      }
    }
  }
  grid.contiguous = consecutive && seq > 0;
  if (grid.contiguous) {
    for (int64_t g = 0; g < groups; ++g) grid.starts.push_back(ids[g * seq]);
  } else {
    grid.ids.assign(ids.begin(), ids.end());
  }
  if (seq > 0) grid.max_position = *std::max_element(ids.begin(), ids.end());
  return absl::OkStatus();
}

// Offsets: row b runs offsets[b], offsets[b]+1, ... (one offset: every row alike).
absl::Status ResolveOffsets(absl::Span<const int64_t> offsets, PositionGrid& grid) {
  const int64_t batch = grid.batch, seq = grid.seq;
  const int64_t n = static_cast<int64_t>(offsets.size());
  if (n != 1 && n != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions.offsets has ", n, " entries; need 1 or batch (", batch, ")"));
  }
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (auto s = CheckPosition("positions.offsets", i, offsets[i]); !s.ok()) return s;
    if (seq > 0 && offsets[i] + seq - 1 > kMaxPosition) {
      return absl::InvalidArgumentError(absl::StrCat("positions.offsets[", i, "] is ",
                                                     offsets[i], "; with seq ", seq,
                                                     " the last position passes 2^40"));
    }
  }
  grid.shared = (n == 1) || std::all_of(offsets.begin(), offsets.end(),
                                        [&](int64_t o) { return o == offsets[0]; });
  grid.contiguous = true;
  if (grid.shared) {
    grid.starts = {offsets[0]};
  } else {
    grid.starts.assign(offsets.begin(), offsets.end());
  }
  if (seq > 0) {
    grid.max_position = *std::max_element(grid.starts.begin(), grid.starts.end()) + seq - 1;
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
    RETURN_IF_ERROR(ResolveIds(spec.ids, grid));
    return grid;
  }
  if (!spec.offsets.empty()) {
    RETURN_IF_ERROR(ResolveOffsets(spec.offsets, grid));
    return grid;
  }
  grid.shared = true;
  grid.contiguous = true;
  grid.starts = {0};
  grid.max_position = seq - 1;
  return grid;
}

}  // namespace posenc
