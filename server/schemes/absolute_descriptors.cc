// The descriptors of the absolute schemes of absolute_scheme.h: sinusoidal, learned,
// hierarchical and continuous (registered in scheme_registry.cc).
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/schemes/scheme_cost.h"
#include "server/schemes/scheme_proto.h"
#include "server/schemes/scheme_registry.h"
#include "server/tables/sinusoidal_table.h"

namespace posenc {
namespace {

const std::vector<std::string> kFloats = {"FP32", "FP16", "BF16"};
const std::vector<std::string> kInts = {"INT64", "INT32"};

// The Open Inference Protocol model every absolute scheme shares: embeddings in, the
// encoded embeddings out, positions as ids or parameters.
OipModel AbsoluteModel() {
  return OipModel{{{"input", kFloats, {-1, -1, -1}, false},
                   {"position_ids", kInts, {-1, -1}, true}},
                  {{"output", {"FP32"}, {-1, -1, -1}, false}},
                  {"config", "positions", "position_offset"}};
}

// The tensors arrived with the request; in-place schemes hand the same buffers to the
// response, whose serialization makes one more copy. `levels` encoding rows of `pe_dim`
// per token are the scratch (the worst case, when no cached table slice serves); CONCAT
// also builds a new [rows, d + pe_dim] output.
absl::StatusOr<SchemeCost> AbsoluteCost(const v1::EncodeRequest& r, int64_t levels, bool concat,
                                        std::optional<int64_t> pe_dim) {
  const CostBytes in = EncodeInBytes(r);
  const int64_t rows = CostRows(r.input()), d = CostDim(r.input(), -1);
  const int64_t width = concat ? pe_dim.value_or(d) : d;
  const CostBytes scratch = CostBytes::Product({levels, rows, width, 4});
  if (!concat) return (in + in + scratch).Cost("input.shape and the levels");
  const CostBytes out =
      CostBytes::Product({rows, CostSizeSum(d, width), CostElementBytes(r.input().dtype())});
  return (in + out + out + scratch).Cost("input.shape and pe_dim");
}

// --- sinusoidal --------------------------------------------------------------------------

absl::StatusOr<AbsoluteResult> AddSinusoidal(const SchemeEnv& env, const v1::EncodeRequest& r,
                                             TensorView input, const PositionsSpec& positions) {
  ASSIGN_OR_RETURN(const SinusoidalSpec spec, SinusoidalFromProto(r.sinusoidal()));
  ASSIGN_OR_RETURN(const CombineSpec combine, CombineFromSinusoidal(r.sinusoidal()));
  return ApplySinusoidal(spec, combine, input, positions, *env.cache, env.limits);
}

absl::Status CheckSinusoidalTable(const v1::TableRequest& r) {
  ASSIGN_OR_RETURN(SinusoidalSpec spec, SinusoidalFromProto(r.sinusoidal()));
  spec.dim = r.dim();
  RETURN_IF_ERROR(ValidateSinusoidal(spec, "sinusoidal"));
  // Negative positions are fine for sinusoidal tables: sin is odd, cos even.
  return ValidateTablePositions(TablePositionsFromProto(r), r.length(), /*allow_negative=*/true);
}

absl::StatusOr<TableRows> SinusoidalTableRows(const v1::TableRequest& r, int64_t first, int64_t n) {
  ASSIGN_OR_RETURN(SinusoidalSpec spec, SinusoidalFromProto(r.sinusoidal()));
  spec.dim = r.dim();
  return TableRows{ComputeSinusoidalTable(spec, TablePositionsFromProto(r), first, n),
                   {n, r.dim()}};
}

}  // namespace

SchemeDescriptor SinusoidalScheme() {
  SchemeDescriptor s;
  s.name = "sinusoidal";
  s.family = SchemeFamily::kAdditive;
  s.encode_case = v1::EncodeRequest::kSinusoidal;
  s.table_case = v1::TableRequest::kSinusoidal;
  s.in_place = [](const v1::EncodeRequest& r) { return r.sinusoidal().fusion() != v1::CONCAT; };
  s.add = AddSinusoidal;
  s.encode_cost = [](const v1::EncodeRequest& r) {
    const v1::Sinusoidal& p = r.sinusoidal();
    return AbsoluteCost(r, 1, p.fusion() == v1::CONCAT,
                        p.has_pe_dim() ? std::optional<int64_t>(p.pe_dim()) : std::nullopt);
  };
  s.check_table = CheckSinusoidalTable;
  s.table_rows = SinusoidalTableRows;
  s.model = AbsoluteModel();
  return s;
}

namespace {

// --- learned -----------------------------------------------------------------------------

absl::StatusOr<AbsoluteResult> AddLearned(const SchemeEnv& env, const v1::EncodeRequest& r,
                                          TensorView input, const PositionsSpec& positions) {
  const v1::Learned& l = r.learned();
  ASSIGN_OR_RETURN(const Overflow overflow, OverflowFromProto(l.overflow()));
  ASSIGN_OR_RETURN(const CombineSpec combine, CombineFromLearned(l));
  if (l.table().empty()) {
    return absl::InvalidArgumentError("learned.table is empty; name a --table");
  }
  const NamedTable* named = env.tables->Find(l.table());
  if (!named) {
    return absl::NotFoundError(
        absl::StrCat("learned.table '", l.table(), "' is not loaded (see ListSchemes)"));
  }
  return ApplyLearned(LearnedSpec{l.table(), named->table, overflow}, combine, input, positions,
                      env.limits);
}

}  // namespace

SchemeDescriptor LearnedScheme() {
  SchemeDescriptor s;
  s.name = "learned";
  s.family = SchemeFamily::kTable;
  s.encode_case = v1::EncodeRequest::kLearned;
  s.in_place = [](const v1::EncodeRequest& r) { return r.learned().fusion() != v1::CONCAT; };
  s.add = AddLearned;
  // A learned table has its own width, at most the largest table: counted as d_model.
  s.encode_cost = [](const v1::EncodeRequest& r) {
    return AbsoluteCost(r, 1, r.learned().fusion() == v1::CONCAT, std::nullopt);
  };
  s.model = AbsoluteModel();
  return s;
}

// --- hierarchical ------------------------------------------------------------------------

SchemeDescriptor HierarchicalScheme() {
  SchemeDescriptor s;
  s.name = "hierarchical";
  s.family = SchemeFamily::kAdditive;
  s.encode_case = v1::EncodeRequest::kHierarchical;
  s.add = [](const SchemeEnv& env, const v1::EncodeRequest& r, TensorView input,
             const PositionsSpec&) {
    return ApplyHierarchical(HierarchicalFromProto(r.hierarchical()), input, env.limits);
  };
  s.encode_cost = [](const v1::EncodeRequest& r) {
    return AbsoluteCost(r, std::max(1, r.hierarchical().levels_size()), false, std::nullopt);
  };
  s.model = AbsoluteModel();
  return s;
}

// --- continuous --------------------------------------------------------------------------

SchemeDescriptor ContinuousScheme() {
  SchemeDescriptor s;
  s.name = "continuous";
  s.family = SchemeFamily::kAdditive;
  s.encode_case = v1::EncodeRequest::kContinuous;
  s.takes_position_values = true;
  s.add = [](const SchemeEnv& env, const v1::EncodeRequest& r, TensorView input,
             const PositionsSpec& positions) -> absl::StatusOr<AbsoluteResult> {
    ASSIGN_OR_RETURN(const ContinuousSpec spec, ContinuousFromProto(r.continuous()));
    return ApplyContinuous(spec, input, positions, env.limits);
  };
  s.encode_cost = [](const v1::EncodeRequest& r) {
    return AbsoluteCost(r, 1, false, std::nullopt);
  };
  s.model = AbsoluteModel();
  s.model.inputs.push_back({"position_values", {"FP64", "FP32"}, {-1, -1}, true});
  return s;
}

// --- sinusoidal_2d -----------------------------------------------------------------------

SchemeDescriptor Sinusoidal2DScheme() {
  SchemeDescriptor s;
  s.name = "sinusoidal_2d";
  s.family = SchemeFamily::kAdditive;
  s.encode_case = v1::EncodeRequest::kSinusoidal2D;
  s.in_place = [](const v1::EncodeRequest& r) { return r.sinusoidal_2d().fusion() != v1::CONCAT; };
  s.add = [](const SchemeEnv& env, const v1::EncodeRequest& r, TensorView input,
             const PositionsSpec& positions) -> absl::StatusOr<AbsoluteResult> {
    ASSIGN_OR_RETURN(const Sinusoidal2DSpec spec, Sinusoidal2DFromProto(r.sinusoidal_2d()));
    ASSIGN_OR_RETURN(const CombineSpec combine, CombineFromSinusoidal2D(r.sinusoidal_2d()));
    return ApplySinusoidal2D(spec, combine, input, positions, *env.cache, env.limits);
  };
  // The table is [seq, d] (the input's own width, also for CONCAT): as one row per token.
  s.encode_cost = [](const v1::EncodeRequest& r) {
    return AbsoluteCost(r, 1, r.sinusoidal_2d().fusion() == v1::CONCAT, std::nullopt);
  };
  // The grid gives the positions: no position inputs or parameters.
  s.model = OipModel{{{"input", kFloats, {-1, -1, -1}, false}},
                     {{"output", {"FP32"}, {-1, -1, -1}, false}},
                     {"config"}};
  return s;
}

// --- fourier -------------------------------------------------------------------------------

namespace {

absl::StatusOr<AbsoluteResult> AddFourier(const SchemeEnv& env, const v1::EncodeRequest& r,
                                          TensorView input, const PositionsSpec& positions) {
  const v1::Fourier& f = r.fourier();
  ASSIGN_OR_RETURN(const CombineSpec combine, CombineFromFourier(f));
  const bool inline_b = f.frequencies_size() > 0, named_b = !f.frequencies_table().empty();
  if (inline_b == named_b) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fourier.frequencies and fourier.frequencies_table are ",
        inline_b ? "both set" : "both empty", "; give exactly one (B, [F, num_axes])"));
  }
  FourierSpec spec;
  spec.num_axes = f.has_num_axes() ? f.num_axes() : 1;
  if (inline_b) {
    spec.frequencies = absl::MakeConstSpan(f.frequencies().data(), f.frequencies_size());
    return ApplyFourier(spec, combine, input, positions, *env.cache, env.limits);
  }
  const NamedTable* named = env.tables->Find(f.frequencies_table());
  if (!named) {
    return absl::NotFoundError(absl::StrCat("fourier.frequencies_table '", f.frequencies_table(),
                                            "' is not loaded (see ListSchemes)"));
  }
  const Table& b = *named->table;
  if (b.cols != spec.num_axes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fourier.frequencies_table '", f.frequencies_table(), "' is [", b.rows, ", ", b.cols,
        "]; with fourier.num_axes ", spec.num_axes, " it must be [F, ", spec.num_axes, "]"));
  }
  if (b.rows > kMaxFourierFeatures) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fourier.frequencies_table '", f.frequencies_table(), "' has ", b.rows,
                     " frequencies (F); at most ", kMaxFourierFeatures, " are served"));
  }
  // A float64 file's own values; otherwise the float32 table, exact as float64.
  std::vector<double> widened;
  if (named->float64_values) {
    spec.frequencies = *named->float64_values;
  } else {
    widened.assign(b.data.begin(), b.data.end());
    spec.frequencies = widened;
  }
  spec.field = absl::StrCat("fourier.frequencies_table '", f.frequencies_table(), "'");
  return ApplyFourier(spec, combine, input, positions, *env.cache, env.limits);
}

}  // namespace

SchemeDescriptor FourierScheme() {
  SchemeDescriptor s;
  s.name = "fourier";
  s.family = SchemeFamily::kAdditive;
  s.encode_case = v1::EncodeRequest::kFourier;
  s.takes_position_values = true;
  s.position_value_axes = [](const v1::EncodeRequest& r) -> int64_t {
    return r.fourier().has_num_axes() ? r.fourier().num_axes() : 1;
  };
  s.in_place = [](const v1::EncodeRequest& r) { return r.fourier().fusion() != v1::CONCAT; };
  s.add = AddFourier;
  // CONCAT appends 2F: from inline frequencies F = size / num_axes; a named table's F is
  // counted as d_model, as for a learned table.
  s.encode_cost = [](const v1::EncodeRequest& r) {
    const v1::Fourier& f = r.fourier();
    const int64_t axes = f.has_num_axes() && f.num_axes() > 0 ? f.num_axes() : 1;
    std::optional<int64_t> width;
    if (f.frequencies_size() > 0) width = 2 * (f.frequencies_size() / axes);
    return AbsoluteCost(r, 1, f.fusion() == v1::CONCAT, width);
  };
  s.model = AbsoluteModel();
  s.model.inputs.push_back({"position_values", {"FP64", "FP32"}, {-1, -1, -1}, true});
  return s;
}

}  // namespace posenc
