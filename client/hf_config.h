// Turns a Hugging Face model's config.json into the posenc.v1.Rope message that reproduces
// the model's rotary embedding (theta, partial rotary, rope_scaling), as HF transformers'
// modeling_rope_utils.py reads the same file. Pure functions; thread-safe.
//
//   ASSIGN_OR_RETURN(HfRopeConfig hf, LoadHfRopeConfig("Llama-3.1-8B/config.json"));
//   *request.mutable_rope() = hf.rope;   // queries shaped [batch, seq, hf.num_attention_heads,
//   hf.head_dim]
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "posenc/v1/posenc.pb.h"

namespace posenc::client {

struct HfRopeConfig {
  posenc::v1::Rope rope;
  std::string model_type;               // "" when the config has none
  int64_t head_dim = 0;                 // width of the query/key heads RoPE sees
  int64_t rotary_dim = 0;               // head_dim, or less for partial rotary
  int64_t num_attention_heads = 0;      // 0 when the config has none
  int64_t num_key_value_heads = 0;      // = num_attention_heads when the config has none
  int64_t max_position_embeddings = 0;  // 0 when the config has none
  std::string layer_type;               // gemma3/gemma4: the layer kind read; else ""
};

// Reads, in HF's order of precedence:
//   theta: rope_theta | rotary_emb_base (GPT-NeoX) | rope_parameters.rope_theta; default 10000.
//   head_dim: qk_rope_head_dim (DeepSeek MLA) | head_dim | hidden_size / num_attention_heads.
//   rotary_dim: rotary_dim (GPT-J) | int(head_dim * partial_rotary_factor) |
//               int(head_dim * rotary_pct) (GPT-NeoX).
//   style: GPTJ for model_type gptj/codegen and DeepSeek's rope_interleave, else NEOX.
//   rope_scaling (or rope_parameters): "rope_type" or legacy "type": default, linear, dynamic,
//   yarn, llama3, longrope, proportional ("su" is longrope, "mrope" is default).
// Families by model_type (a nested text_config's keys win over the top level's):
//   qwen2_vl, qwen2_5_vl: mrope_section from the scaling object; qwen3_vl: interleaved too.
//   gemma3: layer_type "sliding_attention" takes rope_local_base_freq and no scaling,
//     "full_attention" (the default) rope_theta and rope_scaling.
//   gemma4: rope_parameters per layer type; full_attention heads are global_head_dim wide
//     and "proportional" turns partial_rotary_factor of their slots.
//   llama4, glm, glm4: interleaved pairs (GPTJ); glm's partial_rotary_factor as usual.
// A rope_parameters object keyed by layer type ({"full_attention": {...}, ...}) is read for
// `layer_type` (default full_attention).
// INVALID_ARGUMENT naming `source` and the key for a missing or ill-typed value, an unknown
// rope type or layer type, or long/short factors whose length is not rotary_dim / 2.
absl::StatusOr<HfRopeConfig> RopeFromHfConfig(const nlohmann::json& config,
                                              absl::string_view source = "config.json",
                                              absl::string_view layer_type = "");

// Reads and parses a config.json file. NOT_FOUND when it does not exist; INVALID_ARGUMENT when
// it is not JSON.
absl::StatusOr<HfRopeConfig> LoadHfRopeConfig(const std::string& path,
                                              absl::string_view layer_type = "");

}  // namespace posenc::client
