#include "server/schemes/rope_scheme.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"
#include "server/kernels/rope_kernel.h"
#include "server/kernels/threads.h"
#include "server/schemes/dense_table.h"

namespace posenc {
namespace {

using Layout = RopeSpec::Layout;

// Where each axis sits in the shape.
struct AxisIndex {
  int batch;  // -1: THD has no batch axis
  int seq;
  int heads;
  int head_dim;
};

AxisIndex AxesOf(Layout layout) {
  switch (layout) {
    case Layout::kBshd: return {0, 1, 2, 3};
    case Layout::kBhsd: return {0, 2, 1, 3};
    case Layout::kThd: return {-1, 0, 1, 2};
  }
  return {0, 1, 2, 3};
}

absl::string_view LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kBshd: return "BSHD [batch, seq, heads, head_dim]";
    case Layout::kBhsd: return "BHSD [batch, heads, seq, head_dim]";
    case Layout::kThd: return "THD [tokens, heads, head_dim]";
  }
  return "?";
}

struct Dims {
  int64_t batch = 1;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

absl::StatusOr<Dims> ReadDims(const TensorView& t, Layout layout, absl::string_view name) {
  if (!IsFloat(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".dtype is ",
                                                   std::string(DTypeName(t.dtype)),
                                                   "; rope needs FLOAT32, FLOAT16 or BFLOAT16"));
  }
  const size_t rank = layout == Layout::kThd ? 3 : 4;
  if (t.shape.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape is ", ShapeString(t.shape),
                                                   "; layout ", LayoutName(layout), " needs rank ",
                                                   rank));
  }
  ASSIGN_OR_RETURN(const int64_t elements, CheckedNumElements(t.shape, name));
  if (elements > 0 && t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".data is missing"));
  }
  const AxisIndex ax = AxesOf(layout);
  Dims d;
  d.batch = ax.batch < 0 ? 1 : t.shape[ax.batch];
  d.seq = t.shape[ax.seq];
  d.heads = t.shape[ax.heads];
  d.head_dim = t.shape[ax.head_dim];
  return d;
}

absl::Status KeyMismatch(int axis, absl::string_view what, int64_t key_value, int64_t query_value,
                         absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat("key.shape[", axis, "] (", what, ") is ",
                                                 key_value, "; it must ", rule, " input.shape[",
                                                 axis, "] (", query_value, ")"));
}

absl::Status CheckKey(const Dims& q, const Dims& k, Layout layout) {
  const AxisIndex ax = AxesOf(layout);
  if (ax.batch >= 0 && k.batch != q.batch) {
    return KeyMismatch(ax.batch, "batch", k.batch, q.batch, "equal");
  }
  if (k.seq != q.seq) {
    return KeyMismatch(ax.seq, layout == Layout::kThd ? "tokens" : "seq", k.seq, q.seq, "equal");
  }
  if (k.head_dim != q.head_dim) {
    return KeyMismatch(ax.head_dim, "head_dim", k.head_dim, q.head_dim, "equal");
  }
  // GQA/MQA: each key head serves q_heads / k_heads query heads.
  if (k.heads == 0 ? q.heads != 0 : q.heads % k.heads != 0) {
    return KeyMismatch(ax.heads, "heads", k.heads, q.heads, "divide");
  }
  return absl::OkStatus();
}

// The frequencies and every cos/sin row cost rotary_dim: bounded even when the input is
// empty ([0, 1, 1, 2^28] has no bytes to bound its head_dim).
absl::StatusOr<int> CheckRotaryWidth(int rotary_dim, absl::string_view what) {
  if (rotary_dim > kMaxRotaryDim) {
    return absl::ResourceExhaustedError(absl::StrCat("the rotary dimension (", what, ") is ",
                                                     rotary_dim, "; at most ", kMaxRotaryDim,
                                                     " is served"));
  }
  return rotary_dim;
}

absl::StatusOr<int> ResolveRotaryDim(const RopeSpec& spec, const Dims& q, Layout layout) {
  const int head_dim_axis = AxesOf(layout).head_dim;
  if (!spec.rotary_dim.has_value()) {
    if (q.head_dim <= 0 || q.head_dim % 2 != 0 || q.head_dim > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input.shape[", head_dim_axis, "] (head_dim) is ", q.head_dim,
                       "; rope needs an even head_dim > 0, or an even rope.rotary_dim"));
    }
    return CheckRotaryWidth(static_cast<int>(q.head_dim), "head_dim");
  }
  const int rotary_dim = *spec.rotary_dim;
  if (rotary_dim > q.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("rope.rotary_dim is ", rotary_dim,
                                                   "; it must be <= head_dim (input.shape[",
                                                   head_dim_axis, "] = ", q.head_dim, ")"));
  }
  return CheckRotaryWidth(rotary_dim, "rope.rotary_dim");
}

absl::StatusOr<PositionGrid> ResolveRopePositions(const PositionsSpec& positions, const Dims& q,
                                                  Layout layout) {
  if (!positions.values.empty()) {
    return absl::InvalidArgumentError(
        "positions.values is for the continuous scheme; rope takes positions.ids or "
        "positions.offsets");
  }
  if (layout == Layout::kThd) {
    if (!positions.ids.empty() && static_cast<int64_t>(positions.ids.size()) != q.seq) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions.ids has ", positions.ids.size(),
                       " entries; layout THD needs one per token (input.shape[0] = ", q.seq, ")"));
    }
    if (positions.ids.empty() && positions.offsets.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions.offsets has ", positions.offsets.size(),
                       " entries; layout THD takes one start position, or positions.ids "
                       "per token"));
    }
    return ResolvePositions(positions, /*batch=*/1, /*seq=*/q.seq);
  }
  return ResolvePositions(positions, q.batch, q.seq);
}

// Per-axis positions (multi-axis RoPE): THD is one row of `tokens` positions.
absl::StatusOr<AxisPositionGrid> ResolveRopeAxisPositions(const RopeSpec& spec,
                                                          const PositionsSpec& positions,
                                                          const Dims& q, Layout layout) {
  if (!positions.values.empty()) {
    return absl::InvalidArgumentError(
        "positions.values is for the continuous scheme; rope takes positions.axis_ids");
  }
  if (spec.mrope_section.empty() && spec.axial_axes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(positions.axis_ids.empty() ? "positions.mrope_segments" : "positions.axis_ids",
                     " is set; it needs rope.mrope_section or rope.axial_axes"));
  }
  return ResolveAxisPositions(positions, spec.num_axes(), layout == Layout::kThd ? 1 : q.batch,
                              q.seq);
}

RopeGeometry GeometryOf(const Dims& d, Layout layout) {
  RopeGeometry g;
  g.batch = d.batch;
  g.seq = d.seq;
  g.heads = d.heads;
  g.head_dim = d.head_dim;
  switch (layout) {
    case Layout::kBshd:
      g.head_stride = d.head_dim;
      g.seq_stride = d.heads * d.head_dim;
      g.batch_stride = d.seq * g.seq_stride;
      break;
    case Layout::kBhsd:
      g.seq_stride = d.head_dim;
      g.head_stride = d.seq * d.head_dim;
      g.batch_stride = d.heads * g.head_stride;
      break;
    case Layout::kThd:
      g.head_stride = d.head_dim;
      g.seq_stride = d.heads * d.head_dim;
      g.batch_stride = 0;
      break;
  }
  return g;
}

// Which positions each token has: one for every axis (`plain`), or one per axis (`axes`).
struct TokenPositions {
  const PositionGrid* plain = nullptr;
  const AxisPositionGrid* axes = nullptr;

  int64_t groups() const { return axes != nullptr ? axes->groups() : plain->groups(); }
  bool shared() const { return axes != nullptr ? axes->shared : plain->shared; }
  int64_t max_position() const {
    return axes != nullptr ? axes->max_position : plain->max_position;
  }
  // Token (g, s)'s position on each axis into `out` (num_axes entries); true when they
  // are all the same (then out[0] serves every slot).
  bool Get(int64_t g, int64_t s, int64_t* out) const {
    if (axes == nullptr) {
      out[0] = plain->At(g, s);
      return true;
    }
    bool same = true;
    for (int a = 0; a < axes->num_axes; ++a) {
      out[a] = axes->At(a, g, s);
      same = same && out[a] == out[0];
    }
    return same;
  }
};

// One cos/sin row per token for the queries and one for the keys (the same rows unless
// xPos), and the storage the rows point into.
struct TokenRows {
  std::vector<const float*> query;  // [batch * seq]
  std::vector<const float*> key;    // [batch * seq]; empty: the query rows
  std::shared_ptr<const Table> dense;
  std::vector<float> built;
};

absl::string_view RowsField(const RopeFrequencies& freqs) {
  return freqs.xpos ? "rope.xpos_scale_base (with these positions)" : "rope.scaling";
}

// Points every batch row's tokens at the rows of their group.
void SpreadGroups(const Dims& q, bool shared, std::vector<const float*>& rows) {
  if (!shared) return;
  for (int64_t b = 1; b < q.batch; ++b) {  // batch
    std::copy_n(rows.begin(), q.seq, rows.begin() + b * q.seq);
  }
}

// The cached prefix table of positions 0..dense_rows-1 (with xPos each table row holds the
// query row then the key row).
absl::StatusOr<std::shared_ptr<const Table>> DenseRopeTable(const RopeFrequencies& freqs,
                                                            int rotary_dim, int64_t dense_rows,
                                                            const std::string& table_key,
                                                            TableCache& cache) {
  const bool xpos = freqs.xpos.has_value();
  const int64_t width = xpos ? 2 * rotary_dim : rotary_dim;
  return cache.GetOrCompute(table_key, [&]() -> absl::StatusOr<Table> {
    Table t;
    t.rows = dense_rows;
    t.cols = width;
    t.data.resize(static_cast<size_t>(dense_rows) * width);
    if (xpos) {
      FillRopeQueryKeyRowRange(freqs, 0, dense_rows, t.data.data());
    } else {
      FillRopeRowRange(freqs, 0, dense_rows, t.data.data());
    }
    RETURN_IF_ERROR(CheckRowsFinite(t.data, RowsField(freqs)));
    return t;
  });
}

// Assembles the row of a token whose axes differ: slot f (cos at f, sin at half + f; the
// key's at rotary_dim + ...) from the table row of its axis. Slots come in runs of one axis
// (Qwen2-VL's sections: three runs), copied run by run; interleaved axes (Qwen3-VL) make
// runs of one slot, where a slot-by-slot pick is cheaper.
class MixedRowAssembler {
 public:
  MixedRowAssembler(const RopeFrequencies& freqs, int rotary_dim)
      : slot_axis_(freqs.slot_axis.data()), half_(rotary_dim / 2),
        width_(freqs.xpos.has_value() ? 2 * rotary_dim : rotary_dim) {
    for (int64_t f = 0; f < half_ && !freqs.slot_axis.empty(); ++f) {
      const int axis = freqs.slot_axis[f];
      if (runs_.empty() || runs_.back().axis != axis) runs_.push_back({f, 0, axis});
      ++runs_.back().count;
    }
    few_runs_ = runs_.size() <= 2 * static_cast<size_t>(kMaxRopeAxes);
  }

  void Assemble(const float* const* axis_rows, float* out) const {
    for (int64_t part = 0; part < width_; part += half_) {
      if (few_runs_) {
        for (const Run& run : runs_) {
          const int64_t at = part + run.first;
          std::copy_n(axis_rows[run.axis] + at, run.count, out + at);
        }
      } else {
        for (int64_t f = 0; f < half_; ++f) out[part + f] = axis_rows[slot_axis_[f]][part + f];
      }
    }
  }

 private:
  struct Run {
    int64_t first, count;
    int axis;
  };
  const uint8_t* slot_axis_;
  const int64_t half_, width_;
  std::vector<Run> runs_;
  bool few_runs_ = true;
};

// From the cached prefix table (DenseRopeTable). A token whose axes differ gets its row
// assembled from the table rows of its axis positions; every other token points into the
// table.
absl::Status DenseTokenRows(const RopeFrequencies& freqs, const TokenPositions& positions,
                            const Dims& q, int rotary_dim, int64_t dense_rows,
                            const std::string& table_key, TableCache& cache, TokenRows& out) {
  const bool xpos = freqs.xpos.has_value();
  const int64_t width = xpos ? 2 * rotary_dim : rotary_dim;
  ASSIGN_OR_RETURN(out.dense, DenseRopeTable(freqs, rotary_dim, dense_rows, table_key, cache));
  const Table& table = *out.dense;
  const int64_t tokens = positions.groups() * q.seq;
  // Each assembled token's row in `built` (counted first, so `built` never moves under the
  // pointers), -1 for a token that points into the table.
  std::vector<int64_t> slot;
  int64_t mixed = 0;
  if (positions.axes != nullptr) {
    slot.assign(static_cast<size_t>(tokens), -1);
    int64_t p[kMaxRopeAxes];
    for (int64_t t = 0; t < tokens; ++t) {
      if (!positions.Get(t / q.seq, t % q.seq, p)) slot[t] = mixed++;
    }
  }
  out.built.resize(static_cast<size_t>(mixed * width));
  const MixedRowAssembler assembler(freqs, rotary_dim);
  // The assembly writes a row per mixed token (for a large M-RoPE call, several MiB): split
  // across the kernel threads like the rotation that reads it.
  const KernelThreadLease lease(WorkBytes(mixed * width));
  ParallelFor(lease.threads(), tokens, [&](int64_t first, int64_t last) {
    int64_t p[kMaxRopeAxes];
    for (int64_t t = first; t < last; ++t) {  // group * seq + seq index
      positions.Get(t / q.seq, t % q.seq, p);
      const float* row;
      if (slot.empty() || slot[t] < 0) {
        row = table.Row(p[0]);
      } else {
        const float* axis_rows[kMaxRopeAxes];
        for (int a = 0; a < positions.axes->num_axes; ++a) axis_rows[a] = table.Row(p[a]);
        float* built = out.built.data() + slot[t] * width;
        assembler.Assemble(axis_rows, built);
        row = built;
      }
      out.query[t] = row;
      if (xpos) out.key[t] = row + rotary_dim;
    }
  });
  SpreadGroups(q, positions.shared(), out.query);
  if (xpos) SpreadGroups(q, positions.shared(), out.key);
  return absl::OkStatus();
}

// Computed for just the positions present (one group of seq rows, or one per batch row).
absl::Status SparseTokenRows(const RopeFrequencies& freqs, const TokenPositions& positions,
                             const Dims& q, int rotary_dim, TokenRows& out) {
  const bool xpos = freqs.xpos.has_value();
  const int64_t width = xpos ? 2 * rotary_dim : rotary_dim;
  const int64_t groups = positions.groups();
  out.built.resize(static_cast<size_t>(groups * q.seq * width));
  int64_t p[kMaxRopeAxes];
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t s = 0; s < q.seq; ++s) {  // seq
      const size_t t = static_cast<size_t>(g * q.seq + s);
      float* row = out.built.data() + t * width;
      const bool same = positions.Get(g, s, p);
      const size_t axes = same ? 1 : static_cast<size_t>(positions.axes->num_axes);
      FillRopeTokenRow(freqs, absl::MakeConstSpan(p, axes), row, xpos ? row + rotary_dim : nullptr);
      out.query[t] = row;
      if (xpos) out.key[t] = row + rotary_dim;
    }
  }
  RETURN_IF_ERROR(CheckRowsFinite(out.built, RowsField(freqs)));
  SpreadGroups(q, positions.shared(), out.query);
  if (xpos) SpreadGroups(q, positions.shared(), out.key);
  return absl::OkStatus();
}

// From a cached prefix table when the positions are modest (kRopeDensePolicy), else
// computed for the positions present.
absl::Status RopeTokenRows(RopeFrequencyMemo& memo, const RopeFrequencies& freqs,
                           const TokenPositions& positions, const Dims& q, int rotary_dim,
                           TableCache& cache, TokenRows& out) {
  const int64_t tokens = q.batch * q.seq;
  out.query.resize(static_cast<size_t>(tokens));
  if (freqs.xpos) out.key.resize(static_cast<size_t>(tokens));
  const int64_t row_floats = freqs.xpos ? 2 * rotary_dim : rotary_dim;
  const std::optional<int64_t> dense_rows =
      DenseTableRows(kRopeDensePolicy, positions.max_position(), tokens,
                     row_floats * int64_t{sizeof(float)}, cache.budget_bytes());
  if (dense_rows) {
    return DenseTokenRows(freqs, positions, q, rotary_dim, *dense_rows,
                          memo.PrefixTableKey(*dense_rows), cache, out);
  }
  return SparseTokenRows(freqs, positions, q, rotary_dim, out);
}

}  // namespace

absl::Status ApplyRope(const RopeSpec& spec, TensorView query, TensorView* key,
                       const PositionsSpec& positions, TableCache& cache) {
  // Validate everything before the first write.
  const Layout layout = spec.layout;
  ASSIGN_OR_RETURN(const Dims q, ReadDims(query, layout, "input"));
  Dims k;
  if (key != nullptr) {
    ASSIGN_OR_RETURN(k, ReadDims(*key, layout, "key"));
    RETURN_IF_ERROR(CheckKey(q, k, layout));
  }
  ASSIGN_OR_RETURN(const int rotary_dim, ResolveRotaryDim(spec, q, layout));
  // Validated before the positions, whose per-axis layout needs the axis count.
  RETURN_IF_ERROR(ValidateRopeSpec(spec, rotary_dim));
  TokenPositions token_positions;
  PositionGrid grid;
  AxisPositionGrid axis_grid;
  if (positions.has_axis_positions()) {
    ASSIGN_OR_RETURN(axis_grid, ResolveRopeAxisPositions(spec, positions, q, layout));
    token_positions.axes = &axis_grid;
  } else {
    ASSIGN_OR_RETURN(grid, ResolveRopePositions(positions, q, layout));
    token_positions.plain = &grid;
  }
  // This thread's last frequencies: a decode loop sends the same spec every step.
  thread_local RopeFrequencyMemo memo;
  ASSIGN_OR_RETURN(const RopeFrequencies* freqs,
                   memo.Get(spec, rotary_dim, token_positions.max_position() + 1));
  if (q.batch * q.seq == 0 || (q.heads == 0 && (key == nullptr || k.heads == 0))) {
    return absl::OkStatus();
  }
  TokenRows token_rows;
  RETURN_IF_ERROR(RopeTokenRows(memo, *freqs, token_positions, q, rotary_dim, cache, token_rows));
  const RopePairing pairing =
      spec.style == RopeSpec::Style::kGptj ? RopePairing::kInterleaved : RopePairing::kRotateHalf;
  RopeRotateInPlace(query, GeometryOf(q, layout), pairing, rotary_dim, token_rows.query);
  if (key != nullptr) {
    RopeRotateInPlace(*key, GeometryOf(k, layout), pairing, rotary_dim,
                      token_rows.key.empty() ? token_rows.query : token_rows.key);
  }
  return absl::OkStatus();
}

absl::StatusOr<Table> RopeTableRows(const RopeSpec& spec, int rotary_dim, int64_t first, int64_t n,
                                    int64_t table_length, const TablePositions& positions) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim is ", rotary_dim, "; a rope table needs an even dim > 0"));
  }
  if (table_length < 1 || table_length - 1 > kMaxPosition) {
    return absl::InvalidArgumentError(
        absl::StrCat("length is ", table_length, "; it must be in [1, 2^40 + 1]"));
  }
  if (first < 0 || n < 0 || first > table_length - n) {
    return absl::InvalidArgumentError(absl::StrCat("rows ", first, " .. ", first, " + ", n,
                                                   " do not fit in length ", table_length));
  }
  if (n > kMaxElements / rotary_dim) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a chunk of ", n, " rows of dim ", rotary_dim, " is too large"));
  }
  const int64_t seq_len =
      positions.Identity() ? table_length : positions.MaxPosition(table_length) + 1;
  ASSIGN_OR_RETURN(const RopeFrequencies freqs, ComputeRopeFrequencies(spec, rotary_dim, seq_len));
  if (freqs.xpos) {
    return absl::InvalidArgumentError(
        "rope.xpos_scale_base is set; a rope table has one row per position, and xPos "
        "rows differ for queries and keys");
  }
  Table t;
  t.rows = n;
  t.cols = rotary_dim;
  t.data.resize(static_cast<size_t>(n) * rotary_dim);
  if (positions.Identity()) {
    FillRopeRowRange(freqs, first, n, t.data.data());
  } else {
    for (int64_t r = 0; r < n; ++r) {
      FillRopeRowRange(freqs, positions.At(first + r), 1,
                       t.data.data() + static_cast<size_t>(r) * rotary_dim);
    }
  }
  RETURN_IF_ERROR(CheckRowsFinite(t.data, "rope.scaling"));
  return t;
}

}  // namespace posenc
