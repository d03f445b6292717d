#include "client/hf_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>

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
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": ", Name(key), " is required ", why));
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

absl::StatusOr<v1::RopeScalingType> ScalingTypeFromName(const std::string& name,
                                                        const std::string& source,
                                                        const std::string& key) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "default" || n == "none") return v1::NONE;
  // Qwen2-VL's multimodal rope: for text, all three position ids are equal and it reduces to
  // the default rotation (HF computes its inverse frequencies with the default rule too).
  if (n == "mrope") return v1::NONE;
  if (n == "linear") return v1::LINEAR;
  if (n == "dynamic") return v1::DYNAMIC;
  if (n == "yarn") return v1::YARN;
  if (n == "llama3") return v1::LLAMA3;
  if (n == "longrope" || n == "su") return v1::LONGROPE;
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", key, " '", name,
                   "' is not supported; expected default, linear, dynamic, yarn, llama3, "
                   "longrope or su"));
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
  ASSIGN_OR_RETURN(std::optional<std::string> type_name, s.String("rope_type"));
  std::string type_key = s.Name("rope_type");
  if (!type_name) {
    ASSIGN_OR_RETURN(type_name, s.String("type"));
    type_key = s.Name("type");
  }
  if (!type_name && !type_required) return absl::OkStatus();
  if (!type_name) return s.Missing("rope_type", "(or the legacy \"type\")");
  ASSIGN_OR_RETURN(const v1::RopeScalingType type,
                   ScalingTypeFromName(*type_name, top.source(), type_key));
  if (type == v1::NONE) return absl::OkStatus();

  v1::RopeScaling* out = rope->mutable_scaling();
  out->set_type(type);
  ASSIGN_OR_RETURN(std::optional<double> factor, s.Number("factor"));
  ASSIGN_OR_RETURN(std::optional<int64_t> original, s.Int("original_max_position_embeddings"));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_original, top.Int("original_max_position_embeddings"));
  ASSIGN_OR_RETURN(std::optional<int64_t> max_pos, top.Int("max_position_embeddings"));
  ASSIGN_OR_RETURN(std::optional<double> attention_factor, s.Number("attention_factor"));
  if (attention_factor) out->set_attention_factor(*attention_factor);

  switch (type) {
    case v1::LINEAR:
      if (!factor) return s.Missing("factor", "for linear scaling");
      out->set_factor(*factor);
      break;
    case v1::DYNAMIC:
      if (!factor) return s.Missing("factor", "for dynamic scaling");
      out->set_factor(*factor);
      // HF's dynamic NTK grows the base once the sequence passes the model's
      // max_position_embeddings.
      if (!max_pos) return top.Missing("max_position_embeddings", "for dynamic scaling");
      out->set_max_position_embeddings(*max_pos);
      if (original) out->set_original_max_position_embeddings(*original);
      break;
    case v1::YARN: {
      // HF: original length from rope_scaling, else the model's max_position_embeddings.
      const std::optional<int64_t> orig = original ? original : max_pos;
      if (!factor && orig && max_pos && *orig > 0) {
        factor = static_cast<double>(*max_pos) / static_cast<double>(*orig);
      }
      if (!factor) return s.Missing("factor", "for yarn scaling");
      out->set_factor(*factor);
      if (orig) out->set_original_max_position_embeddings(*orig);
      if (max_pos) out->set_max_position_embeddings(*max_pos);
      ASSIGN_OR_RETURN(std::optional<double> beta_fast, s.Number("beta_fast"));
      ASSIGN_OR_RETURN(std::optional<double> beta_slow, s.Number("beta_slow"));
      ASSIGN_OR_RETURN(std::optional<double> mscale, s.Number("mscale"));
      ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim, s.Number("mscale_all_dim"));
      ASSIGN_OR_RETURN(std::optional<bool> truncate, s.Bool("truncate"));
      if (beta_fast) out->set_beta_fast(*beta_fast);
      if (beta_slow) out->set_beta_slow(*beta_slow);
      if (mscale) out->set_mscale(*mscale);
      if (mscale_all_dim) out->set_mscale_all_dim(*mscale_all_dim);
      if (truncate) out->set_truncate(*truncate);
      break;
    }
    case v1::LLAMA3: {
      if (!factor) return s.Missing("factor", "for llama3 scaling");
      if (!original) return s.Missing("original_max_position_embeddings", "for llama3 scaling");
      ASSIGN_OR_RETURN(std::optional<double> low, s.Number("low_freq_factor"));
      ASSIGN_OR_RETURN(std::optional<double> high, s.Number("high_freq_factor"));
      out->set_factor(*factor);
      out->set_original_max_position_embeddings(*original);
      if (low) out->set_low_freq_factor(*low);
      if (high) out->set_high_freq_factor(*high);
      break;
    }
    case v1::LONGROPE: {
      ASSIGN_OR_RETURN(std::vector<double> short_factor, s.NumberList("short_factor"));
      ASSIGN_OR_RETURN(std::vector<double> long_factor, s.NumberList("long_factor"));
      const size_t half = static_cast<size_t>(rotary_dim / 2);
      if (short_factor.size() != half || long_factor.size() != half) {
        return absl::InvalidArgumentError(absl::StrCat(
            top.source(), ": ", s.Name("short_factor"), " and ", s.Name("long_factor"), " have ",
            short_factor.size(), " and ", long_factor.size(), " entries; rotary_dim ", rotary_dim,
            " needs ", half, " each"));
      }
      out->mutable_short_factor()->Add(short_factor.begin(), short_factor.end());
      out->mutable_long_factor()->Add(long_factor.begin(), long_factor.end());
      // HF (Phi-3): a top-level original_max_position_embeddings wins, and then the factor
      // is max_position_embeddings / original, whatever rope_scaling.factor says.
      if (top_original) {
        out->set_original_max_position_embeddings(*top_original);
        if (max_pos && *top_original > 0) {
          factor = static_cast<double>(*max_pos) / static_cast<double>(*top_original);
        }
      } else if (original) {
        out->set_original_max_position_embeddings(*original);
      } else if (max_pos) {
        out->set_original_max_position_embeddings(*max_pos);
      } else {
        return s.Missing("original_max_position_embeddings", "for longrope scaling");
      }
      if (max_pos) out->set_max_position_embeddings(*max_pos);
      if (factor) out->set_factor(*factor);
      break;
    }
    default:
      break;
  }
  if (out->has_factor() && !(out->factor() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(top.source(), ": ", s.Name("factor"), " is ", out->factor(), "; it must be > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfRopeConfig> RopeFromHfConfig(const json& config, absl::string_view source_view) {
  const std::string source(source_view);
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the top level is not a JSON object"));
  }
  const JsonReader top(config, source, "");
  HfRopeConfig out;
  ASSIGN_OR_RETURN(std::optional<std::string> model_type, top.String("model_type"));
  out.model_type = model_type.value_or("");

  // Sizes; GPT-2 style names (n_head, n_embd, n_positions) appear in GPT-J configs.
  ASSIGN_OR_RETURN(std::optional<int64_t> heads, top.Int("num_attention_heads"));
  if (!heads) { ASSIGN_OR_RETURN(heads, top.Int("n_head")); }
  ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads, top.Int("num_key_value_heads"));
  ASSIGN_OR_RETURN(std::optional<int64_t> hidden, top.Int("hidden_size"));
  if (!hidden) { ASSIGN_OR_RETURN(hidden, top.Int("n_embd")); }
  ASSIGN_OR_RETURN(std::optional<int64_t> max_pos, top.Int("max_position_embeddings"));
  if (!max_pos) { ASSIGN_OR_RETURN(max_pos, top.Int("n_positions")); }
  out.num_attention_heads = heads.value_or(0);
  out.num_key_value_heads = kv_heads.value_or(out.num_attention_heads);
  out.max_position_embeddings = max_pos.value_or(0);

  // transformers 5 moves theta and the scaling into one rope_parameters object.
  const json* rope_parameters = nullptr;
  if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object()) {
    rope_parameters = &*it;
  }

  // Theta.
  ASSIGN_OR_RETURN(std::optional<double> theta, top.Number("rope_theta"));
  if (!theta) { ASSIGN_OR_RETURN(theta, top.Number("rotary_emb_base")); }
  if (!theta && rope_parameters != nullptr) {
    ASSIGN_OR_RETURN(theta, JsonReader(*rope_parameters, source, "rope_parameters.").Number("rope_theta"));
  }
  const double base = theta.value_or(10000.0);
  if (!(base > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": rope_theta is ", base, "; it must be > 0"));
  }
  out.rope.set_base(base);

  // Head width: DeepSeek's MLA rotates only the qk_rope_head_dim part of each head.
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, top.Int("qk_rope_head_dim"));
  if (!head_dim) { ASSIGN_OR_RETURN(head_dim, top.Int("head_dim")); }
  if (!head_dim) {
    if (!hidden || !heads || *heads <= 0) {
      return top.Missing("head_dim", "(or hidden_size and num_attention_heads)");
    }
    head_dim = *hidden / *heads;  // Python's //
  }
  if (*head_dim < 2) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": head_dim is ", *head_dim, "; it must be >= 2"));
  }
  out.head_dim = *head_dim;

  // Rotary width.
  ASSIGN_OR_RETURN(std::optional<int64_t> rotary_dim, top.Int("rotary_dim"));
  std::string rotary_key = "rotary_dim";
  if (!rotary_dim) {
    ASSIGN_OR_RETURN(std::optional<double> fraction, top.Number("partial_rotary_factor"));
    rotary_key = "partial_rotary_factor";
    if (!fraction) {
      ASSIGN_OR_RETURN(fraction, top.Number("rotary_pct"));
      rotary_key = "rotary_pct";
    }
    if (fraction && !(*fraction > 0 && *fraction <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", rotary_key, " is ", *fraction, "; it must be in (0, 1]"));
    }
    // int() truncates, as in HF.
    rotary_dim = static_cast<int64_t>(static_cast<double>(*head_dim) * fraction.value_or(1.0));
  }
  if (*rotary_dim < 2 || *rotary_dim > *head_dim || *rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", rotary_key, " gives rotary_dim ",
                                                   *rotary_dim, " for head_dim ", *head_dim,
                                                   "; it must be even and in [2, head_dim]"));
  }
  out.rotary_dim = *rotary_dim;
  if (*rotary_dim != *head_dim) out.rope.set_rotary_dim(static_cast<int32_t>(*rotary_dim));

  // Pairing: GPT-J and CodeGen rotate interleaved pairs; DeepSeek V2/V3 store their rope
  // features interleaved too (HF's rope_interleave, default true for them).
  bool interleaved = out.model_type == "gptj" || out.model_type == "codegen" ||
                     out.model_type == "deepseek_v2" || out.model_type == "deepseek_v3";
  ASSIGN_OR_RETURN(std::optional<bool> rope_interleave, top.Bool("rope_interleave"));
  if (rope_interleave) interleaved = *rope_interleave;
  out.rope.set_style(interleaved ? v1::GPTJ : v1::NEOX);

  // Scaling.
  if (top.Has("rope_scaling")) {
    RETURN_IF_ERROR(ParseScaling(config.at("rope_scaling"), top, "rope_scaling", true, *rotary_dim, &out.rope));
  } else if (rope_parameters != nullptr) {
    RETURN_IF_ERROR(ParseScaling(*rope_parameters, top, "rope_parameters", false, *rotary_dim, &out.rope));
  }
  return out;
}

absl::StatusOr<HfRopeConfig> LoadHfRopeConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(errno));
    if (errno == ENOENT || errno == ENOTDIR) return absl::NotFoundError(msg);
    if (errno == EACCES || errno == EPERM) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return RopeFromHfConfig(config, path);
}

}  // namespace posenc::client
