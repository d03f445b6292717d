#include "server/schemes/positions.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

absl::Status CheckPosition(absl::string_view field, size_t index, int64_t p) {
  if (p < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", index, "] is ", p, "; positions must be >= 0"));
  }
  if (p > kMaxPosition) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", index, "] is ", p, "; positions must be <= 2^40"));
  }
  return absl::OkStatus();
}

// Explicit ids, shared by every row (seq of them) or one per token (batch*seq).
absl::Status ResolveIds(absl::Span<const int64_t> ids, PositionGrid& grid) {
  const int64_t batch = grid.batch, seq = grid.seq;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n != seq && n != batch * seq) {
    return absl::InvalidArgumentError(absl::StrCat("positions.ids has ", n, " entries; need seq (",
                                                   seq, ") or batch*seq (", batch * seq, ")"));
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
    return absl::InvalidArgumentError(
        absl::StrCat("positions.offsets has ", n, " entries; need 1 or batch (", batch, ")"));
  }
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (auto s = CheckPosition("positions.offsets", i, offsets[i]); !s.ok()) return s;
    if (seq > 0 && offsets[i] + seq - 1 > kMaxPosition) {
      return absl::InvalidArgumentError(absl::StrCat("positions.offsets[", i, "] is ", offsets[i],
                                                     "; with seq ", seq,
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

// A segment's kind against what it holds: TEXT is a text run without a temporal scale;
// IMAGE and VIDEO are grids.
absl::Status CheckSegmentKind(const MropeSegmentSpec& s, bool grid, const std::string& field) {
  using Kind = MropeSegmentSpec::Kind;
  if (s.kind == Kind::kText && grid) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".kind is TEXT, which is a text run: set text_length and no grid"));
  }
  if ((s.kind == Kind::kImage || s.kind == Kind::kVideo) && !grid) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".kind is ", s.kind == Kind::kImage ? "IMAGE" : "VIDEO",
                     ", which is a grid: set grid_t, grid_h and grid_w (and no text_length)"));
  }
  if (s.kind == Kind::kText && s.temporal_scale.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".temporal_scale is set on a TEXT segment, which has no frames; leave it unset"));
  }
  return absl::OkStatus();
}

// The tokens a segment covers, or an error naming it. Each count is at most kMaxPosition.
absl::StatusOr<int64_t> SegmentTokens(const MropeSegmentSpec& s, size_t i) {
  const std::string field = absl::StrCat("positions.mrope_segments[", i, "]");
  for (const auto& [name, v] :
       {std::pair{"text_length", s.text_length}, std::pair{"grid_t", s.grid_t},
        std::pair{"grid_h", s.grid_h}, std::pair{"grid_w", s.grid_w}}) {
    if (v < 0 || v > kMaxPosition) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".", name, " is ", v, "; it must be in [0, 2^40]"));
    }
  }
  const bool grid = s.grid_t != 0 || s.grid_h != 0 || s.grid_w != 0;
  if (grid && (s.text_length != 0 || s.grid_t == 0 || s.grid_h == 0 || s.grid_w == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has text_length ", s.text_length, " and grid ", s.grid_t, "x",
                     s.grid_h, "x", s.grid_w,
                     "; a segment is a text run (grid all 0) or a grid (text_length 0, grid_t, "
                     "grid_h, grid_w >= 1)"));
  }
  if (!grid && s.text_length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     " is empty; a segment is a text run (text_length >= 1) or a grid (grid_t, "
                     "grid_h, grid_w >= 1)"));
  }
  const double scale = s.TemporalScale();
  if (!(scale >= 0) || !(scale <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".temporal_scale is ", scale, "; it must be in [0, 1e6]"));
  }
  RETURN_IF_ERROR(CheckSegmentKind(s, grid, field));
  if (!grid) return s.text_length;
  const std::optional<int64_t> n = CheckedProduct({s.grid_t, s.grid_h, s.grid_w});
  if (!n || *n > kMaxPosition) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", s.grid_t, "x", s.grid_h, "x",
                                                   s.grid_w, " tokens; at most 2^40"));
  }
  return *n;
}

// HF get_rope_index: s = largest position so far + 1 (0 at the start); text gets s + i on
// every axis; grid token (t, h, w) gets (s + floor(t * temporal_scale), s + h, s + w).
absl::Status LayOutSegments(const std::vector<MropeSegmentSpec>& segments, int64_t seq,
                            AxisPositionGrid& grid) {
  int64_t total = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    ASSIGN_OR_RETURN(const int64_t n, SegmentTokens(segments[i], i));
    total += n;  // each n <= 2^40, and we stop once past seq
    if (total > seq) break;
  }
  if (total != seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("positions.mrope_segments cover ",
                     total > seq ? absl::StrCat("more than ", seq) : absl::StrCat(total),
                     " tokens; they must cover seq = ", seq));
  }
  grid.pos.resize(static_cast<size_t>(3 * seq));
  int64_t* t_axis = grid.pos.data();
  int64_t* h_axis = t_axis + seq;
  int64_t* w_axis = h_axis + seq;
  int64_t next = 0, token = 0;  // next = largest position so far + 1
  for (const MropeSegmentSpec& s : segments) {
    if (s.grid_t == 0) {
      for (int64_t i = 0; i < s.text_length; ++i, ++token) {
        t_axis[token] = h_axis[token] = w_axis[token] = next + i;
      }
      next += s.text_length;
      continue;
    }
    int64_t largest = next;
    for (int64_t t = 0; t < s.grid_t; ++t) {
      const int64_t tp =
          next + static_cast<int64_t>(std::floor(static_cast<double>(t) * s.TemporalScale()));
      if (tp > kMaxPosition) {
        return absl::InvalidArgumentError(
            "positions.mrope_segments: a grid's temporal position passes 2^40");
      }
      for (int64_t h = 0; h < s.grid_h; ++h) {
        for (int64_t w = 0; w < s.grid_w; ++w, ++token) {
          t_axis[token] = tp;
          h_axis[token] = next + h;
          w_axis[token] = next + w;
        }
      }
      largest = std::max(largest, tp);
    }
    largest = std::max({largest, next + s.grid_h - 1, next + s.grid_w - 1});
    next = largest + 1;
  }
  if (next - 1 > kMaxPosition) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions.mrope_segments lay out positions up to ", next - 1, "; they must be <= 2^40"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// positions.axis_ids, [num_axes][batch or 1][seq], into the grid.
absl::Status AxisIdsIntoGrid(absl::Span<const int64_t> axis_ids, AxisPositionGrid& grid) {
  const int64_t n = static_cast<int64_t>(axis_ids.size());
  const int64_t axes = grid.num_axes, batch = grid.batch, seq = grid.seq;
  if (n != axes * seq && n != axes * batch * seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("positions.axis_ids has ", n, " entries; need num_axes*seq (", axes, "*", seq,
                     ") or num_axes*batch*seq (", axes, "*", batch, "*", seq, ")"));
  }
  for (size_t i = 0; i < axis_ids.size(); ++i) {
    RETURN_IF_ERROR(CheckPosition("positions.axis_ids", i, axis_ids[i]));
  }
  grid.shared = n == axes * seq;
  grid.pos.assign(axis_ids.begin(), axis_ids.end());
  return absl::OkStatus();
}

// positions.offsets (1 or batch) added to every axis; rows that then differ get their own
// copy of shared positions.
absl::Status AddAxisOffsets(absl::Span<const int64_t> offsets, AxisPositionGrid& grid) {
  const int64_t n = static_cast<int64_t>(offsets.size());
  const int64_t axes = grid.num_axes, batch = grid.batch, seq = grid.seq;
  if (n != 1 && n != batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("positions.offsets has ", n, " entries; need 1 or batch (", batch, ")"));
  }
  for (size_t i = 0; i < offsets.size(); ++i) {
    RETURN_IF_ERROR(CheckPosition("positions.offsets", i, offsets[i]));
  }
  const bool one = n == 1 || std::all_of(offsets.begin(), offsets.end(),
                                         [&](int64_t o) { return o == offsets[0]; });
  if (!one && grid.shared) {
    std::vector<int64_t> per_row(static_cast<size_t>(axes * batch * seq));
    for (int64_t a = 0; a < axes; ++a) {
      for (int64_t b = 0; b < batch; ++b) {
        std::copy_n(grid.pos.begin() + a * seq, seq, per_row.begin() + (a * batch + b) * seq);
      }
    }
    grid.pos.swap(per_row);
    grid.shared = false;
  }
  const int64_t groups = grid.groups();
  for (int64_t a = 0; a < axes; ++a) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t offset = offsets[one ? 0 : g];
      int64_t* row = grid.pos.data() + (a * groups + g) * seq;
      for (int64_t t = 0; t < seq; ++t) {
        row[t] += offset;
        if (row[t] > kMaxPosition) {
          return absl::InvalidArgumentError(
              absl::StrCat("positions.offsets[", one ? 0 : g, "] is ", offset,
                           "; with the per-axis positions the position passes 2^40"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AxisPositionGrid> ResolveAxisPositions(const PositionsSpec& spec, int num_axes,
                                                      int64_t batch, int64_t seq) {
  if (!spec.ids.empty()) {
    return absl::InvalidArgumentError(
        "positions.ids is set with positions.axis_ids or positions.mrope_segments; give "
        "per-axis positions, or ids for every axis alike");
  }
  if (!spec.axis_ids.empty() && !spec.mrope_segments.empty()) {
    return absl::InvalidArgumentError(
        "positions.axis_ids and positions.mrope_segments are both set; give one");
  }
  AxisPositionGrid grid;
  grid.num_axes = num_axes;
  grid.batch = batch;
  grid.seq = seq;
  if (!spec.axis_ids.empty()) {
    RETURN_IF_ERROR(AxisIdsIntoGrid(spec.axis_ids, grid));
  } else if (num_axes != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions.mrope_segments need 3 axes (rope.mrope_section of 3 entries); this rope has ",
        num_axes));
  } else {
    RETURN_IF_ERROR(LayOutSegments(spec.mrope_segments, seq, grid));
  }
  if (!spec.offsets.empty()) RETURN_IF_ERROR(AddAxisOffsets(spec.offsets, grid));
  if (!grid.pos.empty()) grid.max_position = *std::max_element(grid.pos.begin(), grid.pos.end());
  return grid;
}

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
