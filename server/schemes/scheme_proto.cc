#include "server/schemes/scheme_proto.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "server/common/status_macros.h"

namespace posenc {

namespace {

// INVALID_ARGUMENT when `value` is not a number `type` names: "rope.style is 99; it must be
// one of NEOX, GPTJ".
absl::Status CheckKnown(int value, const google::protobuf::EnumDescriptor* type,
                        absl::string_view field) {
  if (type->FindValueByNumber(value) != nullptr) return absl::OkStatus();
  std::string names;
  for (int i = 0; i < type->value_count(); ++i) {
    absl::StrAppend(&names, i > 0 ? ", " : "", type->value(i)->name());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", value, "; it must be one of ", names));
}

absl::StatusOr<SinusoidalLayout> LayoutFromProto(v1::SinusoidalLayout layout,
                                                 absl::string_view field) {
  RETURN_IF_ERROR(CheckKnown(layout, v1::SinusoidalLayout_descriptor(), field));
  return layout == v1::CONCATENATED ? SinusoidalLayout::kConcatenated
                                    : SinusoidalLayout::kInterleaved;
}

absl::StatusOr<Timescale> TimescaleFromProto(v1::Timescale timescale, absl::string_view field) {
  RETURN_IF_ERROR(CheckKnown(timescale, v1::Timescale_descriptor(), field));
  return timescale == v1::HALF_MINUS_ONE ? Timescale::kHalfMinusOne : Timescale::kPerDim;
}

absl::StatusOr<Fusion> FusionFromProto(v1::Fusion fusion, absl::string_view field) {
  RETURN_IF_ERROR(CheckKnown(fusion, v1::Fusion_descriptor(), field));
  switch (fusion) {
    case v1::CONCAT: return Fusion::kConcat;
    case v1::MULTIPLY: return Fusion::kMultiply;
    default: return Fusion::kAdd;
  }
}

absl::StatusOr<RopeSpec::Layout> RopeLayoutFromProto(v1::RopeLayout layout) {
  RETURN_IF_ERROR(CheckKnown(layout, v1::RopeLayout_descriptor(), "rope.layout"));
  switch (layout) {
    case v1::BHSD: return RopeSpec::Layout::kBhsd;
    case v1::THD: return RopeSpec::Layout::kThd;
    default: return RopeSpec::Layout::kBshd;
  }
}

absl::StatusOr<RopeScalingSpec::Type> ScalingTypeFromProto(v1::RopeScalingType type) {
  RETURN_IF_ERROR(CheckKnown(type, v1::RopeScalingType_descriptor(), "rope.scaling.type"));
  using Type = RopeScalingSpec::Type;
  switch (type) {
    case v1::LINEAR: return Type::kLinear;
    case v1::DYNAMIC: return Type::kDynamic;
    case v1::YARN: return Type::kYarn;
    case v1::LLAMA3: return Type::kLlama3;
    case v1::LONGROPE: return Type::kLongRope;
    case v1::PROPORTIONAL: return Type::kProportional;
    default: return Type::kNone;
  }
}

// The RopeScaling fields each type reads (HF modeling_rope_utils.py's _compute_*_parameters
// and their config checks); `type` itself always applies.
const std::vector<std::string>& ScalingFieldsOf(v1::RopeScalingType type) {
  static const auto* const kFields = new std::map<int, std::vector<std::string>>{
      {v1::NONE, {}},
      {v1::LINEAR, {"factor"}},
      {v1::DYNAMIC, {"factor", "max_position_embeddings", "original_max_position_embeddings"}},
      {v1::YARN,
       {"factor", "original_max_position_embeddings", "max_position_embeddings", "beta_fast",
        "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"}},
      {v1::LLAMA3,
       {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}},
      {v1::LONGROPE,
       {"factor", "original_max_position_embeddings", "max_position_embeddings", "short_factor",
        "long_factor", "attention_factor"}},
      {v1::PROPORTIONAL, {"factor", "rope_proportion"}},
  };
  static const std::vector<std::string> kNoFields;
  auto it = kFields->find(type);
  return it == kFields->end() ? kNoFields : it->second;
}

// A field set that the type does not read would change nothing: INVALID_ARGUMENT naming it,
// the type and the fields the type takes.
absl::Status CheckScalingFields(const v1::RopeScaling& in) {
  std::vector<const google::protobuf::FieldDescriptor*> set;
  in.GetReflection()->ListFields(in, &set);
  const std::vector<std::string>& allowed = ScalingFieldsOf(in.type());
  for (const google::protobuf::FieldDescriptor* field : set) {
    if (field->name() == "type" ||
        std::find(allowed.begin(), allowed.end(), field->name()) != allowed.end()) {
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("rope.scaling.", field->name(), " is set, but rope.scaling.type ",
                     v1::RopeScalingType_Name(in.type()), " does not use it; ",
                     v1::RopeScalingType_Name(in.type()), " takes ",
                     allowed.empty() ? "no other field" : absl::StrJoin(allowed, ", "),
                     ". Leave it unset (an HF config's keys for another type are not sent)"));
  }
  return absl::OkStatus();
}

RopeScalingSpec ScalingParametersFromProto(const v1::RopeScaling& in) {
  RopeScalingSpec out;
  if (in.has_factor()) out.factor = in.factor();
  if (in.has_original_max_position_embeddings()) {
    out.original_max_position_embeddings = in.original_max_position_embeddings();
  }
  if (in.has_max_position_embeddings()) out.max_position_embeddings = in.max_position_embeddings();
  if (in.has_beta_fast()) out.beta_fast = in.beta_fast();
  if (in.has_beta_slow()) out.beta_slow = in.beta_slow();
  if (in.has_mscale()) out.mscale = in.mscale();
  if (in.has_mscale_all_dim()) out.mscale_all_dim = in.mscale_all_dim();
  if (in.has_attention_factor()) out.attention_factor = in.attention_factor();
  if (in.has_low_freq_factor()) out.low_freq_factor = in.low_freq_factor();
  if (in.has_high_freq_factor()) out.high_freq_factor = in.high_freq_factor();
  out.short_factor.assign(in.short_factor().begin(), in.short_factor().end());
  out.long_factor.assign(in.long_factor().begin(), in.long_factor().end());
  if (in.has_truncate()) out.truncate = in.truncate();
  if (in.has_rope_proportion()) out.rope_proportion = in.rope_proportion();
  return out;
}

}  // namespace

absl::StatusOr<SinusoidalSpec> SinusoidalFromProto(const v1::Sinusoidal& s) {
  SinusoidalSpec spec;
  if (s.has_base()) spec.base = s.base();
  ASSIGN_OR_RETURN(spec.layout, LayoutFromProto(s.layout(), "sinusoidal.layout"));
  ASSIGN_OR_RETURN(spec.timescale, TimescaleFromProto(s.timescale(), "sinusoidal.timescale"));
  return spec;
}

absl::StatusOr<CombineSpec> CombineFromSinusoidal(const v1::Sinusoidal& s) {
  CombineSpec c;
  if (s.has_input_scale()) c.input_scale = s.input_scale();
  if (s.has_pe_scale()) c.pe_scale = s.pe_scale();
  ASSIGN_OR_RETURN(c.fusion, FusionFromProto(s.fusion(), "sinusoidal.fusion"));
  if (s.has_pe_dim()) c.pe_dim = s.pe_dim();
  return c;
}

absl::StatusOr<CombineSpec> CombineFromLearned(const v1::Learned& l) {
  CombineSpec c;
  if (l.has_input_scale()) c.input_scale = l.input_scale();
  if (l.has_pe_scale()) c.pe_scale = l.pe_scale();
  ASSIGN_OR_RETURN(c.fusion, FusionFromProto(l.fusion(), "learned.fusion"));
  return c;
}

absl::StatusOr<Overflow> OverflowFromProto(v1::Overflow o) {
  RETURN_IF_ERROR(CheckKnown(o, v1::Overflow_descriptor(), "learned.overflow"));
  switch (o) {
    case v1::CLAMP: return Overflow::kClamp;
    case v1::INTERPOLATE: return Overflow::kInterpolate;
    default: return Overflow::kError;
  }
}

absl::StatusOr<ContinuousSpec> ContinuousFromProto(const v1::Continuous& c) {
  ContinuousSpec spec;
  if (c.has_base()) spec.base = c.base();
  if (c.has_value_scale()) spec.value_scale = c.value_scale();
  ASSIGN_OR_RETURN(spec.layout, LayoutFromProto(c.layout(), "continuous.layout"));
  ASSIGN_OR_RETURN(spec.timescale, TimescaleFromProto(c.timescale(), "continuous.timescale"));
  return spec;
}

absl::StatusOr<RopeSpec> RopeFromProto(const v1::Rope& r) {
  RopeSpec spec;
  if (r.has_base()) spec.base = r.base();
  if (r.has_rotary_dim()) spec.rotary_dim = r.rotary_dim();
  RETURN_IF_ERROR(CheckKnown(r.style(), v1::RopeStyle_descriptor(), "rope.style"));
  spec.style = r.style() == v1::GPTJ ? RopeSpec::Style::kGptj : RopeSpec::Style::kNeox;
  ASSIGN_OR_RETURN(spec.layout, RopeLayoutFromProto(r.layout()));
  ASSIGN_OR_RETURN(const RopeScalingSpec::Type type, ScalingTypeFromProto(r.scaling().type()));
  RETURN_IF_ERROR(CheckScalingFields(r.scaling()));
  spec.scaling = ScalingParametersFromProto(r.scaling());
  spec.scaling.type = type;
  spec.mrope_section.assign(r.mrope_section().begin(), r.mrope_section().end());
  spec.mrope_interleaved = r.mrope_interleaved();
  spec.axial_axes = r.axial_axes();
  if (r.has_xpos_scale_base()) spec.xpos_scale_base = r.xpos_scale_base();
  if (r.has_xpos_center()) spec.xpos_center = r.xpos_center();
  return spec;
}

absl::StatusOr<AlibiSpec> AlibiFromProto(const v1::Alibi& a) {
  AlibiSpec spec;
  spec.num_heads = a.num_heads();
  RETURN_IF_ERROR(CheckKnown(a.mode(), v1::AlibiMode_descriptor(), "alibi.mode"));
  spec.causal = a.mode() == v1::CAUSAL;
  if (a.has_max_bias()) spec.max_bias = a.max_bias();
  return spec;
}

T5Spec T5FromProto(const v1::T5Bias& t) {
  T5Spec spec;
  if (t.has_num_buckets()) spec.num_buckets = t.num_buckets();
  if (t.has_max_distance()) spec.max_distance = t.max_distance();
  spec.bidirectional = t.bidirectional();
  return spec;
}

std::vector<HierarchicalLevel> HierarchicalFromProto(const v1::Hierarchical& h) {
  std::vector<HierarchicalLevel> levels;
  levels.reserve(h.levels_size());
  for (const v1::Level& level : h.levels()) {
    HierarchicalLevel l;
    l.ids = absl::MakeConstSpan(level.ids().data(), level.ids_size());
    if (level.has_base()) l.base = level.base();
    if (level.has_scale()) l.scale = level.scale();
    levels.push_back(l);
  }
  return levels;
}

DebertaSpec DebertaFromProto(const v1::DebertaRelative& d) {
  DebertaSpec spec;
  if (d.has_position_buckets()) spec.position_buckets = d.position_buckets();
  if (d.has_max_relative_positions()) spec.max_relative_positions = d.max_relative_positions();
  return spec;
}

GraphRequestSpec GraphFromProto(const v1::GraphRequest& request) {
  GraphRequestSpec spec;
  GraphSpec& graph = spec.graph;
  graph.num_nodes = request.num_nodes();
  graph.edges = absl::MakeConstSpan(request.edges().data(), request.edges_size());
  graph.k = request.k();
  graph.normalized = request.normalized();
  switch (request.encoding()) {
    case v1::RANDOM_WALK: spec.encoding = GraphEncodingKind::kRandomWalk; break;
    case v1::SHORTEST_PATH: spec.encoding = GraphEncodingKind::kShortestPath; break;
    case v1::TREE: spec.encoding = GraphEncodingKind::kTree; break;
    default: spec.encoding = GraphEncodingKind::kLaplacian; break;
  }
  spec.walk_length = request.walk_length();
  spec.anchors = absl::MakeConstSpan(request.anchors().data(), request.anchors_size());
  spec.parents = absl::MakeConstSpan(request.parents().data(), request.parents_size());
  spec.max_depth = request.max_depth();
  spec.max_children = request.max_children();
  if (request.has_depth_decay()) spec.depth_decay = request.depth_decay();
  spec.tree_table = request.table();
  return spec;
}

absl::StatusOr<Sinusoidal2DSpec> Sinusoidal2DFromProto(const v1::Sinusoidal2D& s) {
  Sinusoidal2DSpec spec;
  spec.grid_height = s.grid_height();
  spec.grid_width = s.grid_width();
  spec.cls_token = s.cls_token();
  if (s.has_base()) spec.base = s.base();
  return spec;
}

absl::StatusOr<CombineSpec> CombineFromSinusoidal2D(const v1::Sinusoidal2D& s) {
  CombineSpec c;
  if (s.has_input_scale()) c.input_scale = s.input_scale();
  if (s.has_pe_scale()) c.pe_scale = s.pe_scale();
  ASSIGN_OR_RETURN(c.fusion, FusionFromProto(s.fusion(), "sinusoidal_2d.fusion"));
  return c;
}

absl::StatusOr<CombineSpec> CombineFromFourier(const v1::Fourier& f) {
  CombineSpec c;
  if (f.has_input_scale()) c.input_scale = f.input_scale();
  if (f.has_pe_scale()) c.pe_scale = f.pe_scale();
  ASSIGN_OR_RETURN(c.fusion, FusionFromProto(f.fusion(), "fourier.fusion"));
  return c;
}

TablePositions TablePositionsFromProto(const v1::TableRequest& r) {
  TablePositions p;
  p.first = r.first_position();
  if (r.has_position_step()) p.step = r.position_step();
  if (r.has_clamp_position()) p.clamp = r.clamp_position();
  return p;
}

}  // namespace posenc
