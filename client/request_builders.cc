#include "client/request_builders.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/tensor_io.h"
#include "server/common/status_macros.h"
#include "server/tensor/npy.h"
#include "server/tensor/tensor_view.h"

namespace posenc::client {

absl::Status FillSinusoidal(const Flags& f, v1::Sinusoidal* s) {
  ASSIGN_OR_RETURN(auto base, f.OptDouble("base"));
  if (base) s->set_base(*base);
  ASSIGN_OR_RETURN(auto layout,
                   EnumFlag<v1::SinusoidalLayout>(f, "layout", v1::SinusoidalLayout_Parse,
                                                  v1::SinusoidalLayout_descriptor()));
  if (layout) s->set_layout(*layout);
  ASSIGN_OR_RETURN(auto timescale, EnumFlag<v1::Timescale>(f, "timescale", v1::Timescale_Parse,
                                                           v1::Timescale_descriptor()));
  if (timescale) s->set_timescale(*timescale);
  ASSIGN_OR_RETURN(auto input_scale, f.OptDouble("input-scale"));
  if (input_scale) s->set_input_scale(static_cast<float>(*input_scale));
  ASSIGN_OR_RETURN(auto pe_scale, f.OptDouble("pe-scale"));
  if (pe_scale) s->set_pe_scale(static_cast<float>(*pe_scale));
  ASSIGN_OR_RETURN(auto fusion,
                   EnumFlag<v1::Fusion>(f, "fusion", v1::Fusion_Parse, v1::Fusion_descriptor()));
  if (fusion) s->set_fusion(*fusion);
  ASSIGN_OR_RETURN(auto pe_dim, f.OptInt("pe-dim"));
  if (pe_dim) s->set_pe_dim(static_cast<int32_t>(*pe_dim));
  return absl::OkStatus();
}

absl::Status FillRope(const Flags& f, v1::Rope* rope, std::optional<HfRopeConfig>* hf) {
  if (f.Has("hf-config")) {
    ASSIGN_OR_RETURN(HfRopeConfig config,
                     LoadHfRopeConfig(f.Str("hf-config"), f.Str("layer-type", "")));
    *rope = config.rope;
    *hf = std::move(config);
  }
  ASSIGN_OR_RETURN(auto base, f.OptDouble("base"));
  if (base) rope->set_base(*base);
  ASSIGN_OR_RETURN(auto rotary_dim, f.OptInt("rotary-dim"));
  if (rotary_dim) rope->set_rotary_dim(static_cast<int32_t>(*rotary_dim));
  ASSIGN_OR_RETURN(auto style, EnumFlag<v1::RopeStyle>(f, "style", v1::RopeStyle_Parse,
                                                       v1::RopeStyle_descriptor()));
  if (style) rope->set_style(*style);
  ASSIGN_OR_RETURN(auto layout, EnumFlag<v1::RopeLayout>(f, "rope-layout", v1::RopeLayout_Parse,
                                                         v1::RopeLayout_descriptor()));
  if (layout) rope->set_layout(*layout);
  ASSIGN_OR_RETURN(auto scaling,
                   EnumFlag<v1::RopeScalingType>(f, "scaling", v1::RopeScalingType_Parse,
                                                 v1::RopeScalingType_descriptor()));
  if (scaling) rope->mutable_scaling()->set_type(*scaling);
  ASSIGN_OR_RETURN(auto factor, f.OptDouble("factor"));
  if (factor) rope->mutable_scaling()->set_factor(*factor);
  ASSIGN_OR_RETURN(auto original, f.OptInt("original-max-pos"));
  if (original) rope->mutable_scaling()->set_original_max_position_embeddings(*original);
  return absl::OkStatus();
}

namespace {

// --------------------------------------------------------------------------------------
// encode: one filler per --scheme, each setting its message of the request.

using Hf = std::optional<HfRopeConfig>;

absl::Status FillSinusoidalScheme(const Flags& f, v1::EncodeRequest* request, Hf*) {
  return FillSinusoidal(f, request->mutable_sinusoidal());
}

absl::Status FillLearned(const Flags& f, v1::EncodeRequest* request, Hf*) {
  v1::Learned* learned = request->mutable_learned();
  if (!f.Has("table")) return absl::InvalidArgumentError("--scheme learned needs --table NAME");
  learned->set_table(f.Str("table"));
  ASSIGN_OR_RETURN(auto overflow, EnumFlag<v1::Overflow>(f, "overflow", v1::Overflow_Parse,
                                                         v1::Overflow_descriptor()));
  if (overflow) learned->set_overflow(*overflow);
  v1::Sinusoidal tmp;  // shares the scale and fusion flags
  RETURN_IF_ERROR(FillSinusoidal(f, &tmp));
  if (tmp.has_input_scale()) learned->set_input_scale(tmp.input_scale());
  if (tmp.has_pe_scale()) learned->set_pe_scale(tmp.pe_scale());
  learned->set_fusion(tmp.fusion());
  return absl::OkStatus();
}

absl::Status FillRopeScheme(const Flags& f, v1::EncodeRequest* request, Hf* hf) {
  return FillRope(f, request->mutable_rope(), hf);
}

// --levels "0,1,0;0,0,1": one comma-separated id list per level, levels split by ';'.
absl::Status FillHierarchical(const Flags& f, v1::EncodeRequest* request, Hf*) {
  if (!f.Has("levels")) {
    return absl::InvalidArgumentError("--scheme hierarchical needs --levels \"ids;ids...\"");
  }
  ASSIGN_OR_RETURN(std::vector<double> scales, f.DoubleList("level-scales"));
  ASSIGN_OR_RETURN(std::vector<double> bases, f.DoubleList("level-bases"));
  size_t index = 0;
  for (absl::string_view ids : absl::StrSplit(f.Str("levels"), ';', absl::SkipEmpty())) {
    v1::Level* level = request->mutable_hierarchical()->add_levels();
    for (absl::string_view part : absl::StrSplit(ids, ',', absl::SkipEmpty())) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v)) {
        return absl::InvalidArgumentError("--levels takes integers: \"0,1,0;0,0,1\"");
      }
      level->add_ids(v);
    }
    if (index < scales.size()) level->set_scale(static_cast<float>(scales[index]));
    if (index < bases.size()) level->set_base(bases[index]);
    ++index;
  }
  return absl::OkStatus();
}

absl::Status FillContinuous(const Flags& f, v1::EncodeRequest* request, Hf*) {
  v1::Continuous* c = request->mutable_continuous();
  v1::Sinusoidal tmp;  // shares the base, layout and timescale flags
  RETURN_IF_ERROR(FillSinusoidal(f, &tmp));
  if (tmp.has_base()) c->set_base(tmp.base());
  c->set_layout(tmp.layout());
  c->set_timescale(tmp.timescale());
  ASSIGN_OR_RETURN(auto value_scale, f.OptDouble("value-scale"));
  if (value_scale) c->set_value_scale(*value_scale);
  return absl::OkStatus();
}

// Two integer flags a command needs; `missing` when either is absent.
absl::StatusOr<std::pair<int64_t, int64_t>> RequiredInts(const Flags& f, const char* a,
                                                         const char* b, const char* missing) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> first, f.OptInt(a));
  ASSIGN_OR_RETURN(const std::optional<int64_t> second, f.OptInt(b));
  if (!first || !second) return absl::InvalidArgumentError(missing);
  return std::pair<int64_t, int64_t>(*first, *second);
}

// --grid-height H --grid-width W [--cls-token]; the scale and fusion flags as sinusoidal.
absl::Status FillSinusoidal2D(const Flags& f, v1::EncodeRequest* request, Hf*) {
  v1::Sinusoidal2D* s = request->mutable_sinusoidal_2d();
  ASSIGN_OR_RETURN(const auto hw, RequiredInts(f, "grid-height", "grid-width",
                                               "--scheme sinusoidal_2d needs --grid-height and "
                                               "--grid-width"));
  s->set_grid_height(hw.first);
  s->set_grid_width(hw.second);
  ASSIGN_OR_RETURN(const bool cls, f.Bool("cls-token"));
  s->set_cls_token(cls);
  v1::Sinusoidal tmp;  // shares the base, scale and fusion flags
  RETURN_IF_ERROR(FillSinusoidal(f, &tmp));
  if (tmp.has_base()) s->set_base(tmp.base());
  if (tmp.has_input_scale()) s->set_input_scale(tmp.input_scale());
  if (tmp.has_pe_scale()) s->set_pe_scale(tmp.pe_scale());
  s->set_fusion(tmp.fusion());
  return absl::OkStatus();
}

// --frequencies 0.5,1.2,... (B row-major) or --frequencies-table NAME, --num-axes M; the
// scale and fusion flags as sinusoidal; positions from --values (M per token) or --offsets/--ids.
absl::Status FillFourier(const Flags& f, v1::EncodeRequest* request, Hf*) {
  v1::Fourier* s = request->mutable_fourier();
  ASSIGN_OR_RETURN(const std::vector<double> b, f.DoubleList("frequencies"));
  s->mutable_frequencies()->Add(b.begin(), b.end());
  s->set_frequencies_table(f.Str("frequencies-table"));
  if (b.empty() == s->frequencies_table().empty()) {
    return absl::InvalidArgumentError(
        "--scheme fourier needs one of --frequencies 0.5,1.2,... and --frequencies-table NAME");
  }
  ASSIGN_OR_RETURN(auto axes, f.OptInt("num-axes"));
  if (axes) s->set_num_axes(static_cast<int32_t>(*axes));
  v1::Sinusoidal tmp;  // shares the scale and fusion flags
  RETURN_IF_ERROR(FillSinusoidal(f, &tmp));
  if (tmp.has_input_scale()) s->set_input_scale(tmp.input_scale());
  if (tmp.has_pe_scale()) s->set_pe_scale(tmp.pe_scale());
  s->set_fusion(tmp.fusion());
  return absl::OkStatus();
}

struct EncodeScheme {
  const char* name;
  absl::Status (*fill)(const Flags& f, v1::EncodeRequest* request, Hf* hf);
};
constexpr EncodeScheme kEncodeSchemes[] = {{"sinusoidal", FillSinusoidalScheme},
                                           {"learned", FillLearned},
                                           {"rope", FillRopeScheme},
                                           {"hierarchical", FillHierarchical},
                                           {"continuous", FillContinuous},
                                           {"sinusoidal_2d", FillSinusoidal2D},
                                           {"fourier", FillFourier}};

absl::Status FillEncodeScheme(const Flags& f, const std::string& scheme, v1::EncodeRequest* request,
                              Hf* hf) {
  for (const EncodeScheme& s : kEncodeSchemes) {
    if (scheme == s.name) return s.fill(f, request, hf);
  }
  std::string names;
  for (const EncodeScheme& s : kEncodeSchemes)
    absl::StrAppend(&names, names.empty() ? "" : ", ", s.name);
  return absl::InvalidArgumentError(absl::StrCat("--scheme '", scheme, "' is not one of ", names));
}

// With --hf-config and no --shape: 8 tokens of the model's query heads, in the chosen layout.
std::vector<int64_t> ModelShape(const HfRopeConfig& hf, v1::RopeLayout layout) {
  constexpr int64_t kTokens = 8;
  switch (layout) {
    case v1::BHSD: return {1, hf.num_attention_heads, kTokens, hf.head_dim};
    case v1::THD: return {kTokens, hf.num_attention_heads, hf.head_dim};
    default: return {1, kTokens, hf.num_attention_heads, hf.head_dim};
  }
}

// --input x.npy, or --shape (else the model's) filled per --fill.
absl::Status FillInput(const Flags& f, const Hf& hf, std::optional<v1::DType> dtype, uint64_t seed,
                       v1::EncodeRequest* request) {
  if (f.Has("input")) {
    ASSIGN_OR_RETURN(*request->mutable_input(), TensorFromNpy(f.Str("input"), dtype));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, f.IntList("shape"));
  if (shape.empty() && hf && hf->num_attention_heads > 0)
    shape = ModelShape(*hf, request->rope().layout());
  if (shape.empty()) return absl::InvalidArgumentError("give --shape 2,16,64 or --input x.npy");
  ASSIGN_OR_RETURN(*request->mutable_input(),
                   FilledTensor(shape, f.Str("fill", "random"), seed, dtype.value_or(v1::FLOAT32)));
  return absl::OkStatus();
}

// rope's --key k.npy or --key-shape, in the input's dtype.
absl::Status FillKey(const Flags& f, const std::string& scheme, uint64_t seed,
                     v1::EncodeRequest* request) {
  if (!f.Has("key") && !f.Has("key-shape")) return absl::OkStatus();
  if (scheme != "rope")
    return absl::InvalidArgumentError("--key and --key-shape are for --scheme rope");
  if (f.Has("key")) {
    ASSIGN_OR_RETURN(*request->mutable_key(),
                     TensorFromNpy(f.Str("key"), request->input().dtype()));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> key_shape, f.IntList("key-shape"));
  ASSIGN_OR_RETURN(*request->mutable_key(), FilledTensor(key_shape, f.Str("fill", "random"),
                                                         seed + 1, request->input().dtype()));
  return absl::OkStatus();
}

// --axis-ids file.npy: INT64 or INT32 [num_axes, seq] or [num_axes, batch, seq].
absl::Status ReadAxisIds(const std::string& path, v1::Positions* positions) {
  ASSIGN_OR_RETURN(NpyArray array, ReadNpyFile(path));
  if (array.shape.size() != 2 && array.shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--axis-ids ", path, " has shape ", ShapeString(array.shape),
                     "; it must be [num_axes, seq] or [num_axes, batch, seq]"));
  }
  const int64_t n = NumElements(array.shape);
  if (array.dtype == DType::kInt64) {
    const auto* v = reinterpret_cast<const int64_t*>(array.data.data());
    positions->mutable_axis_ids()->Add(v, v + n);
  } else if (array.dtype == DType::kInt32) {
    const auto* v = reinterpret_cast<const int32_t*>(array.data.data());
    for (int64_t i = 0; i < n; ++i) positions->add_axis_ids(v[i]);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--axis-ids ", path, " holds ", DTypeName(array.dtype), "; expected int64 or int32"));
  }
  return absl::OkStatus();
}

// One --mrope-segments grid "[image:|video:]TxHxW[@S]" into `segment`; false when malformed.
bool ParseGrid(absl::string_view item, v1::MropeSegment* segment) {
  if (absl::ConsumePrefix(&item, "image:")) segment->set_kind(v1::IMAGE);
  if (absl::ConsumePrefix(&item, "video:")) segment->set_kind(v1::VIDEO);
  std::vector<absl::string_view> scaled = absl::StrSplit(item, '@');
  std::vector<absl::string_view> dims = absl::StrSplit(scaled[0], 'x');
  int64_t t = 0, h = 0, w = 0;
  if (scaled.size() > 2 || dims.size() != 3 || !absl::SimpleAtoi(dims[0], &t) ||
      !absl::SimpleAtoi(dims[1], &h) || !absl::SimpleAtoi(dims[2], &w)) {
    return false;
  }
  segment->set_grid_t(t);
  segment->set_grid_h(h);
  segment->set_grid_w(w);
  if (scaled.size() == 2) {
    double scale = 0;
    if (!absl::SimpleAtod(scaled[1], &scale)) return false;
    segment->set_temporal_scale(scale);
  }
  return true;
}

// --mrope-segments 5,image:1x2x2,3,video:2x4x4@0.5: a text run of L tokens is "L"; a vision
// grid is "TxHxW", optionally prefixed by its kind ("image:", "video:") and suffixed by "@S"
// for its temporal_scale.
absl::Status ParseSegments(const std::string& text, v1::Positions* positions) {
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    v1::MropeSegment* segment = positions->add_mrope_segments();
    int64_t length = 0;
    if (absl::SimpleAtoi(item, &length)) {
      segment->set_text_length(length);
    } else if (!ParseGrid(item, segment)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mrope-segments entry '", item,
                       "' is neither a text length (5) nor a grid "
                       "([image:|video:]TxHxW, optionally @temporal_scale)"));
    }
  }
  return absl::OkStatus();
}

absl::Status FillPositions(const Flags& f, v1::Positions* positions) {
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, f.IntList("offsets"));
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, f.IntList("ids"));
  ASSIGN_OR_RETURN(std::vector<double> values, f.DoubleList("values"));
  positions->mutable_offsets()->Add(offsets.begin(), offsets.end());
  positions->mutable_ids()->Add(ids.begin(), ids.end());
  positions->mutable_values()->Add(values.begin(), values.end());
  if (f.Has("axis-ids")) RETURN_IF_ERROR(ReadAxisIds(f.Str("axis-ids"), positions));
  if (f.Has("mrope-segments")) RETURN_IF_ERROR(ParseSegments(f.Str("mrope-segments"), positions));
  return absl::OkStatus();
}

// --dtype NAME if given.
absl::StatusOr<std::optional<v1::DType>> OptDType(const Flags& f) {
  if (!f.Has("dtype")) return std::optional<v1::DType>();
  ASSIGN_OR_RETURN(const v1::DType dtype, ParseDTypeName(f.Str("dtype")));
  return std::optional<v1::DType>(dtype);
}

}  // namespace

absl::StatusOr<v1::EncodeRequest> BuildEncodeRequest(const Flags& f) {
  v1::EncodeRequest request;
  request.set_request_id(f.Str("request-id"));
  const std::string scheme = f.Str("scheme", f.Has("hf-config") ? "rope" : "sinusoidal");
  Hf hf;
  RETURN_IF_ERROR(FillEncodeScheme(f, scheme, &request, &hf));
  ASSIGN_OR_RETURN(const std::optional<v1::DType> dtype, OptDType(f));
  if (f.Has("input") && f.Has("shape"))
    return absl::InvalidArgumentError("give --input or --shape, not both");
  ASSIGN_OR_RETURN(const int64_t seed, f.Int("seed", 0));
  RETURN_IF_ERROR(FillInput(f, hf, dtype, static_cast<uint64_t>(seed), &request));
  RETURN_IF_ERROR(FillKey(f, scheme, static_cast<uint64_t>(seed), &request));
  RETURN_IF_ERROR(FillPositions(f, request.mutable_positions()));
  return request;
}

// --------------------------------------------------------------------------------------
// bias, graph, table.

namespace {

absl::Status FillAlibi(const Flags& f, v1::Alibi* alibi) {
  ASSIGN_OR_RETURN(auto heads, f.OptInt("heads"));
  if (!heads) return absl::InvalidArgumentError("--scheme alibi needs --heads");
  alibi->set_num_heads(static_cast<int32_t>(*heads));
  ASSIGN_OR_RETURN(auto mode, EnumFlag<v1::AlibiMode>(f, "mode", v1::AlibiMode_Parse,
                                                      v1::AlibiMode_descriptor()));
  if (mode) alibi->set_mode(*mode);
  ASSIGN_OR_RETURN(auto max_bias, f.OptDouble("max-bias"));
  if (max_bias) alibi->set_max_bias(*max_bias);
  return absl::OkStatus();
}

absl::Status FillT5(const Flags& f, v1::T5Bias* t5) {
  ASSIGN_OR_RETURN(auto buckets, f.OptInt("num-buckets"));
  if (buckets) t5->set_num_buckets(static_cast<int32_t>(*buckets));
  ASSIGN_OR_RETURN(auto max_distance, f.OptInt("max-distance"));
  if (max_distance) t5->set_max_distance(static_cast<int32_t>(*max_distance));
  ASSIGN_OR_RETURN(const bool bidirectional, f.Bool("bidirectional"));
  t5->set_bidirectional(bidirectional);
  t5->set_table(f.Str("table"));
  return absl::OkStatus();
}

absl::Status FillShaw(const Flags& f, v1::ShawRelative* shaw) {
  ASSIGN_OR_RETURN(auto k, f.OptInt("max-relative-position"));
  if (!k) return absl::InvalidArgumentError("--scheme shaw needs --max-relative-position");
  shaw->set_max_relative_position(static_cast<int32_t>(*k));
  shaw->set_table(f.Str("table"));
  return absl::OkStatus();
}

absl::Status FillDeberta(const Flags& f, v1::DebertaRelative* deberta) {
  ASSIGN_OR_RETURN(auto buckets, f.OptInt("position-buckets"));
  if (buckets) deberta->set_position_buckets(static_cast<int32_t>(*buckets));
  ASSIGN_OR_RETURN(auto max_pos, f.OptInt("max-relative-positions"));
  if (max_pos) deberta->set_max_relative_positions(static_cast<int32_t>(*max_pos));
  return absl::OkStatus();
}

// "0,5,9" (or "0-5-9"): node ids.
absl::StatusOr<std::vector<int64_t>> ParseIds(const std::string& flag, const std::string& text) {
  std::vector<int64_t> ids;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a node id"));
    }
    ids.push_back(v);
  }
  return ids;
}

// "0-1,1-2" and "0,1,1,2" both list the pairs (0,1), (1,2).
absl::StatusOr<std::vector<int64_t>> ParseEdges(const std::string& text) {
  std::vector<int64_t> edges;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(",- "), absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--edges: '", part, "' is not a node id"));
    }
    edges.push_back(v);
  }
  if (edges.size() % 2 != 0)
    return absl::InvalidArgumentError("--edges has an odd number of node ids");
  return edges;
}

// --length and --dim, else the model's max_position_embeddings and rotary width.
absl::Status FillTableSize(const Flags& f, const Hf& hf, v1::TableRequest* request) {
  ASSIGN_OR_RETURN(auto length, f.OptInt("length"));
  if (!length) {
    if (!hf || hf->max_position_embeddings <= 0)
      return absl::InvalidArgumentError("table needs --length");
    length = hf->max_position_embeddings;
  }
  request->set_length(*length);
  ASSIGN_OR_RETURN(auto dim, f.OptInt("dim"));
  if (!dim && hf)
    dim = request->rope().has_rotary_dim() ? request->rope().rotary_dim() : hf->rotary_dim;
  if (!dim) return absl::InvalidArgumentError("table needs --dim");
  request->set_dim(static_cast<int32_t>(*dim));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::BiasRequest> BuildBiasRequest(const Flags& f) {
  v1::BiasRequest request;
  request.set_request_id(f.Str("request-id"));
  ASSIGN_OR_RETURN(const auto lengths, RequiredInts(f, "query-length", "key-length",
                                                    "bias needs --query-length and --key-length"));
  request.set_query_length(lengths.first);
  request.set_key_length(lengths.second);
  ASSIGN_OR_RETURN(auto offset, f.OptInt("query-offset"));
  if (offset) request.set_query_offset(*offset);
  const std::string scheme = f.Str("scheme", "alibi");
  if (scheme == "alibi") {
    RETURN_IF_ERROR(FillAlibi(f, request.mutable_alibi()));
  } else if (scheme == "t5") {
    RETURN_IF_ERROR(FillT5(f, request.mutable_t5()));
  } else if (scheme == "shaw") {
    RETURN_IF_ERROR(FillShaw(f, request.mutable_shaw()));
  } else if (scheme == "deberta") {
    RETURN_IF_ERROR(FillDeberta(f, request.mutable_deberta()));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--scheme '", scheme, "' is not alibi, t5, shaw or deberta"));
  }
  ASSIGN_OR_RETURN(const std::optional<v1::DType> dtype, OptDType(f));
  if (f.Has("scores")) {
    ASSIGN_OR_RETURN(*request.mutable_scores(), TensorFromNpy(f.Str("scores"), dtype));
  }
  if (f.Has("query")) {
    if (scheme != "shaw") return absl::InvalidArgumentError("--query is for --scheme shaw");
    ASSIGN_OR_RETURN(*request.mutable_query(), TensorFromNpy(f.Str("query"), dtype));
  }
  return request;
}

absl::StatusOr<v1::GraphRequest> BuildGraphRequest(const Flags& f) {
  v1::GraphRequest request;
  request.set_request_id(f.Str("request-id"));
  ASSIGN_OR_RETURN(const auto nodes, f.OptInt("nodes"));
  if (!nodes) return absl::InvalidArgumentError("graph needs --nodes");
  request.set_num_nodes(*nodes);
  const std::string encoding = f.Str("encoding", "laplacian");
  if (encoding == "laplacian") {
    ASSIGN_OR_RETURN(const auto k, f.OptInt("k"));
    if (!k) return absl::InvalidArgumentError("graph --encoding laplacian needs --k");
    request.set_k(static_cast<int32_t>(*k));
    ASSIGN_OR_RETURN(const bool normalized, f.Bool("normalized"));
    request.set_normalized(normalized);
  } else if (encoding == "random_walk") {
    request.set_encoding(v1::RANDOM_WALK);
    ASSIGN_OR_RETURN(const auto steps, f.OptInt("walk-length"));
    if (!steps)
      return absl::InvalidArgumentError("graph --encoding random_walk needs --walk-length");
    request.set_walk_length(static_cast<int32_t>(*steps));
  } else if (encoding == "shortest_path") {
    request.set_encoding(v1::SHORTEST_PATH);
    ASSIGN_OR_RETURN(const std::vector<int64_t> anchors, ParseIds("anchors", f.Str("anchors")));
    if (anchors.empty()) {
      return absl::InvalidArgumentError("graph --encoding shortest_path needs --anchors 0,5,...");
    }
    request.mutable_anchors()->Add(anchors.begin(), anchors.end());
  } else if (encoding == "tree") {
    request.set_encoding(v1::TREE);
    ASSIGN_OR_RETURN(const auto depth_children,
                     RequiredInts(f, "max-depth", "max-children",
                                  "graph --encoding tree needs --max-depth and --max-children"));
    request.set_max_depth(static_cast<int32_t>(depth_children.first));
    request.set_max_children(static_cast<int32_t>(depth_children.second));
    ASSIGN_OR_RETURN(const std::vector<int64_t> parents, ParseIds("parents", f.Str("parents")));
    request.mutable_parents()->Add(parents.begin(), parents.end());
    ASSIGN_OR_RETURN(const auto decay, f.OptDouble("depth-decay"));
    if (decay) request.set_depth_decay(*decay);
    request.set_table(f.Str("table"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--encoding '", encoding, "' is not laplacian, random_walk, shortest_path or tree"));
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> edges, ParseEdges(f.Str("edges")));
  request.mutable_edges()->Add(edges.begin(), edges.end());
  if (f.Has("input")) {
    ASSIGN_OR_RETURN(*request.mutable_input(), TensorFromNpy(f.Str("input"), std::nullopt));
  }
  return request;
}

absl::StatusOr<v1::TableRequest> BuildTableRequest(const Flags& f) {
  v1::TableRequest request;
  Hf hf;
  const std::string scheme = f.Str("scheme", f.Has("hf-config") ? "rope" : "sinusoidal");
  if (scheme == "sinusoidal") {
    RETURN_IF_ERROR(FillSinusoidal(f, request.mutable_sinusoidal()));
  } else if (scheme == "rope") {
    RETURN_IF_ERROR(FillRope(f, request.mutable_rope(), &hf));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--scheme '", scheme, "' is not sinusoidal or rope"));
  }
  RETURN_IF_ERROR(FillTableSize(f, hf, &request));
  ASSIGN_OR_RETURN(const std::optional<v1::DType> dtype, OptDType(f));
  if (dtype) request.set_dtype(*dtype);
  ASSIGN_OR_RETURN(auto rows, f.OptInt("rows-per-chunk"));
  if (rows) request.set_rows_per_chunk(*rows);
  // Row r is position first + r * step (clamped): Transformer-XL's pos_emb is
  // --first-position KLEN-1 --position-step -1 --clamp-position CLAMP_LEN --layout concatenated.
  ASSIGN_OR_RETURN(auto first, f.OptInt("first-position"));
  if (first) request.set_first_position(*first);
  ASSIGN_OR_RETURN(auto step, f.OptInt("position-step"));
  if (step) request.set_position_step(*step);
  ASSIGN_OR_RETURN(auto clamp, f.OptInt("clamp-position"));
  if (clamp) request.set_clamp_position(*clamp);
  return request;
}

}  // namespace posenc::client
