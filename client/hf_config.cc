#include "client/hf_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

namespace posenc::client {
namespace {

using nlohmann::json;
namespace v1 = ::posenc::v1;

// Reads optional numbers, treating an absent key and JSON null alike (HF writes both).
class JsonReader {
 public:
  JsonReader(const json& object, std::string source, std::string prefix)
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool Has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  absl::StatusOr<std::optional<double>> Number(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return std::optional<double>();
    if (!it->is_number()) return TypeError(key, "a number", *it);
    return std::optional<double>(it->get<double>());
  }

  absl::StatusOr<std::optional<int64_t>> Int(const char* key) const {
    ASSIGN_OR_RETURN(std::optional<double> v, Number(key));
    if (!v) return std::optional<int64_t>();
    if (*v != std::floor(*v) || std::fabs(*v) > 9.0e15) {
      return TypeError(key, "an integer", object_.at(key));
    }
    return std::optional<int64_t>(static_cast<int64_t>(*v));
  }

  absl::StatusOr<std::optional<bool>> Bool(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return std::optional<bool>();
    if (!it->is_boolean()) return TypeError(key, "true or false", *it);
    return std::optional<bool>(it->get<bool>());
  }

  absl::StatusOr<std::optional<std::string>> String(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return std::optional<std::string>();
    if (!it->is_string()) return TypeError(key, "a string", *it);
    return std::optional<std::string>(it->get<std::string>());
  }

  absl::StatusOr<std::vector<double>> NumberList(const char* key) const {
    auto it = object_.find(key);
    std::vector<double> out;
    if (it == object_.end() || it->is_null()) return out;
    if (!it->is_array()) return TypeError(key, "a list of numbers", *it);
    for (const json& v : *it) {
      if (!v.is_number()) return TypeError(key, "a list of numbers", *it);
      out.push_back(v.get<double>());
    }
    return out;
  }

  absl::Status Missing(const char* key, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", Name(key), " is required ", why));
  }
  std::string Name(const char* key) const { return absl::StrCat(prefix_, key); }
  const std::string& source() const { return source_; }

 private:
  absl::Status TypeError(const char* key, absl::string_view expected, const json& got) const {
    std::string text = got.dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": ", Name(key), " is ", text, "; expected ", expected));
  }

  const json& object_;
  std::string source_;
  std::string prefix_;
};

// What every scaling type's parser may read: the scaling object, the top-level config, and
// the factor and lengths HF takes from either (read before any type's own keys, in this order).
struct ScalingInputs {
  const JsonReader& s;    // rope_scaling (or rope_parameters)
  const JsonReader& top;  // the whole config
  int64_t rotary_dim;
  std::optional<double> factor;
  std::optional<int64_t> original;      // s.original_max_position_embeddings
  std::optional<int64_t> top_original;  // top-level original_max_position_embeddings
  std::optional<int64_t> max_pos;       // top-level max_position_embeddings
};

// Copies the optional `key` of `s` into `out` through `set` (absent or null: unchanged).
template <typename T>
absl::Status CopyOptional(const JsonReader& s, const char* key, v1::RopeScaling* out,
                          void (v1::RopeScaling::*set)(T)) {
  std::optional<T> value;
  if constexpr (std::is_same_v<T, bool>) {
    ASSIGN_OR_RETURN(value, s.Bool(key));
  } else {
    ASSIGN_OR_RETURN(value, s.Number(key));
  }
  if (value) (out->*set)(*value);
  return absl::OkStatus();
}

// One parser per HF rope_type, as modeling_rope_utils.py keeps one
// _compute_*_rope_parameters each; each checks what its type requires.

absl::Status ParseLinear(const ScalingInputs& in, v1::RopeScaling* out) {
  if (!in.factor) return in.s.Missing("factor", "for linear scaling");
  out->set_factor(*in.factor);
  return absl::OkStatus();
}

// HF's dynamic NTK grows the base once the sequence passes the model's
// max_position_embeddings.
absl::Status ParseDynamic(const ScalingInputs& in, v1::RopeScaling* out) {
  if (!in.factor) return in.s.Missing("factor", "for dynamic scaling");
  out->set_factor(*in.factor);
  if (!in.max_pos) return in.top.Missing("max_position_embeddings", "for dynamic scaling");
  out->set_max_position_embeddings(*in.max_pos);
  if (in.original) out->set_original_max_position_embeddings(*in.original);
  return absl::OkStatus();
}

absl::Status ParseYarn(const ScalingInputs& in, v1::RopeScaling* out) {
  // HF: original length from rope_scaling, else the model's max_position_embeddings; no
  // factor means max_position_embeddings / original.
  const std::optional<int64_t> orig = in.original ? in.original : in.max_pos;
  std::optional<double> factor = in.factor;
  if (!factor && orig && in.max_pos && *orig > 0) {
    factor = static_cast<double>(*in.max_pos) / static_cast<double>(*orig);
  }
  if (!factor) return in.s.Missing("factor", "for yarn scaling");
  out->set_factor(*factor);
  if (orig) out->set_original_max_position_embeddings(*orig);
  if (in.max_pos) out->set_max_position_embeddings(*in.max_pos);
  RETURN_IF_ERROR(CopyOptional(in.s, "beta_fast", out, &v1::RopeScaling::set_beta_fast));
  RETURN_IF_ERROR(CopyOptional(in.s, "beta_slow", out, &v1::RopeScaling::set_beta_slow));
  RETURN_IF_ERROR(CopyOptional(in.s, "mscale", out, &v1::RopeScaling::set_mscale));
  RETURN_IF_ERROR(CopyOptional(in.s, "mscale_all_dim", out, &v1::RopeScaling::set_mscale_all_dim));
  return CopyOptional(in.s, "truncate", out, &v1::RopeScaling::set_truncate);
}

absl::Status ParseLlama3(const ScalingInputs& in, v1::RopeScaling* out) {
  if (!in.factor) return in.s.Missing("factor", "for llama3 scaling");
  if (!in.original) return in.s.Missing("original_max_position_embeddings", "for llama3 scaling");
  out->set_factor(*in.factor);
  out->set_original_max_position_embeddings(*in.original);
  RETURN_IF_ERROR(
      CopyOptional(in.s, "low_freq_factor", out, &v1::RopeScaling::set_low_freq_factor));
  return CopyOptional(in.s, "high_freq_factor", out, &v1::RopeScaling::set_high_freq_factor);
}

absl::Status ParseLongRope(const ScalingInputs& in, v1::RopeScaling* out) {
  ASSIGN_OR_RETURN(std::vector<double> short_factor, in.s.NumberList("short_factor"));
  ASSIGN_OR_RETURN(std::vector<double> long_factor, in.s.NumberList("long_factor"));
  const size_t half = static_cast<size_t>(in.rotary_dim / 2);
  if (short_factor.size() != half || long_factor.size() != half) {
    return absl::InvalidArgumentError(absl::StrCat(
        in.top.source(), ": ", in.s.Name("short_factor"), " and ", in.s.Name("long_factor"),
        " have ", short_factor.size(), " and ", long_factor.size(), " entries; rotary_dim ",
        in.rotary_dim, " needs ", half, " each"));
  }
  out->mutable_short_factor()->Add(short_factor.begin(), short_factor.end());
  out->mutable_long_factor()->Add(long_factor.begin(), long_factor.end());
  // HF (Phi-3): a top-level original_max_position_embeddings wins, and then the factor
  // is max_position_embeddings / original, whatever rope_scaling.factor says.
  std::optional<double> factor = in.factor;
  if (in.top_original) {
    out->set_original_max_position_embeddings(*in.top_original);
    if (in.max_pos && *in.top_original > 0) {
      factor = static_cast<double>(*in.max_pos) / static_cast<double>(*in.top_original);
    }
  } else if (in.original || in.max_pos) {
    out->set_original_max_position_embeddings(in.original ? *in.original : *in.max_pos);
  } else {
    return in.s.Missing("original_max_position_embeddings", "for longrope scaling");
  }
  if (in.max_pos) out->set_max_position_embeddings(*in.max_pos);
  if (factor) out->set_factor(*factor);
  return absl::OkStatus();
}

// Gemma 4's proportional RoPE: partial_rotary_factor of the scaling object is the fraction of
// the slots that turn; factor divides every frequency (default 1).
absl::Status ParseProportional(const ScalingInputs& in, v1::RopeScaling* out) {
  if (in.factor) out->set_factor(*in.factor);
  ASSIGN_OR_RETURN(std::optional<double> proportion, in.s.Number("partial_rotary_factor"));
  if (proportion) out->set_rope_proportion(*proportion);
  return absl::OkStatus();
}

// HF's rope_type names; a null parser: the default rotation, nothing to scale.
struct ScalingRule {
  const char* name;
  v1::RopeScalingType type;
  absl::Status (*parse)(const ScalingInputs& in, v1::RopeScaling* out);
};
constexpr ScalingRule kScalingRules[] = {
    {"default", v1::NONE, nullptr},
    {"none", v1::NONE, nullptr},
    // Qwen2-VL's multimodal rope: for text, all three position ids are equal and it reduces
    // to the default rotation (HF computes its inverse frequencies with the default rule too).
    {"mrope", v1::NONE, nullptr},
    {"linear", v1::LINEAR, ParseLinear},
    {"dynamic", v1::DYNAMIC, ParseDynamic},
    {"yarn", v1::YARN, ParseYarn},
    {"llama3", v1::LLAMA3, ParseLlama3},
    {"longrope", v1::LONGROPE, ParseLongRope},
    {"su", v1::LONGROPE, ParseLongRope},
    {"proportional", v1::PROPORTIONAL, ParseProportional},
};

absl::StatusOr<const ScalingRule*> ScalingRuleOf(const std::string& name, const std::string& source,
                                                 const std::string& key) {
  const std::string n = absl::AsciiStrToLower(name);
  for (const ScalingRule& rule : kScalingRules) {
    if (n == rule.name) return &rule;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", key, " '", name,
                   "' is not supported; expected default, linear, dynamic, yarn, llama3, "
                   "longrope, su or proportional"));
}

// The scaling's rule from "rope_type", else the legacy "type"; nullptr when neither is
// there and `type_required` is false.
absl::StatusOr<const ScalingRule*> FindScalingRule(const JsonReader& s, bool type_required) {
  ASSIGN_OR_RETURN(std::optional<std::string> type_name, s.String("rope_type"));
  std::string type_key = s.Name("rope_type");
  if (!type_name) {
    ASSIGN_OR_RETURN(type_name, s.String("type"));
    type_key = s.Name("type");
  }
  if (!type_name && !type_required) return nullptr;
  if (!type_name) return s.Missing("rope_type", "(or the legacy \"type\")");
  return ScalingRuleOf(*type_name, s.source(), type_key);
}

// Qwen2-VL's mrope_section and Qwen3-VL's mrope_interleaved, where the scaling object has them.
absl::Status ReadMrope(const JsonReader& s, v1::Rope* rope) {
  ASSIGN_OR_RETURN(std::vector<double> sections, s.NumberList("mrope_section"));
  for (double v : sections) {
    if (v != std::floor(v) || v < 0 || v > 1e6) {
      return absl::InvalidArgumentError(absl::StrCat(s.source(), ": ", s.Name("mrope_section"),
                                                     " holds ", v, "; expected integers >= 0"));
    }
    rope->add_mrope_section(static_cast<int32_t>(v));
  }
  ASSIGN_OR_RETURN(std::optional<bool> interleaved, s.Bool("mrope_interleaved"));
  if (interleaved) rope->set_mrope_interleaved(*interleaved);
  return absl::OkStatus();
}

// Fills rope.scaling from HF's rope_scaling (or transformers 5's rope_parameters) object.
// `type_required` is false for rope_parameters, which may carry only rope_theta.
absl::Status ParseScaling(const json& scaling_json, const JsonReader& top, const std::string& key,
                          bool type_required, int64_t rotary_dim, v1::Rope* rope) {
  if (!scaling_json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(top.source(), ": ", key, " is ", scaling_json.dump(), "; expected an object"));
  }
  const JsonReader s(scaling_json, top.source(), key + ".");
  RETURN_IF_ERROR(ReadMrope(s, rope));
  ASSIGN_OR_RETURN(const ScalingRule* rule, FindScalingRule(s, type_required));
  if (rule == nullptr || rule->parse == nullptr) return absl::OkStatus();
  v1::RopeScaling* out = rope->mutable_scaling();
  out->set_type(rule->type);
  ASSIGN_OR_RETURN(const std::optional<double> factor, s.Number("factor"));
  ASSIGN_OR_RETURN(const std::optional<int64_t> original,
                   s.Int("original_max_position_embeddings"));
  ASSIGN_OR_RETURN(const std::optional<int64_t> top_original,
                   top.Int("original_max_position_embeddings"));
  ASSIGN_OR_RETURN(const std::optional<int64_t> max_pos, top.Int("max_position_embeddings"));
  if (rule->type == v1::YARN || rule->type == v1::LONGROPE) {  // the types that read it
    RETURN_IF_ERROR(
        CopyOptional(s, "attention_factor", out, &v1::RopeScaling::set_attention_factor));
  }
  RETURN_IF_ERROR(rule->parse({s, top, rotary_dim, factor, original, top_original, max_pos}, out));
  if (out->has_factor() && !(out->factor() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(top.source(), ": ", s.Name("factor"), " is ",
                                                   out->factor(), "; it must be > 0"));
  }
  return absl::OkStatus();
}

// The sizes: GPT-2 style names (n_head, n_embd, n_positions) appear in GPT-J configs.
// `hidden` receives hidden_size (or n_embd) for the head width.
absl::Status ReadSizes(const JsonReader& top, HfRopeConfig* out, std::optional<int64_t>* hidden) {
  ASSIGN_OR_RETURN(std::optional<int64_t> heads, top.Int("num_attention_heads"));
  if (!heads) {
    ASSIGN_OR_RETURN(heads, top.Int("n_head"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads, top.Int("num_key_value_heads"));
  ASSIGN_OR_RETURN(*hidden, top.Int("hidden_size"));
  if (!*hidden) {
    ASSIGN_OR_RETURN(*hidden, top.Int("n_embd"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> max_pos, top.Int("max_position_embeddings"));
  if (!max_pos) {
    ASSIGN_OR_RETURN(max_pos, top.Int("n_positions"));
  }
  out->num_attention_heads = heads.value_or(0);
  out->num_key_value_heads = kv_heads.value_or(out->num_attention_heads);
  out->max_position_embeddings = max_pos.value_or(0);
  return absl::OkStatus();
}

// rope_theta | rotary_emb_base | rope_parameters.rope_theta, default 10000; must be > 0.
absl::StatusOr<double> ReadTheta(const JsonReader& top, const json* rope_parameters) {
  ASSIGN_OR_RETURN(std::optional<double> theta, top.Number("rope_theta"));
  if (!theta) {
    ASSIGN_OR_RETURN(theta, top.Number("rotary_emb_base"));
  }
  if (!theta && rope_parameters != nullptr) {
    ASSIGN_OR_RETURN(
        theta, JsonReader(*rope_parameters, top.source(), "rope_parameters.").Number("rope_theta"));
  }
  const double base = theta.value_or(10000.0);
  if (!(base > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(top.source(), ": rope_theta is ", base, "; it must be > 0"));
  }
  return base;
}

// Head width: DeepSeek's MLA rotates only the qk_rope_head_dim part of each head.
absl::StatusOr<int64_t> ReadHeadDim(const JsonReader& top, std::optional<int64_t> hidden,
                                    int64_t heads) {
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, top.Int("qk_rope_head_dim"));
  if (!head_dim) {
    ASSIGN_OR_RETURN(head_dim, top.Int("head_dim"));
  }
  if (!head_dim) {
    if (!hidden || heads <= 0)
      return top.Missing("head_dim", "(or hidden_size and num_attention_heads)");
    head_dim = *hidden / heads;  // Python's //
  }
  if (*head_dim < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(top.source(), ": head_dim is ", *head_dim, "; it must be >= 2"));
  }
  return *head_dim;
}

// Rotary width: rotary_dim, else int(head_dim * partial_rotary_factor or rotary_pct).
absl::StatusOr<int64_t> ReadRotaryDim(const JsonReader& top, int64_t head_dim,
                                      const JsonReader* params) {
  ASSIGN_OR_RETURN(std::optional<int64_t> rotary_dim, top.Int("rotary_dim"));
  std::string rotary_key = "rotary_dim";
  if (!rotary_dim) {
    ASSIGN_OR_RETURN(std::optional<double> fraction, top.Number("partial_rotary_factor"));
    rotary_key = "partial_rotary_factor";
    if (!fraction) {
      ASSIGN_OR_RETURN(fraction, top.Number("rotary_pct"));
      rotary_key = "rotary_pct";
    }
    if (!fraction && params != nullptr) {
      // transformers 5 keeps it in rope_parameters (not for proportional, which reads it as
      // the share of slots that turn).
      ASSIGN_OR_RETURN(fraction, params->Number("partial_rotary_factor"));
      rotary_key = params->Name("partial_rotary_factor");
    }
    if (fraction && !(*fraction > 0 && *fraction <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(top.source(), ": ", rotary_key, " is ",
                                                     *fraction, "; it must be in (0, 1]"));
    }
    // int() truncates, as in HF.
    rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * fraction.value_or(1.0));
  }
  if (*rotary_dim < 2 || *rotary_dim > head_dim || *rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(top.source(), ": ", rotary_key, " gives rotary_dim ", *rotary_dim,
                     " for head_dim ", head_dim, "; it must be even and in [2, head_dim]"));
  }
  return *rotary_dim;
}

// Pairing: GPT-J and CodeGen rotate interleaved pairs; DeepSeek V2/V3 store their rope
// features interleaved too (HF's rope_interleave, default true for them).
absl::StatusOr<v1::RopeStyle> ReadStyle(const JsonReader& top, const std::string& family) {
  // Llama 4 rotates complex pairs; GLM interleaves its cos/sin (repeat_interleave).
  bool interleaved = family == "gptj" || family == "codegen" || family == "deepseek_v2" ||
                     family == "deepseek_v3" || family == "llama4" || family == "glm" ||
                     family == "glm4";
  ASSIGN_OR_RETURN(std::optional<bool> rope_interleave, top.Bool("rope_interleave"));
  if (rope_interleave) interleaved = *rope_interleave;
  return interleaved ? v1::GPTJ : v1::NEOX;
}

// The model family: model_type without a "_text" suffix (gemma3_text is gemma3's tower).
std::string FamilyOf(const std::string& model_type) {
  const std::string suffix = "_text";
  if (model_type.size() > suffix.size() &&
      model_type.compare(model_type.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return model_type.substr(0, model_type.size() - suffix.size());
  }
  return model_type;
}

// Gemma3TextConfig's and Gemma4TextConfig's defaults for the keys RoPE reads: the
// published Gemma configs leave most of them out.
json FamilyDefaults(const std::string& family) {
  if (family == "gemma3") {
    return json{{"head_dim", 256},
                {"num_attention_heads", 8},
                {"num_key_value_heads", 4},
                {"rope_theta", 1000000.0},
                {"rope_local_base_freq", 10000.0},
                {"max_position_embeddings", 131072}};
  }
  if (family == "gemma4") {
    return json{{"head_dim", 256},
                {"global_head_dim", 512},
                {"num_attention_heads", 8},
                {"num_key_value_heads", 4},
                {"max_position_embeddings", 131072},
                {"rope_parameters",
                 {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                  {"full_attention",
                   {{"rope_type", "proportional"},
                    {"partial_rotary_factor", 0.25},
                    {"rope_theta", 1000000.0}}}}}};
  }
  return json::object();
}

bool HasLayerTypes(const std::string& family) { return family == "gemma3" || family == "gemma4"; }

// The layer type asked for, checked: "" for families without layer types.
absl::StatusOr<std::string> ResolveLayerType(const std::string& source, const std::string& family,
                                             const json* rope_parameters, absl::string_view asked) {
  const bool keyed = rope_parameters != nullptr && rope_parameters->contains("full_attention");
  if (!HasLayerTypes(family) && !keyed) {
    if (asked.empty()) return std::string();
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": layer_type '", asked, "' is given, but model_type '", family,
                     "' has no per-layer RoPE (gemma3 and gemma4 have)"));
  }
  const std::string layer(asked.empty() ? "full_attention" : asked);
  if (layer != "full_attention" && layer != "sliding_attention") {
    return absl::InvalidArgumentError(absl::StrCat(source, ": layer_type '", layer,
                                                   "' is unknown; expected full_attention or "
                                                   "sliding_attention"));
  }
  return layer;
}

}  // namespace

namespace {

// The config with a multimodal model's text_config merged over it (its language model's
// keys win; a null there leaves the top-level value), then the family's defaults where
// config.json is silent, as its transformers config class assumes them.
json MergedConfig(const json& original) {
  json config = original;
  std::string family;
  if (auto it = original.find("model_type"); it != original.end() && it->is_string()) {
    family = it->get<std::string>();
  }
  if (auto it = original.find("text_config"); it != original.end() && it->is_object()) {
    for (const auto& [key, value] : it->items()) {
      if (value.is_null() && config.contains(key)) continue;
      if (key != "model_type" || family.empty()) config[key] = value;
    }
  }
  if (auto it = config.find("model_type"); it != config.end() && it->is_string()) {
    const json defaults = FamilyDefaults(FamilyOf(it->get<std::string>()));
    for (const auto& [key, value] : defaults.items()) {
      if (auto have = config.find(key); have == config.end() || have->is_null())
        config[key] = value;
    }
  }
  return config;
}

// transformers 5's rope_parameters object (theta and scaling in one), which Gemma keys by
// layer type; null when the config has none.
struct RopeParameters {
  const json* object = nullptr;
  std::string key = "rope_parameters";
};

absl::StatusOr<RopeParameters> FindRopeParameters(const json& config, const std::string& source,
                                                  const std::string& family,
                                                  absl::string_view layer_type, HfRopeConfig* out) {
  RopeParameters p;
  if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object()) {
    p.object = &*it;
  }
  ASSIGN_OR_RETURN(out->layer_type, ResolveLayerType(source, family, p.object, layer_type));
  if (p.object != nullptr && !out->layer_type.empty() && p.object->contains(out->layer_type)) {
    p.object = &p.object->at(out->layer_type);
    p.key = "rope_parameters." + out->layer_type;
    if (!p.object->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": rope_parameters.", out->layer_type, " is not an object"));
    }
  }
  return p;
}

// rope theta of the chosen layer type: Gemma 3's sliding layers turn at
// rope_local_base_freq (default 10000), per-layer rope_parameters carry their own.
absl::StatusOr<double> ReadLayerBase(const JsonReader& top, const std::string& family,
                                     const HfRopeConfig& out, const RopeParameters& params) {
  const bool sliding = out.layer_type == "sliding_attention";
  std::optional<double> local_base;
  if (sliding) {
    ASSIGN_OR_RETURN(local_base, top.Number("rope_local_base_freq"));
  }
  double base;
  if (local_base) {
    base = *local_base;
  } else if (sliding && family == "gemma3" && !top.Has("rope_local_base_freq") &&
             params.object == nullptr) {
    base = 10000.0;  // Gemma3TextConfig's default rope_local_base_freq
  } else if (params.object != nullptr && params.key != "rope_parameters") {
    const JsonReader p(*params.object, top.source(), params.key + ".");
    ASSIGN_OR_RETURN(std::optional<double> theta, p.Number("rope_theta"));
    if (theta) {
      base = *theta;
    } else {
      ASSIGN_OR_RETURN(base, ReadTheta(top, nullptr));
    }
  } else {
    ASSIGN_OR_RETURN(base, ReadTheta(top, params.object));
  }
  if (!(base > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(top.source(), ": ", local_base ? "rope_local_base_freq" : "rope_theta", " is ",
                     base, "; it must be > 0"));
  }
  return base;
}

// Head width and rotary width. Proportional scaling reads partial_rotary_factor itself;
// otherwise rope_parameters' one is the partial rotary of HF v5.
absl::Status ReadWidths(const JsonReader& top, const std::string& family,
                        std::optional<int64_t> hidden, const RopeParameters& params,
                        HfRopeConfig* out) {
  ASSIGN_OR_RETURN(out->head_dim, ReadHeadDim(top, hidden, out->num_attention_heads));
  if (family == "gemma4" && out->layer_type == "full_attention") {
    // Gemma 4's full-attention layers have wider heads.
    ASSIGN_OR_RETURN(std::optional<int64_t> global, top.Int("global_head_dim"));
    if (global) out->head_dim = *global;
  }
  std::optional<JsonReader> params_reader;
  if (params.object != nullptr) {
    params_reader.emplace(*params.object, top.source(), params.key + ".");
    ASSIGN_OR_RETURN(std::optional<std::string> type_name, params_reader->String("rope_type"));
    if (type_name && absl::AsciiStrToLower(*type_name) == "proportional") params_reader.reset();
  }
  ASSIGN_OR_RETURN(out->rotary_dim,
                   ReadRotaryDim(top, out->head_dim, params_reader ? &*params_reader : nullptr));
  if (out->rotary_dim != out->head_dim) {
    out->rope.set_rotary_dim(static_cast<int32_t>(out->rotary_dim));
  }
  return absl::OkStatus();
}

// The scaling (rope_scaling, transformers 4; else rope_parameters, transformers 5) and the
// multimodal sections, which the Qwen-VL families need from either.
absl::Status ReadScalingAndMrope(const json& config, const JsonReader& top,
                                 const std::string& family, const RopeParameters& params,
                                 HfRopeConfig* out) {
  const bool sliding = out->layer_type == "sliding_attention";
  if (sliding && family == "gemma3" && top.Has("rope_scaling")) {
    // HF Gemma 3: rope_scaling is the global layers'; sliding layers rotate by default.
  } else if (top.Has("rope_scaling")) {
    RETURN_IF_ERROR(ParseScaling(config.at("rope_scaling"), top, "rope_scaling", true,
                                 out->rotary_dim, &out->rope));
  } else if (params.object != nullptr) {
    RETURN_IF_ERROR(
        ParseScaling(*params.object, top, params.key, false, out->rotary_dim, &out->rope));
  }
  if (family == "qwen3_vl" && out->rope.mrope_section_size() > 0) {
    out->rope.set_mrope_interleaved(true);
  }
  const bool multimodal = family == "qwen2_vl" || family == "qwen2_5_vl" || family == "qwen3_vl";
  if (!multimodal || out->rope.mrope_section_size() > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      top.source(), ": model_type ", out->model_type,
      " needs mrope_section, and neither rope_scaling.mrope_section (transformers 4) nor ",
      params.key,
      ".mrope_section (transformers 5) is there; add the model's sections (e.g. "
      "\"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 24]} for "
      "Qwen2-VL and Qwen2.5-VL 7B) to its config.json"));
}

}  // namespace

absl::StatusOr<HfRopeConfig> RopeFromHfConfig(const json& original, absl::string_view source_view,
                                              absl::string_view layer_type) {
  const std::string source(source_view);
  if (!original.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the top level is not a JSON object"));
  }
  const json config = MergedConfig(original);
  const JsonReader top(config, source, "");
  HfRopeConfig out;
  ASSIGN_OR_RETURN(std::optional<std::string> model_type, top.String("model_type"));
  out.model_type = model_type.value_or("");
  const std::string family = FamilyOf(out.model_type);
  std::optional<int64_t> hidden;
  RETURN_IF_ERROR(ReadSizes(top, &out, &hidden));
  ASSIGN_OR_RETURN(const RopeParameters params,
                   FindRopeParameters(config, source, family, layer_type, &out));
  ASSIGN_OR_RETURN(const double base, ReadLayerBase(top, family, out, params));
  out.rope.set_base(base);
  RETURN_IF_ERROR(ReadWidths(top, family, hidden, params, &out));
  ASSIGN_OR_RETURN(const v1::RopeStyle style, ReadStyle(top, family));
  out.rope.set_style(style);
  RETURN_IF_ERROR(ReadScalingAndMrope(config, top, family, params, &out));
  return out;
}

absl::StatusOr<HfRopeConfig> LoadHfRopeConfig(const std::string& path,
                                              absl::string_view layer_type) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(errno));
    if (errno == ENOENT || errno == ENOTDIR) return absl::NotFoundError(msg);
    if (errno == EACCES || errno == EPERM) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return RopeFromHfConfig(config, path, layer_type);
}

}  // namespace posenc::client
