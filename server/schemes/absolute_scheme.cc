#include "server/schemes/absolute_scheme.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"
#include "server/kernels/add_kernel.h"
#include "server/kernels/convert_kernel.h"
#include "server/schemes/dense_table.h"

namespace posenc {
namespace {

// The embeddings seen as [batch, seq, d], whatever rank 2 or 3 they came as.
struct Embeddings {
  TensorView x3;  // [batch, seq, d]
  int64_t batch, seq, dim;
};

absl::StatusOr<Embeddings> CheckEmbeddings(const TensorView& input, const SchemeLimits& limits) {
  if (!IsFloat(input.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.dtype is ", DTypeName(input.dtype),
                     "; absolute encodings need FLOAT32, FLOAT16 or BFLOAT16"));
  }
  if (input.shape.size() != 2 && input.shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.shape is ", ShapeString(input.shape),
                     "; absolute encodings need [batch, seq, d_model] or [seq, d_model]"));
  }
  Embeddings e;
  e.x3 = input;
  if (input.shape.size() == 2) e.x3.shape = {1, input.shape[0], input.shape[1]};
  e.batch = e.x3.shape[0];
  e.seq = e.x3.shape[1];
  e.dim = e.x3.shape[2];
  if (e.dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.shape is ", ShapeString(input.shape), "; d_model must be >= 1"));
  }
  // A row of d_model always fits the limit when the input has data; an empty input
  // ([0, 1, 2^40]) could otherwise make the encoders allocate d_model-wide rows.
  if (static_cast<uint64_t>(e.dim) > limits.max_output_bytes / DTypeSize(input.dtype)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("input.shape is ", ShapeString(input.shape), "; one row of d_model ", e.dim,
                     " is over --max_message_bytes (", limits.max_output_bytes, " bytes)"));
  }
  return e;
}

// Encoding rows for each position group: groups[g] points at [seq, dim] float32 rows,
// either inside a cached table (no copy) or inside `scratch`.
struct EncodingRows {
  int64_t dim = 0;
  absl::InlinedVector<const float*, 2> groups;  // one group is the common case
  std::shared_ptr<const Table> table;           // keeps table slices alive
  std::vector<float> scratch;
  // The same rows in the layout the add reads (AddRowLayoutFor), one pointer per group;
  // empty where the add reads the rows as given.
  const AddRowLayout* layout = nullptr;
  absl::InlinedVector<const float*, 2> laid_out;
  std::shared_ptr<const Table> laid_out_table;  // keeps them alive

  static EncodingRows None(int64_t dim) {  // for an empty input
    EncodingRows rows;
    rows.dim = dim;
    return rows;
  }
};

// Allocates scratch rows for every (group, token) after checking the size: float32 rows
// may take up to 4x the output limit (a float16 output of the same shape is half).
absl::Status AllocateScratch(EncodingRows& rows, int64_t groups, int64_t seq,
                             const SchemeLimits& limits) {
  ASSIGN_OR_RETURN(const int64_t bytes,
                   SizeWithin({groups, seq, rows.dim, int64_t{sizeof(float)}},
                              static_cast<int64_t>(4 * limits.max_output_bytes),
                              "the encoding rows for this request", "4 x --max_message_bytes"));
  rows.scratch.assign(static_cast<size_t>(bytes) / sizeof(float), 0.0f);
  rows.groups.resize(groups);
  for (int64_t g = 0; g < groups; ++g) rows.groups[g] = rows.scratch.data() + g * seq * rows.dim;
  return absl::OkStatus();
}

// Rows of a table [R, dim] for the grid's positions; positions must be < R.
absl::Status RowsFromTable(std::shared_ptr<const Table> table, const PositionGrid& grid,
                           const SchemeLimits& limits, EncodingRows& rows) {
  rows.dim = table->cols;
  if (grid.contiguous) {  // slices of the table itself
    for (int64_t start : grid.starts) rows.groups.push_back(table->Row(start));
  } else {
    RETURN_IF_ERROR(AllocateScratch(rows, grid.groups(), grid.seq, limits));
    for (int64_t g = 0; g < grid.groups(); ++g) {
      for (int64_t t = 0; t < grid.seq; ++t) {
        std::memcpy(rows.scratch.data() + (g * grid.seq + t) * rows.dim,
                    table->Row(grid.ids[g * grid.seq + t]), rows.dim * sizeof(float));
      }
    }
  }
  rows.table = std::move(table);
  return absl::OkStatus();
}

const char* FusionName(Fusion f) {
  switch (f) {
    case Fusion::kAdd: return "ADD";
    case Fusion::kConcat: return "CONCAT";
    case Fusion::kMultiply: return "MULTIPLY";
  }
  return "?";
}

// Combines rows with the embeddings: in place for ADD and MULTIPLY, into a new buffer for
// CONCAT.
absl::StatusOr<AbsoluteResult> Combine(const Embeddings& e, const TensorView& input,
                                       const EncodingRows& rows, const CombineSpec& combine,
                                       const SchemeLimits& limits) {
  AbsoluteResult result;
  result.shape = input.shape;
  const bool shared = rows.groups.size() == 1;
  const int64_t slab = shared ? e.batch : 1;  // batch rows per kernel call
  const size_t elem = DTypeSize(input.dtype);
  if (combine.fusion != Fusion::kConcat) {
    if (rows.dim != e.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("the encoding has width ", rows.dim, " but input.shape[-1] (d_model) is ",
                       e.dim, "; ", FusionName(combine.fusion), " needs them equal"));
    }
    // The parts follow each other in the input: the first one with a value that is not
    // finite holds the input's first.
    result.first_non_finite = -1;
    for (size_t g = 0; g < rows.groups.size(); ++g) {
      TensorView part{input.dtype,
                      {slab, e.seq, e.dim},
                      static_cast<char*>(input.data) + g * e.seq * e.dim * elem};
      int64_t bad = -1;
      const LaidOutRows laid_out{rows.layout, rows.laid_out.empty() ? nullptr : rows.laid_out[g]};
      if (combine.fusion == Fusion::kMultiply) {
        RETURN_IF_ERROR(MultiplyEncodingInPlace(part, rows.groups[g], combine.input_scale,
                                                combine.pe_scale, KernelImpl::kAuto, laid_out,
                                                &bad));
      } else {
        RETURN_IF_ERROR(AddEncodingInPlace(part, rows.groups[g], combine.input_scale,
                                           combine.pe_scale, KernelImpl::kAuto, laid_out, &bad));
      }
      if (bad >= 0 && *result.first_non_finite < 0) {
        result.first_non_finite = static_cast<int64_t>(g) * e.seq * e.dim + bad;
      }
    }
    return result;
  }
  // e.dim <= 2^40 (a checked input shape) and rows.dim <= kMaxPeDim or a table's width.
  const int64_t out_dim = e.dim + rows.dim;
  ASSIGN_OR_RETURN(const int64_t out_bytes,
                   SizeWithin({e.batch, e.seq, out_dim, static_cast<int64_t>(elem)},
                              static_cast<int64_t>(limits.max_output_bytes), "the CONCAT output",
                              "--max_message_bytes"));
  result.shape.back() = out_dim;
  result.concat.emplace(static_cast<size_t>(out_bytes), '\0');
  for (size_t g = 0; g < rows.groups.size(); ++g) {
    ConstTensorView part{input.dtype,
                         {slab, e.seq, e.dim},
                         static_cast<const char*>(input.data) + g * e.seq * e.dim * elem};
    TensorView out{
        input.dtype, {slab, e.seq, out_dim}, result.concat->data() + g * e.seq * out_dim * elem};
    RETURN_IF_ERROR(
        ConcatEncoding(part, rows.groups[g], rows.dim, combine.input_scale, combine.pe_scale, out));
  }
  return result;
}

absl::StatusOr<int64_t> EncodingWidth(const CombineSpec& combine, int64_t d_model,
                                      absl::string_view field) {
  if (combine.fusion != Fusion::kConcat && combine.pe_dim.has_value() &&
      *combine.pe_dim != d_model) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".pe_dim is ", *combine.pe_dim,
                                                   " but input.shape[-1] (d_model) is ", d_model,
                                                   "; with fusion ", FusionName(combine.fusion),
                                                   " they must be equal (or leave pe_dim unset)"));
  }
  if (combine.fusion != Fusion::kConcat || !combine.pe_dim.has_value()) return d_model;
  if (*combine.pe_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".pe_dim is ", *combine.pe_dim, "; it must be >= 1"));
  }
  if (*combine.pe_dim > kMaxPeDim) {
    return absl::ResourceExhaustedError(
        absl::StrCat(field, ".pe_dim is ", *combine.pe_dim, "; at most ", kMaxPeDim, " is served"));
  }
  return *combine.pe_dim;
}

// A multiplier of embeddings or encodings: finite, and |scale| <= kMaxScale.
// `field` + `member` names the scale in the error; the name is built only on failure (this
// runs on every Encode).
absl::Status CheckScale(absl::string_view field, absl::string_view member, float scale) {
  if (std::isfinite(scale) && scale >= -kMaxScale && scale <= kMaxScale) return absl::OkStatus();
  const std::string name = absl::StrCat(field, member);
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is not finite"));
  }
  return CheckInRange(name, scale, -kMaxScale, kMaxScale);
}

absl::Status CheckScales(const CombineSpec& combine, absl::string_view field) {
  RETURN_IF_ERROR(CheckScale(field, ".input_scale", combine.input_scale));
  return CheckScale(field, ".pe_scale", combine.pe_scale);
}

// Where the add reads its rows faster in a layout of its own (for `dtype`), a copy of
// `table` in that layout is cached beside it under `key`, and `rows` reads from it: group g
// from the table row starts[g], as rows.groups does.
absl::Status AddLaidOutRows(const Table& table, const std::string& key, DType dtype,
                            absl::Span<const int64_t> starts, TableCache& cache,
                            EncodingRows& rows) {
  const AddRowLayout* layout = AddRowLayoutFor(dtype);
  if (layout == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      rows.laid_out_table,
      cache.GetOrCompute(absl::StrCat(key, "/", layout->name()), [&]() -> absl::StatusOr<Table> {
        Table t{table.rows, table.cols, std::vector<float>(table.data.size())};
        layout->LayOut(table.data.data(), t.rows, t.cols, t.data.data());
        return t;
      }));
  rows.layout = layout;
  for (int64_t start : starts) rows.laid_out.push_back(rows.laid_out_table->Row(start));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AbsoluteResult> ApplySinusoidal(SinusoidalSpec spec, const CombineSpec& combine,
                                               TensorView input, const PositionsSpec& positions,
                                               TableCache& cache, const SchemeLimits& limits) {
  ASSIGN_OR_RETURN(Embeddings e, CheckEmbeddings(input, limits));
  RETURN_IF_ERROR(CheckScales(combine, "sinusoidal"));
  ASSIGN_OR_RETURN(spec.dim, EncodingWidth(combine, e.dim, "sinusoidal"));
  RETURN_IF_ERROR(ValidateSinusoidal(spec, "sinusoidal"));
  if (spec.dim > static_cast<int64_t>(limits.max_output_bytes / sizeof(float))) {
    RETURN_IF_ERROR(SizeWithin({spec.dim, int64_t{sizeof(float)}},
                               static_cast<int64_t>(limits.max_output_bytes),
                               absl::StrCat("one sinusoidal row of width ", spec.dim),
                               "--max_message_bytes")
                        .status());
  }
  ASSIGN_OR_RETURN(PositionGrid grid, ResolvePositions(positions, e.batch, e.seq));
  if (e.seq == 0 || e.batch == 0) {
    return Combine(e, input, EncodingRows::None(spec.dim), combine, limits);
  }

  const std::optional<int64_t> rows_needed =
      DenseTableRows(kSinusoidalDensePolicy, grid.max_position, grid.groups() * grid.seq,
                     spec.dim * int64_t{sizeof(float)}, cache.budget_bytes());
  EncodingRows rows;
  if (rows_needed) {
    const std::string key = SinusoidalTableKey(spec, *rows_needed);
    ASSIGN_OR_RETURN(std::shared_ptr<const Table> table,
                     cache.GetOrCompute(key, [&]() -> absl::StatusOr<Table> {
                       Table t = ComputeSinusoidalTable(spec, 0, *rows_needed);
                       RETURN_IF_ERROR(CheckRowsFinite(t.data, "sinusoidal"));
                       return t;
                     }));
    if (combine.fusion != Fusion::kConcat && grid.contiguous) {
      RETURN_IF_ERROR(AddLaidOutRows(*table, key, e.x3.dtype, grid.starts, cache, rows));
    }
    RETURN_IF_ERROR(RowsFromTable(std::move(table), grid, limits, rows));
  } else {
    rows.dim = spec.dim;
    RETURN_IF_ERROR(AllocateScratch(rows, grid.groups(), grid.seq, limits));
    SinusoidalEncoder encoder(spec);
    for (int64_t g = 0; g < grid.groups(); ++g) {
      for (int64_t t = 0; t < grid.seq; ++t) {
        encoder.Row(static_cast<double>(grid.At(g, t)),
                    rows.scratch.data() + (g * grid.seq + t) * spec.dim);
      }
    }
    RETURN_IF_ERROR(CheckRowsFinite(rows.scratch, "sinusoidal"));
  }
  return Combine(e, input, rows, combine, limits);
}

absl::StatusOr<AbsoluteResult> ApplyLearned(const LearnedSpec& learned, const CombineSpec& combine,
                                            TensorView input, const PositionsSpec& positions,
                                            const SchemeLimits& limits) {
  ASSIGN_OR_RETURN(Embeddings e, CheckEmbeddings(input, limits));
  RETURN_IF_ERROR(CheckScales(combine, "learned"));
  const Table& table = *learned.table;
  const int64_t max_positions = table.rows;
  if (combine.fusion != Fusion::kConcat && table.cols != e.dim) {
    return absl::InvalidArgumentError(absl::StrCat("learned.table '", learned.name, "' has width ",
                                                   table.cols, " but input.shape[-1] (d_model) is ",
                                                   e.dim, "; ", FusionName(combine.fusion),
                                                   " needs them equal"));
  }
  ASSIGN_OR_RETURN(PositionGrid grid, ResolvePositions(positions, e.batch, e.seq));
  if (e.seq == 0 || e.batch == 0) {
    return Combine(e, input, EncodingRows::None(table.cols), combine, limits);
  }
  EncodingRows rows;
  if (grid.max_position < max_positions) {
    RETURN_IF_ERROR(RowsFromTable(learned.table, grid, limits, rows));
    return Combine(e, input, rows, combine, limits);
  }
  if (learned.overflow == Overflow::kError) {
    return absl::OutOfRangeError(absl::StrCat(
        "position ", grid.max_position, " is past learned.table '", learned.name, "' with ",
        max_positions, " rows; set learned.overflow to CLAMP or INTERPOLATE"));
  }
  rows.dim = table.cols;
  RETURN_IF_ERROR(AllocateScratch(rows, grid.groups(), grid.seq, limits));
  // L = largest position + 1 > max_positions: position p reads the point p*(M-1)/(L-1).
  const double stretch = max_positions > 1 ? static_cast<double>(max_positions - 1) /
                                                 static_cast<double>(grid.max_position)
                                           : 0.0;
  for (int64_t g = 0; g < grid.groups(); ++g) {
    for (int64_t t = 0; t < grid.seq; ++t) {
      const int64_t p = grid.At(g, t);
      float* out = rows.scratch.data() + (g * grid.seq + t) * rows.dim;
      if (learned.overflow == Overflow::kClamp) {
        std::memcpy(out, table.Row(std::min(p, max_positions - 1)), rows.dim * sizeof(float));
        continue;
      }
      const double point = static_cast<double>(p) * stretch;
      const int64_t lo = std::min(static_cast<int64_t>(std::floor(point)), max_positions - 1);
      const int64_t hi = std::min(lo + 1, max_positions - 1);
      const double w = point - static_cast<double>(lo);
      const float* a = table.Row(lo);
      const float* b = table.Row(hi);
      for (int64_t c = 0; c < rows.dim; ++c) {
        out[c] = static_cast<float>((1.0 - w) * a[c] + w * b[c]);
      }
    }
  }
  rows.table = learned.table;
  return Combine(e, input, rows, combine, limits);
}

absl::StatusOr<AbsoluteResult> ApplyHierarchical(absl::Span<const HierarchicalLevel> levels,
                                                 TensorView input, const SchemeLimits& limits) {
  ASSIGN_OR_RETURN(Embeddings e, CheckEmbeddings(input, limits));
  if (levels.empty()) {
    return absl::InvalidArgumentError("hierarchical.levels is empty; give at least one level");
  }
  if (static_cast<int64_t>(levels.size()) > kMaxHierarchicalLevels) {
    return absl::ResourceExhaustedError(absl::StrCat("hierarchical.levels has ", levels.size(),
                                                     " levels; at most ", kMaxHierarchicalLevels,
                                                     " are served"));
  }
  bool shared = true;
  std::vector<SinusoidalEncoder> encoders;
  for (size_t l = 0; l < levels.size(); ++l) {
    const std::string field = absl::StrCat("hierarchical.levels[", l, "]");
    const auto n = static_cast<int64_t>(levels[l].ids.size());
    if (n != e.seq && n != e.batch * e.seq) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".ids has ", n, " entries; need seq (",
                                                     e.seq, ") or batch*seq (", e.batch * e.seq,
                                                     ")"));
    }
    if (n != e.seq) shared = false;
    for (size_t i = 0; i < levels[l].ids.size(); ++i) {
      if (levels[l].ids[i] < 0 || levels[l].ids[i] > kMaxPosition) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".ids[", i, "] is ", levels[l].ids[i],
                                                       "; positions must be in [0, 2^40]"));
      }
    }
    RETURN_IF_ERROR(CheckScale(field, ".scale", levels[l].scale));
    SinusoidalSpec spec{levels[l].base, SinusoidalLayout::kInterleaved, Timescale::kPerDim, e.dim};
    RETURN_IF_ERROR(ValidateSinusoidal(spec, field));
    encoders.emplace_back(spec);
  }
  EncodingRows rows;
  rows.dim = e.dim;
  const int64_t groups = shared ? 1 : e.batch;
  RETURN_IF_ERROR(AllocateScratch(rows, groups, e.seq, limits));
  // Levels are summed in float64 and rounded once.
  std::vector<double> sum(e.dim), level_row(e.dim);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < e.seq; ++t) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (size_t l = 0; l < levels.size(); ++l) {
        const int64_t index =
            levels[l].ids.size() == static_cast<size_t>(e.seq) ? t : g * e.seq + t;
        encoders[l].RowF64(static_cast<double>(levels[l].ids[index]), level_row.data());
        for (int64_t c = 0; c < e.dim; ++c) sum[c] += levels[l].scale * level_row[c];
      }
      float* out = rows.scratch.data() + (g * e.seq + t) * e.dim;
      for (int64_t c = 0; c < e.dim; ++c) out[c] = static_cast<float>(sum[c]);
    }
  }
  RETURN_IF_ERROR(CheckRowsFinite(rows.scratch, "hierarchical"));
  return Combine(e, input, rows, CombineSpec{}, limits);
}

absl::StatusOr<AbsoluteResult> ApplyContinuous(const ContinuousSpec& continuous, TensorView input,
                                               const PositionsSpec& positions,
                                               const SchemeLimits& limits) {
  ASSIGN_OR_RETURN(Embeddings e, CheckEmbeddings(input, limits));
  const auto n = static_cast<int64_t>(positions.values.size());
  if (n != e.seq && n != e.batch * e.seq) {
    return absl::InvalidArgumentError(absl::StrCat("positions.values has ", n,
                                                   " entries; continuous needs seq (", e.seq,
                                                   ") or batch*seq (", e.batch * e.seq, ")"));
  }
  if (!std::isfinite(continuous.value_scale)) {
    return absl::InvalidArgumentError("continuous.value_scale is not finite");
  }
  const double max_position = static_cast<double>(kMaxPosition);
  for (size_t i = 0; i < positions.values.size(); ++i) {
    const double v = positions.values[i];
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions.values[", i, "] is ", v, "; positions must be finite and >= 0"));
    }
    const double p = v * continuous.value_scale;
    if (!(std::abs(p) <= max_position)) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions.values[", i, "] * continuous.value_scale is ", v, " * ",
                       continuous.value_scale, " = ", p, "; it must be within +-2^40"));
    }
  }
  SinusoidalSpec spec{continuous.base, continuous.layout, continuous.timescale, e.dim};
  RETURN_IF_ERROR(ValidateSinusoidal(spec, "continuous"));
  SinusoidalEncoder encoder(spec);
  EncodingRows rows;
  rows.dim = e.dim;
  const int64_t groups = n == e.seq ? 1 : e.batch;
  RETURN_IF_ERROR(AllocateScratch(rows, groups, e.seq, limits));
  for (int64_t i = 0; i < groups * e.seq; ++i) {
    encoder.Row(positions.values[i] * continuous.value_scale, rows.scratch.data() + i * e.dim);
  }
  RETURN_IF_ERROR(CheckRowsFinite(rows.scratch, "continuous"));
  return Combine(e, input, rows, CombineSpec{}, limits);
}

absl::StatusOr<AbsoluteResult> ApplySinusoidal2D(Sinusoidal2DSpec spec, const CombineSpec& combine,
                                                 TensorView input, const PositionsSpec& positions,
                                                 TableCache& cache, const SchemeLimits& limits) {
  ASSIGN_OR_RETURN(Embeddings e, CheckEmbeddings(input, limits));
  RETURN_IF_ERROR(CheckScales(combine, "sinusoidal_2d"));
  if (!positions.offsets.empty() || !positions.ids.empty() || !positions.values.empty() ||
      positions.has_axis_positions()) {
    return absl::InvalidArgumentError(
        "positions is set; sinusoidal_2d takes its positions from the grid (grid_height, "
        "grid_width): leave positions empty");
  }
  if (combine.pe_dim.has_value()) {
    return absl::InvalidArgumentError(
        "sinusoidal_2d has no pe_dim; its encoding has the input's width");
  }
  spec.dim = e.dim;
  RETURN_IF_ERROR(ValidateSinusoidal2D(spec, "sinusoidal_2d"));
  const int64_t tokens = Sinusoidal2DRows(spec);
  if (e.seq != tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.shape[-2] (seq) is ", e.seq, "; sinusoidal_2d with grid_height ",
                     spec.grid_height, " x grid_width ", spec.grid_width,
                     spec.cls_token ? " and cls_token" : "", " needs ", tokens, " tokens"));
  }
  // The table has as many rows as the input, the input's width: bounded by the input.
  RETURN_IF_ERROR(SizeWithin({tokens, spec.dim, int64_t{sizeof(float)}},
                             static_cast<int64_t>(4 * limits.max_output_bytes),
                             "the sinusoidal_2d table", "4 x --max_message_bytes")
                      .status());
  const std::string key = Sinusoidal2DTableKey(spec);
  ASSIGN_OR_RETURN(std::shared_ptr<const Table> table,
                   cache.GetOrCompute(key, [&]() -> absl::StatusOr<Table> {
                     Table t = ComputeSinusoidal2DTable(spec);
                     RETURN_IF_ERROR(CheckRowsFinite(t.data, "sinusoidal_2d"));
                     return t;
                   }));
  EncodingRows rows;
  rows.dim = spec.dim;
  if (combine.fusion != Fusion::kConcat) {
    const int64_t first_row = 0;
    RETURN_IF_ERROR(AddLaidOutRows(*table, key, e.x3.dtype, {first_row}, cache, rows));
  }
  rows.groups.push_back(table->Row(0));
  rows.table = std::move(table);
  return Combine(e, input, rows, combine, limits);
}

namespace {

// positions.values for fourier: alone, seq*m or batch*seq*m finite coordinates within 2^40.
absl::Status CheckFourierValues(const PositionsSpec& positions, const Embeddings& e, int64_t m) {
  if (!positions.ids.empty() || !positions.offsets.empty()) {
    return absl::InvalidArgumentError(
        "positions.values is set together with positions.ids or positions.offsets; fourier "
        "takes one of them");
  }
  const auto n = static_cast<int64_t>(positions.values.size());
  // seq * m and batch * seq * m are below 2^63: seq and batch come from a checked shape of
  // at most 2^40 elements' bytes, m <= kMaxFourierAxes.
  if (n != e.seq * m && n != e.batch * e.seq * m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions.values has ", n, " entries; fourier with num_axes ", m, " needs seq*", m, " (",
        e.seq * m, ") or batch*seq*", m, " (", e.batch * e.seq * m, ")"));
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = positions.values[i];
    if (!(std::abs(v) <= kMaxFourierCoordinate)) {
      return absl::InvalidArgumentError(absl::StrCat("positions.values[", i, "] is ", v,
                                                     "; fourier coordinates must be finite, within "
                                                     "+-2^40"));
    }
  }
  return absl::OkStatus();
}

// One row per token from its m coordinates in positions.values (checked).
absl::Status FourierRowsFromValues(const FourierEncoder& encoder, const PositionsSpec& positions,
                                   const Embeddings& e, const SchemeLimits& limits,
                                   EncodingRows& rows) {
  const int64_t m = encoder.num_axes(), width = encoder.dim();
  const auto n = static_cast<int64_t>(positions.values.size());
  const int64_t groups = n == e.seq * m ? 1 : e.batch;
  RETURN_IF_ERROR(AllocateScratch(rows, groups, e.seq, limits));
  for (int64_t i = 0; i < groups * e.seq; ++i) {
    encoder.Row(positions.values.data() + i * m, rows.scratch.data() + i * width);
  }
  return absl::OkStatus();
}

// Rows for integer positions: from a cached table of rows 0..max when it pays, else
// computed per token into scratch.
absl::Status FourierRowsFromGrid(const FourierEncoder& encoder, const PositionGrid& grid,
                                 const CombineSpec& combine, DType dtype, TableCache& cache,
                                 const SchemeLimits& limits, EncodingRows& rows) {
  const int64_t width = encoder.dim();
  const std::optional<int64_t> rows_needed =
      DenseTableRows(kSinusoidalDensePolicy, grid.max_position, grid.groups() * grid.seq,
                     width * int64_t{sizeof(float)}, cache.budget_bytes());
  if (rows_needed) {
    const std::string key = encoder.IntegerRowsKey(*rows_needed);
    ASSIGN_OR_RETURN(std::shared_ptr<const Table> table,
                     cache.GetOrCompute(key, [&]() -> absl::StatusOr<Table> {
                       Table t = encoder.IntegerRows(*rows_needed);
                       RETURN_IF_ERROR(CheckRowsFinite(t.data, "fourier"));
                       return t;
                     }));
    if (combine.fusion != Fusion::kConcat && grid.contiguous) {
      RETURN_IF_ERROR(AddLaidOutRows(*table, key, dtype, grid.starts, cache, rows));
    }
    return RowsFromTable(std::move(table), grid, limits, rows);
  }
  RETURN_IF_ERROR(AllocateScratch(rows, grid.groups(), grid.seq, limits));
  for (int64_t g = 0; g < grid.groups(); ++g) {
    for (int64_t t = 0; t < grid.seq; ++t) {
      const double v = static_cast<double>(grid.At(g, t));
      encoder.Row(&v, rows.scratch.data() + (g * grid.seq + t) * width);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AbsoluteResult> ApplyFourier(const FourierSpec& fourier, const CombineSpec& combine,
                                            TensorView input, const PositionsSpec& positions,
                                            TableCache& cache, const SchemeLimits& limits) {
  ASSIGN_OR_RETURN(Embeddings e, CheckEmbeddings(input, limits));
  RETURN_IF_ERROR(CheckScales(combine, "fourier"));
  if (combine.pe_dim.has_value()) {
    return absl::InvalidArgumentError("fourier has no pe_dim; its encoding is 2F wide");
  }
  if (positions.has_axis_positions()) {
    return absl::InvalidArgumentError(
        "positions.axis_ids or positions.mrope_segments is set; fourier takes the axes of each "
        "token from positions.values");
  }
  ASSIGN_OR_RETURN(const FourierEncoder encoder,
                   FourierEncoder::Create(fourier.frequencies, fourier.num_axes, fourier.field));
  const int64_t width = encoder.dim(), m = encoder.num_axes();
  if (combine.fusion != Fusion::kConcat && width != e.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        fourier.field, " has F = ", encoder.num_features(),
        " frequencies (encoding width 2F = ", width, ") but input.shape[-1] (d_model) is ", e.dim,
        "; ", FusionName(combine.fusion), " needs d_model = 2F (or use CONCAT)"));
  }
  EncodingRows rows;
  rows.dim = width;
  if (!positions.values.empty()) {
    RETURN_IF_ERROR(CheckFourierValues(positions, e, m));
    if (e.seq == 0 || e.batch == 0) {
      return Combine(e, input, EncodingRows::None(width), combine, limits);
    }
    RETURN_IF_ERROR(FourierRowsFromValues(encoder, positions, e, limits, rows));
  } else {
    if (m != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions.values is empty; fourier with num_axes ", m, " needs ", m,
                       " values per token (integer positions serve num_axes 1 only)"));
    }
    ASSIGN_OR_RETURN(PositionGrid grid, ResolvePositions(positions, e.batch, e.seq));
    if (e.seq == 0 || e.batch == 0) {
      return Combine(e, input, EncodingRows::None(width), combine, limits);
    }
    RETURN_IF_ERROR(FourierRowsFromGrid(encoder, grid, combine, e.x3.dtype, cache, limits, rows));
  }
  RETURN_IF_ERROR(CheckRowsFinite(rows.scratch, "fourier"));  // empty with a table
  return Combine(e, input, rows, combine, limits);
}

}  // namespace posenc
