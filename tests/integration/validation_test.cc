// Integration: the hostile requests of "results are finite or refused" sent to the real
// posenc-server. Each used to come back OK holding NaN/inf, or had an unknown enum value
// silently read as the default; now each is refused with the code and the field named, and
// the server goes on answering normal requests correctly.
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using ::testing::HasSubstr;

// A FLOAT32 tensor of `shape` holding 0.5 everywhere.
v1::Tensor Halves(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return FloatTensor(shape, std::vector<float>(n, 0.5f));
}

v1::EncodeRequest Sinusoidal() {
  v1::EncodeRequest req;
  *req.mutable_input() = Halves({1, 4, 8});
  req.mutable_sinusoidal();
  return req;
}

v1::EncodeRequest Rope() {
  v1::EncodeRequest req;
  *req.mutable_input() = Halves({1, 2, 2, 8});  // BSHD
  req.mutable_rope();
  return req;
}

v1::EncodeRequest Continuous(double value) {
  v1::EncodeRequest req;
  *req.mutable_input() = Halves({1, 2, 8});
  req.mutable_positions()->add_values(0.0);
  req.mutable_positions()->add_values(value);
  req.mutable_continuous();
  return req;
}

v1::EncodeRequest Hierarchical(int levels, float scale) {
  v1::EncodeRequest req;
  *req.mutable_input() = Halves({1, 2, 8});
  for (int l = 0; l < levels; ++l) {
    v1::Level* level = req.mutable_hierarchical()->add_levels();
    level->add_ids(0);
    level->add_ids(1);
    level->set_scale(scale);
  }
  return req;
}

struct HostileEncode {
  const char* name;
  std::function<v1::EncodeRequest()> make;
  grpc::StatusCode code;
  const char* field;  // must appear in the message
};

std::vector<HostileEncode> HostileEncodes() {
  using grpc::StatusCode;
  const StatusCode kInvalid = StatusCode::INVALID_ARGUMENT;
  const StatusCode kExhausted = StatusCode::RESOURCE_EXHAUSTED;
  return {
      {"sinusoidal base 5e-324",
       [] {
         auto r = Sinusoidal();
         r.mutable_sinusoidal()->set_base(5e-324);
         return r;
       },
       kInvalid, "sinusoidal.base"},
      {"sinusoidal layout 99",
       [] {
         auto r = Sinusoidal();
         r.mutable_sinusoidal()->set_layout(static_cast<v1::SinusoidalLayout>(99));
         return r;
       },
       kInvalid, "sinusoidal.layout is 99"},
      {"sinusoidal timescale 99",
       [] {
         auto r = Sinusoidal();
         r.mutable_sinusoidal()->set_timescale(static_cast<v1::Timescale>(99));
         return r;
       },
       kInvalid, "sinusoidal.timescale is 99"},
      {"sinusoidal fusion 99",
       [] {
         auto r = Sinusoidal();
         r.mutable_sinusoidal()->set_fusion(static_cast<v1::Fusion>(99));
         return r;
       },
       kInvalid, "sinusoidal.fusion is 99"},
      {"sinusoidal input_scale 3e38",
       [] {
         auto r = Sinusoidal();
         r.mutable_sinusoidal()->set_input_scale(3e38f);
         return r;
       },
       kInvalid, "sinusoidal.input_scale"},
      {"52-byte CONCAT with pe_dim 16000000",
       [] {
         v1::EncodeRequest r;
         *r.mutable_input() = Halves({1, 1, 8});
         r.mutable_sinusoidal()->set_fusion(v1::CONCAT);
         r.mutable_sinusoidal()->set_pe_dim(16000000);
         return r;
       },
       kExhausted, "sinusoidal.pe_dim is 16000000"},
      {"learned overflow 77",
       [] {
         auto r = Sinusoidal();
         r.mutable_learned()->set_table("wpe");
         r.mutable_learned()->set_overflow(static_cast<v1::Overflow>(77));
         return r;
       },
       kInvalid, "learned.overflow is 77"},
      {"learned fusion 99",
       [] {
         auto r = Sinusoidal();
         r.mutable_learned()->set_table("wpe");
         r.mutable_learned()->set_fusion(static_cast<v1::Fusion>(99));
         return r;
       },
       kInvalid, "learned.fusion is 99"},
      {"rope style 99",
       [] {
         auto r = Rope();
         r.mutable_rope()->set_style(static_cast<v1::RopeStyle>(99));
         return r;
       },
       kInvalid, "rope.style is 99"},
      {"rope layout 99",
       [] {
         auto r = Rope();
         r.mutable_rope()->set_layout(static_cast<v1::RopeLayout>(99));
         return r;
       },
       kInvalid, "rope.layout is 99"},
      {"rope scaling.type 99",
       [] {
         auto r = Rope();
         r.mutable_rope()->mutable_scaling()->set_type(static_cast<v1::RopeScalingType>(99));
         return r;
       },
       kInvalid, "rope.scaling.type is 99"},
      {"rope base 5e-324",
       [] {
         auto r = Rope();
         r.mutable_rope()->set_base(5e-324);
         return r;
       },
       kInvalid, "rope.base"},
      {"rope LINEAR factor 1e-300 at offset 1e9",
       [] {
         auto r = Rope();
         r.mutable_rope()->mutable_scaling()->set_type(v1::LINEAR);
         r.mutable_rope()->mutable_scaling()->set_factor(1e-300);
         r.mutable_positions()->add_offsets(1000000000);
         return r;
       },
       kInvalid, "rope.scaling.factor is 1e-300"},
      {"rope YARN attention_factor 1e300",
       [] {
         auto r = Rope();
         v1::RopeScaling* s = r.mutable_rope()->mutable_scaling();
         s->set_type(v1::YARN);
         s->set_factor(4);
         s->set_original_max_position_embeddings(4096);
         s->set_attention_factor(1e300);
         return r;
       },
       kInvalid, "rope.scaling.attention_factor is 1e+300"},
      {"continuous value 1e308", [] { return Continuous(1e308); }, kInvalid,
       "positions.values[1] * continuous.value_scale"},
      {"continuous value_scale 1e300",
       [] {
         auto r = Continuous(1e10);
         r.mutable_continuous()->set_value_scale(1e300);
         return r;
       },
       kInvalid, "positions.values[1] * continuous.value_scale"},
      {"continuous layout 99",
       [] {
         auto r = Continuous(1);
         r.mutable_continuous()->set_layout(static_cast<v1::SinusoidalLayout>(99));
         return r;
       },
       kInvalid, "continuous.layout is 99"},
      {"continuous timescale 99",
       [] {
         auto r = Continuous(1);
         r.mutable_continuous()->set_timescale(static_cast<v1::Timescale>(99));
         return r;
       },
       kInvalid, "continuous.timescale is 99"},
      {"hierarchical scale 3e38", [] { return Hierarchical(2, 3e38f); }, kInvalid,
       "hierarchical.levels[0].scale"},
      {"hierarchical 1600 levels", [] { return Hierarchical(1600, 1.0f); }, kExhausted,
       "hierarchical.levels has 1600 levels"},
      {"input dtype 99",
       [] {
         auto r = Sinusoidal();
         r.mutable_input()->set_dtype(static_cast<v1::DType>(99));
         return r;
       },
       kInvalid, "input.dtype is 99"},
  };
}

class Validation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  std::unique_ptr<v1::PositionalEncoding::Stub> Stub() { return posenc::testing::Stub(*server_); }
  // A normal request after the hostile ones: answered, with the paper's values.
  void ExpectNormalRequestAnswered() {
    v1::EncodeResponse resp;
    v1::EncodeRequest req = Sinusoidal();
    req.mutable_positions()->add_offsets(3);
    ASSERT_THAT(Encode(*Stub(), req, &resp), IsOk());
    const std::vector<float> out = Floats(resp.output());
    ASSERT_EQ(out.size(), 4u * 8);
    // Token 1 has position 4; column 0 is sin(4), column 1 cos(4), plus the input's 0.5.
    EXPECT_NEAR(out[8 + 0], 0.5 + std::sin(4.0), 1e-6);
    EXPECT_NEAR(out[8 + 1], 0.5 + std::cos(4.0), 1e-6);
  }
  static ServerProcess* server_;
};

ServerProcess* Validation::server_ = nullptr;

void ExpectRefused(const grpc::Status& st, grpc::StatusCode code, const std::string& field,
                   const std::string& name) {
  EXPECT_THAT(st, StatusIs(static_cast<absl::StatusCode>(code), ::testing::HasSubstr(field)))
      << name;
}

TEST_F(Validation, HostileEncodesAreRefusedNamingTheField) {
  ASSERT_TRUE(server_->started());
  auto stub = Stub();
  for (const HostileEncode& c : HostileEncodes()) {
    ExpectRefused(Encode(*stub, c.make()), c.code, c.field, c.name);
  }
  ExpectNormalRequestAnswered();
}

TEST_F(Validation, HostileBiasAndTableRequestsAreRefusedNamingTheField) {
  ASSERT_TRUE(server_->started());
  auto stub = Stub();
  {
    v1::BiasRequest req;
    req.set_query_length(4);
    req.set_key_length(4);
    req.mutable_alibi()->set_num_heads(2);
    req.mutable_alibi()->set_mode(static_cast<v1::AlibiMode>(99));
    ExpectRefused(AttentionBias(*stub, req), grpc::StatusCode::INVALID_ARGUMENT, "alibi.mode is 99",
                  "alibi mode 99");
  }
  {
    // heads * q * k * 4 bytes is about 2^113: refused as a size, not wrapped.
    v1::BiasRequest req;
    req.set_query_length(int64_t{1} << 40);
    req.set_key_length(int64_t{1} << 40);
    req.mutable_alibi()->set_num_heads(2147483647);
    ExpectRefused(AttentionBias(*stub, req), grpc::StatusCode::RESOURCE_EXHAUSTED, "the bias",
                  "bias of 2^40 x 2^40 x 2^31");
  }
  struct TableCase {
    const char* name;
    std::function<void(v1::TableRequest&)> mutate;
    const char* field;
  };
  const std::vector<TableCase> tables = {
      {"table sinusoidal layout 99",
       [](v1::TableRequest& r) {
         r.mutable_sinusoidal()->set_layout(static_cast<v1::SinusoidalLayout>(99));
       },
       "sinusoidal.layout is 99"},
      {"table sinusoidal base 5e-324",
       [](v1::TableRequest& r) { r.mutable_sinusoidal()->set_base(5e-324); }, "sinusoidal.base"},
      {"table dtype 99",
       [](v1::TableRequest& r) {
         r.mutable_sinusoidal();
         r.set_dtype(static_cast<v1::DType>(99));
       },
       "dtype is 99"},
      {"table rope style 99",
       [](v1::TableRequest& r) { r.mutable_rope()->set_style(static_cast<v1::RopeStyle>(99)); },
       "rope.style is 99"},
      {"table rope LINEAR factor 1e-300",
       [](v1::TableRequest& r) {
         r.mutable_rope()->mutable_scaling()->set_type(v1::LINEAR);
         r.mutable_rope()->mutable_scaling()->set_factor(1e-300);
       },
       "rope.scaling.factor is 1e-300"},
  };
  for (const TableCase& c : tables) {
    v1::TableRequest req;
    req.set_length(1024);
    req.set_dim(8);
    c.mutate(req);
    grpc::ClientContext ctx;
    auto reader = stub->GetTable(&ctx, req);
    v1::TableChunk chunk;
    int chunks = 0;
    while (reader->Read(&chunk)) ++chunks;
    EXPECT_EQ(chunks, 0) << c.name << ": rows went out before the refusal";
    ExpectRefused(reader->Finish(), grpc::StatusCode::INVALID_ARGUMENT, c.field, c.name);
  }
  ExpectNormalRequestAnswered();
}

}  // namespace
}  // namespace posenc::testing
