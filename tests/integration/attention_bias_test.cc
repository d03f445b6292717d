// AttentionBias against the real posenc-server on port 0: ALiBi (symmetric, causal, added in
// place to bf16 scores) against the paper's slopes, T5's buckets against HF's
// _relative_position_bucket worked by hand and its table lookup, and the refusals.
#include <cmath>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tensor/dtype.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/npy_writer.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using absl::StatusCode;
using ::testing::HasSubstr;

TEST(AttentionBias, AlibiBiasAndScoresInPlace) {
  ServerProcess server({"--max_message_bytes=8388608"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const int heads = 8, q = 4, k = 6;  // default query_offset = k - q = 2
  v1::BiasRequest req;
  req.set_query_length(q);
  req.set_key_length(k);
  req.mutable_alibi()->set_num_heads(heads);
  v1::BiasResponse resp;
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  ASSERT_EQ(resp.output().dtype(), v1::FLOAT32);
  auto bias = Floats(resp.output());
  ASSERT_EQ(bias.size(), static_cast<size_t>(heads * q * k));
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < q; ++i)
      for (int j = 0; j < k; ++j) {
        const double slope = std::pow(2.0, -8.0 * (h + 1) / heads);  // the paper, 8 heads
        ASSERT_NEAR(bias[(h * q + i) * k + j], -slope * std::abs(i + 2 - j), 1e-6);
      }
  // CAUSAL: -inf above the diagonal.
  req.mutable_alibi()->set_mode(v1::CAUSAL);
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  bias = Floats(resp.output());
  EXPECT_TRUE(std::isinf(bias[0 * k + 3]) && bias[0 * k + 3] < 0);  // query 0 at 2, key 3
  EXPECT_NEAR(bias[0 * k + 1], -std::pow(2.0, -1.0), 1e-6);       // distance 1, head 0
  // Scores in bf16, [1, heads, q, k] of 1.0: the bias is added in place in bf16.
  req.mutable_alibi()->set_mode(v1::SYMMETRIC);
  const std::vector<uint16_t> ones(heads * q * k, 0x3f80);
  *req.mutable_scores() = MakeTensor({1, heads, q, k}, v1::BFLOAT16, Bytes(ones));
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  ASSERT_EQ(resp.output().dtype(), v1::BFLOAT16);
  ASSERT_EQ(resp.output().shape_size(), 4);
  uint16_t v;
  std::memcpy(&v, resp.output().data().data() + 2 * (0 * k + 0), 2);  // h0, q0 (pos 2), k0
  EXPECT_EQ(BFloat16ToFloat(v), BFloat16ToFloat(FloatToBFloat16(1.0f - 2 * 0.5f)));
  // Limits and bad parameters.
  v1::BiasRequest big;
  big.set_query_length(100000);
  big.set_key_length(100000);
  big.mutable_alibi()->set_num_heads(8);
  EXPECT_THAT(AttentionBias(*stub, big), StatusIs(StatusCode::kResourceExhausted));
  v1::BiasRequest zero = big;
  zero.mutable_alibi()->set_num_heads(0);
  zero.set_query_length(2);
  zero.set_key_length(2);
  EXPECT_THAT(AttentionBias(*stub, zero),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("alibi.num_heads")));
}

TEST(AttentionBias, T5BucketsAndTableBias) {
  std::vector<float> table(32 * 2);
  for (int b = 0; b < 32; ++b) {
    table[b * 2] = static_cast<float>(b);
    table[b * 2 + 1] = -static_cast<float>(b);
  }
  const std::string npy = WriteNpyF32(::testing::TempDir(), "t5.npy", 32, 2, table);
  ServerProcess server({"--table=t5rel=" + npy});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  v1::BiasRequest req;
  req.set_query_length(1);
  req.set_key_length(401);
  req.set_query_offset(200);  // relative = key - 200: -200..200
  req.mutable_t5()->set_bidirectional(true);
  v1::BiasResponse resp;
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  ASSERT_EQ(resp.output().dtype(), v1::INT32);
  std::vector<int32_t> ids(resp.output().data().size() / 4);
  std::memcpy(ids.data(), resp.output().data().data(), ids.size() * 4);
  // HF's _relative_position_bucket, 32 buckets, max_distance 128, bidirectional, by hand:
  // 0 -> 0; +1 -> 16+1; -1 -> 1; +20 -> 16 + 8 + floor(log(20/8)/log(16)*8) = 26;
  // +-200 -> capped at 31 / 15.
  EXPECT_EQ(ids[200], 0);
  EXPECT_EQ(ids[201], 17);
  EXPECT_EQ(ids[199], 1);
  EXPECT_EQ(ids[220], 26);
  EXPECT_EQ(ids[400], 31);
  EXPECT_EQ(ids[0], 15);
  req.mutable_t5()->set_table("t5rel");
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  const auto bias = Floats(resp.output());
  ASSERT_EQ(bias.size(), 2u * 401);
  EXPECT_EQ(bias[220], 26.0f);         // head 0 reads column 0
  EXPECT_EQ(bias[401 + 220], -26.0f);  // head 1 reads column 1
  req.mutable_t5()->set_table("absent");
  EXPECT_THAT(AttentionBias(*stub, req),
              StatusIs(StatusCode::kNotFound, HasSubstr("t5.table 'absent'")));
}

}  // namespace
}  // namespace posenc::testing
