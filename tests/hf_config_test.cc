// Tests for client/hf_config: each fixture config.json under tests/fixtures/hf_configs and
// inline variants of rope_scaling, against the values the published configs state.
#include "client/hf_config.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/status_matchers.h"

namespace posenc::client {
namespace {

using ::posenc::testing::IsOk;

using ::testing::AllOf;
using ::testing::HasSubstr;
namespace v1 = ::posenc::v1;

std::string FixturePath(const std::string& name) {
  return ::posenc::testing::FixturePath("hf_configs/" + name);
}

HfRopeConfig LoadFixture(const std::string& name) {
  absl::StatusOr<HfRopeConfig> config = LoadHfRopeConfig(FixturePath(name));
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : HfRopeConfig();
}

absl::StatusOr<HfRopeConfig> Parse(const char* text) {
  return RopeFromHfConfig(nlohmann::json::parse(text), "inline");
}

TEST(HfConfigTest, Llama31UsesLlama3Scaling) {
  const HfRopeConfig c = LoadFixture("llama-3.1-8b.json");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rope.base(), 500000.0);
  EXPECT_FALSE(c.rope.has_rotary_dim());
  EXPECT_EQ(c.rope.style(), v1::NEOX);
  const v1::RopeScaling& s = c.rope.scaling();
  EXPECT_EQ(s.type(), v1::LLAMA3);
  EXPECT_DOUBLE_EQ(s.factor(), 8.0);
  EXPECT_DOUBLE_EQ(s.low_freq_factor(), 1.0);
  EXPECT_DOUBLE_EQ(s.high_freq_factor(), 4.0);
  EXPECT_EQ(s.original_max_position_embeddings(), 8192);
}

HfRopeConfig LoadLayer(const std::string& name, absl::string_view layer) {
  absl::StatusOr<HfRopeConfig> config = LoadHfRopeConfig(FixturePath(name), layer);
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : HfRopeConfig();
}

std::vector<int> Sections(const v1::Rope& rope) {
  return {rope.mrope_section().begin(), rope.mrope_section().end()};
}

TEST(HfConfigTest, QwenVlFamiliesReadTheirSections) {
  for (const char* name : {"qwen2-vl-7b-instruct.json", "qwen2.5-vl-7b-instruct.json"}) {
    const HfRopeConfig c = LoadFixture(name);
    EXPECT_EQ(c.head_dim, 128) << name;  // 3584 / 28
    EXPECT_EQ(c.num_key_value_heads, 4) << name;
    EXPECT_DOUBLE_EQ(c.rope.base(), 1e6) << name;
    EXPECT_EQ(Sections(c.rope), (std::vector<int>{16, 24, 24})) << name;
    EXPECT_FALSE(c.rope.mrope_interleaved()) << name;
    EXPECT_EQ(c.rope.scaling().type(), v1::NONE) << name;
  }
  const HfRopeConfig q3 = LoadFixture("qwen3-vl-8b-instruct.json");  // nested text_config
  EXPECT_EQ(q3.model_type, "qwen3_vl");
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.num_attention_heads, 32);
  EXPECT_EQ(q3.num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(q3.rope.base(), 5e6);
  EXPECT_EQ(Sections(q3.rope), (std::vector<int>{24, 20, 20}));
  EXPECT_TRUE(q3.rope.mrope_interleaved());
}

TEST(HfConfigTest, GemmaLayerTypes) {
  const HfRopeConfig full = LoadLayer("gemma-3-4b-it.json", "");
  EXPECT_EQ(full.layer_type, "full_attention");
  EXPECT_EQ(full.head_dim, 256);
  EXPECT_DOUBLE_EQ(full.rope.base(), 1e6);
  EXPECT_EQ(full.rope.scaling().type(), v1::LINEAR);
  EXPECT_DOUBLE_EQ(full.rope.scaling().factor(), 8.0);
  const HfRopeConfig sliding = LoadLayer("gemma-3-4b-it.json", "sliding_attention");
  EXPECT_DOUBLE_EQ(sliding.rope.base(), 1e4);
  EXPECT_FALSE(sliding.rope.has_scaling());

  const HfRopeConfig g4 = LoadLayer("gemma-4-e2b-it.json", "full_attention");
  EXPECT_EQ(g4.head_dim, 512);  // global_head_dim
  EXPECT_EQ(g4.rotary_dim, 512);
  EXPECT_DOUBLE_EQ(g4.rope.base(), 1e6);
  EXPECT_EQ(g4.rope.scaling().type(), v1::PROPORTIONAL);
  EXPECT_DOUBLE_EQ(g4.rope.scaling().rope_proportion(), 0.25);
  const HfRopeConfig g4s = LoadLayer("gemma-4-e2b-it.json", "sliding_attention");
  EXPECT_EQ(g4s.head_dim, 256);
  EXPECT_DOUBLE_EQ(g4s.rope.base(), 1e4);
  EXPECT_EQ(g4s.rope.scaling().type(), v1::NONE);

  EXPECT_THAT(LoadHfRopeConfig(FixturePath("gemma-3-4b-it.json"), "local").status().message(),
              HasSubstr("layer_type 'local' is unknown"));
  EXPECT_THAT(
      LoadHfRopeConfig(FixturePath("llama-3.1-8b.json"), "sliding_attention").status().message(),
      HasSubstr("has no per-layer RoPE"));
}

TEST(HfConfigTest, GemmaDefaultsFillWhatTheConfigLeavesOut) {
  // gemma-3-4b-it's text_config names only a few keys; the rest are Gemma3TextConfig's.
  const absl::StatusOr<HfRopeConfig> c = Parse(
      R"({"model_type": "gemma3", "text_config": {"hidden_size": 2560, "model_type": "gemma3_text",
          "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->num_attention_heads, 8);
  EXPECT_DOUBLE_EQ(c->rope.base(), 1e6);
  EXPECT_EQ(c->rope.scaling().type(), v1::LINEAR);
  const absl::StatusOr<HfRopeConfig> g4 = Parse(R"({"model_type": "gemma4_text"})");
  ASSERT_THAT(g4, IsOk());
  EXPECT_EQ(g4->head_dim, 512);
  EXPECT_EQ(g4->rope.scaling().type(), v1::PROPORTIONAL);
}

TEST(HfConfigTest, Llama4AndGlmRotateInterleavedPairs) {
  const HfRopeConfig l4 = LoadFixture("llama-4-scout-17b-16e.json");
  EXPECT_EQ(l4.rope.style(), v1::GPTJ);
  EXPECT_EQ(l4.head_dim, 128);
  EXPECT_EQ(l4.num_attention_heads, 40);
  EXPECT_EQ(l4.rope.scaling().type(), v1::LLAMA3);
  EXPECT_DOUBLE_EQ(l4.rope.scaling().factor(), 16.0);
  EXPECT_DOUBLE_EQ(l4.rope.scaling().high_freq_factor(), 1.0);
  const HfRopeConfig glm = LoadFixture("glm-4-9b-chat-hf.json");
  EXPECT_EQ(glm.rope.style(), v1::GPTJ);
  EXPECT_EQ(glm.rotary_dim, 64);  // partial_rotary_factor 0.5
  EXPECT_EQ(glm.rope.rotary_dim(), 64);
  EXPECT_EQ(glm.num_key_value_heads, 2);
}

TEST(HfConfigTest, QwenVlWithoutSectionsIsRefused) {
  const absl::StatusOr<HfRopeConfig> c =
      Parse(R"({"model_type": "qwen2_vl", "head_dim": 128, "rope_scaling": {"type": "mrope"}})");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("model_type qwen2_vl needs mrope_section"),
                    HasSubstr("rope_scaling.mrope_section (transformers 4)"),
                    HasSubstr("rope_parameters.mrope_section (transformers 5)"),
                    HasSubstr("\"mrope_section\": [16, 24, 24]")));
}

// Keys of another scaling type are dropped, not sent (the server refuses them).
TEST(HfConfigTest, KeysOfAnotherScalingTypeAreDropped) {
  const absl::StatusOr<HfRopeConfig> c = Parse(
      R"({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": 2, "attention_factor": 1.5,
          "beta_fast": 32, "low_freq_factor": 1, "short_factor": [1, 2]}})");
  ASSERT_TRUE(c.ok()) << c.status();
  v1::RopeScaling want;
  want.set_type(v1::LINEAR);
  want.set_factor(2);
  EXPECT_EQ(c->rope.scaling().SerializeAsString(), want.SerializeAsString())
      << c->rope.scaling().DebugString();
  const absl::StatusOr<HfRopeConfig> yarn = Parse(
      R"({"head_dim": 64, "max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn",
          "factor": 4, "original_max_position_embeddings": 1024, "attention_factor": 1.5,
          "low_freq_factor": 1}})");
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  EXPECT_DOUBLE_EQ(yarn->rope.scaling().attention_factor(), 1.5);  // YARN reads it
  EXPECT_FALSE(yarn->rope.scaling().has_low_freq_factor());
}

// transformers 4 keeps mrope_section in rope_scaling, transformers 5 in rope_parameters; a
// text_config whose rope_scaling is null leaves the top level's.
TEST(HfConfigTest, QwenVlSectionsFromEitherTransformersVersion) {
  const absl::StatusOr<HfRopeConfig> v4 = Parse(
      R"({"model_type": "qwen2_5_vl", "head_dim": 128, "text_config": {"rope_scaling": null},
          "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->rope.mrope_section_size(), 3);
  const absl::StatusOr<HfRopeConfig> v5 = Parse(
      R"({"model_type": "qwen2_5_vl", "head_dim": 128,
          "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24]}})");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(v5->rope.mrope_section_size(), 3);
}

TEST(HfConfigTest, Qwen25WithYarn) {
  const HfRopeConfig c = LoadFixture("qwen2.5-7b-yarn.json");
  EXPECT_EQ(c.head_dim, 128);  // 3584 / 28
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_DOUBLE_EQ(c.rope.base(), 1e6);
  const v1::RopeScaling& s = c.rope.scaling();
  EXPECT_EQ(s.type(), v1::YARN);  // legacy "type" spelling
  EXPECT_DOUBLE_EQ(s.factor(), 4.0);
  EXPECT_EQ(s.original_max_position_embeddings(), 32768);
  EXPECT_FALSE(s.has_mscale());
  EXPECT_FALSE(s.has_beta_fast());
  EXPECT_FALSE(s.has_attention_factor());
}

TEST(HfConfigTest, Phi3Mini128kLongrope) {
  const HfRopeConfig c = LoadFixture("phi-3-mini-128k.json");
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.rotary_dim, 96);
  const v1::RopeScaling& s = c.rope.scaling();
  EXPECT_EQ(s.type(), v1::LONGROPE);
  EXPECT_EQ(s.original_max_position_embeddings(), 4096);
  EXPECT_EQ(s.max_position_embeddings(), 131072);
  EXPECT_DOUBLE_EQ(s.factor(), 32.0);  // HF: max / original when the config has original
  ASSERT_EQ(s.short_factor_size(), 48);
  ASSERT_EQ(s.long_factor_size(), 48);
  std::ifstream in(FixturePath("phi-3-mini-128k.json"));
  const nlohmann::json raw = nlohmann::json::parse(in);
  for (int i = 0; i < 48; ++i) {
    EXPECT_DOUBLE_EQ(s.short_factor(i), raw["rope_scaling"]["short_factor"][i].get<double>()) << i;
    EXPECT_DOUBLE_EQ(s.long_factor(i), raw["rope_scaling"]["long_factor"][i].get<double>()) << i;
  }
}

TEST(HfConfigTest, Mistral7bPlainRope) {
  const HfRopeConfig c = LoadFixture("mistral-7b.json");
  EXPECT_DOUBLE_EQ(c.rope.base(), 1e6);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.rope.has_scaling());
  EXPECT_FALSE(c.rope.has_rotary_dim());
}

TEST(HfConfigTest, GptNeox20bPartialRotary) {
  const HfRopeConfig c = LoadFixture("gpt-neox-20b.json");
  EXPECT_EQ(c.head_dim, 96);    // 6144 / 64
  EXPECT_EQ(c.rotary_dim, 24);  // int(96 * 0.25)
  EXPECT_EQ(c.rope.rotary_dim(), 24);
  EXPECT_DOUBLE_EQ(c.rope.base(), 10000.0);  // rotary_emb_base
  EXPECT_EQ(c.rope.style(), v1::NEOX);
  EXPECT_EQ(c.num_key_value_heads, 64);
}

TEST(HfConfigTest, DeepseekV2YarnWithMscale) {
  const HfRopeConfig c = LoadFixture("deepseek-v2-yarn.json");
  EXPECT_EQ(c.head_dim, 64);  // qk_rope_head_dim: only that part of each head rotates
  EXPECT_EQ(c.rope.style(), v1::GPTJ);
  const v1::RopeScaling& s = c.rope.scaling();
  EXPECT_EQ(s.type(), v1::YARN);
  EXPECT_DOUBLE_EQ(s.factor(), 40.0);
  EXPECT_DOUBLE_EQ(s.mscale(), 0.707);
  EXPECT_DOUBLE_EQ(s.mscale_all_dim(), 0.707);
  EXPECT_DOUBLE_EQ(s.beta_fast(), 32.0);
  EXPECT_DOUBLE_EQ(s.beta_slow(), 1.0);
  EXPECT_EQ(s.original_max_position_embeddings(), 4096);
}

TEST(HfConfigTest, DefaultsWithoutRopeKeys) {
  auto c = Parse(R"({"hidden_size": 512, "num_attention_heads": 8, "head_dim": null})");
  ASSERT_THAT(c, IsOk());
  EXPECT_DOUBLE_EQ(c->rope.base(), 10000.0);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_FALSE(c->rope.has_scaling());
  EXPECT_EQ(c->num_key_value_heads, 8);
}

TEST(HfConfigTest, SuAndDefaultAndLinearAndDynamic) {
  auto su = Parse(R"({"head_dim": 8, "max_position_embeddings": 100,
    "rope_scaling": {"type": "su", "short_factor": [1,1,1,1], "long_factor": [2,2,2,2],
                     "original_max_position_embeddings": 50}})");
  ASSERT_THAT(su, IsOk());
  EXPECT_EQ(su->rope.scaling().type(), v1::LONGROPE);
  EXPECT_EQ(su->rope.scaling().original_max_position_embeddings(), 50);
  EXPECT_FALSE(su->rope.scaling().has_factor());

  auto def = Parse(R"({"head_dim": 8, "rope_scaling": {"rope_type": "default"}})");
  ASSERT_THAT(def, IsOk());
  EXPECT_FALSE(def->rope.has_scaling());

  auto linear = Parse(R"({"head_dim": 8, "rope_scaling": {"type": "linear", "factor": 2}})");
  ASSERT_THAT(linear, IsOk());
  EXPECT_EQ(linear->rope.scaling().type(), v1::LINEAR);
  EXPECT_DOUBLE_EQ(linear->rope.scaling().factor(), 2.0);

  auto dynamic = Parse(R"({"head_dim": 8, "max_position_embeddings": 4096,
    "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})");
  ASSERT_THAT(dynamic, IsOk());
  EXPECT_EQ(dynamic->rope.scaling().type(), v1::DYNAMIC);
  EXPECT_EQ(dynamic->rope.scaling().max_position_embeddings(), 4096);
}

TEST(HfConfigTest, YarnExtrasAndRopeTypeWinsOverType) {
  auto c = Parse(R"({"head_dim": 16, "max_position_embeddings": 8192,
    "rope_scaling": {"rope_type": "yarn", "type": "linear", "factor": 4, "beta_fast": 16,
                     "beta_slow": 2, "attention_factor": 1.5, "truncate": false}})");
  ASSERT_THAT(c, IsOk());
  const v1::RopeScaling& s = c->rope.scaling();
  EXPECT_EQ(s.type(), v1::YARN);
  EXPECT_EQ(s.original_max_position_embeddings(), 8192);  // falls back to max_position_embeddings
  EXPECT_DOUBLE_EQ(s.beta_fast(), 16.0);
  EXPECT_DOUBLE_EQ(s.beta_slow(), 2.0);
  EXPECT_DOUBLE_EQ(s.attention_factor(), 1.5);
  ASSERT_TRUE(s.has_truncate());
  EXPECT_FALSE(s.truncate());
}

TEST(HfConfigTest, PartialRotaryFactorAndGptj) {
  auto phi =
      Parse(R"({"hidden_size": 2560, "num_attention_heads": 32, "partial_rotary_factor": 0.4})");
  ASSERT_THAT(phi, IsOk());
  EXPECT_EQ(phi->rotary_dim, 32);  // int(80 * 0.4)
  EXPECT_EQ(phi->rope.rotary_dim(), 32);

  auto gptj = Parse(R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64,
                        "n_positions": 2048})");
  ASSERT_THAT(gptj, IsOk());
  EXPECT_EQ(gptj->head_dim, 256);
  EXPECT_EQ(gptj->rope.rotary_dim(), 64);
  EXPECT_EQ(gptj->rope.style(), v1::GPTJ);
  EXPECT_EQ(gptj->max_position_embeddings, 2048);
}

TEST(HfConfigTest, TransformersV5RopeParameters) {
  auto c = Parse(R"({"head_dim": 64, "max_position_embeddings": 131072,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000, "factor": 32.0,
                        "original_max_position_embeddings": 4096, "truncate": false}})");
  ASSERT_THAT(c, IsOk());
  EXPECT_DOUBLE_EQ(c->rope.base(), 150000.0);
  EXPECT_EQ(c->rope.scaling().type(), v1::YARN);
  EXPECT_DOUBLE_EQ(c->rope.scaling().factor(), 32.0);

  auto theta_only = Parse(R"({"head_dim": 64, "rope_parameters": {"rope_theta": 5e5}})");
  ASSERT_THAT(theta_only, IsOk());
  EXPECT_DOUBLE_EQ(theta_only->rope.base(), 5e5);
  EXPECT_FALSE(theta_only->rope.has_scaling());
}

TEST(HfConfigTest, Errors) {
  auto no_factor = Parse(R"({"head_dim": 8, "rope_scaling": {"type": "linear"}})");
  EXPECT_EQ(no_factor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_factor.status().message(), HasSubstr("rope_scaling.factor"));

  auto unknown = Parse(R"({"head_dim": 8, "rope_scaling": {"type": "ntk-by-parts"}})");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("ntk-by-parts"));

  auto short_list = Parse(R"({"head_dim": 8, "max_position_embeddings": 10,
    "rope_scaling": {"type": "longrope", "short_factor": [1,1,1], "long_factor": [1,1,1,1]}})");
  EXPECT_EQ(short_list.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_list.status().message(), HasSubstr("needs 4 each"));

  auto bad_theta = Parse(R"({"head_dim": 8, "rope_theta": "1e4"})");
  EXPECT_EQ(bad_theta.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_theta.status().message(), HasSubstr("rope_theta"));

  auto no_head = Parse(R"({"rope_theta": 10000})");
  EXPECT_EQ(no_head.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_head.status().message(), HasSubstr("head_dim"));

  auto odd_rotary = Parse(R"({"head_dim": 10, "partial_rotary_factor": 0.5})");
  EXPECT_EQ(odd_rotary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(odd_rotary.status().message(), HasSubstr("rotary_dim 5"));

  auto llama3_no_original =
      Parse(R"({"head_dim": 8, "rope_scaling": {"rope_type": "llama3", "factor": 8}})");
  EXPECT_EQ(llama3_no_original.status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(RopeFromHfConfig(nlohmann::json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfConfigTest, FileErrors) {
  EXPECT_EQ(LoadHfRopeConfig("/nonexistent/config.json").status().code(),
            absl::StatusCode::kNotFound);
  const std::string path = ::testing::TempDir() + "/hf_config_test_bad.json";
  std::ofstream(path) << "{not json";
  auto bad = LoadHfRopeConfig(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace posenc::client
