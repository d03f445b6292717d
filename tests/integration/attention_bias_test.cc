// AttentionBias against the real posenc-server on port 0: ALiBi (symmetric, causal, added in
// place to bf16 scores) against the paper's slopes, T5's buckets against HF's
// _relative_position_bucket worked by hand and its table lookup, and the refusals.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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
  EXPECT_NEAR(bias[0 * k + 1], -std::pow(2.0, -1.0), 1e-6);         // distance 1, head 0
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
  // Masked scores (-inf) keep their mask under the causal bias; a NaN, or +inf meeting the
  // mask, gives a NaN result: refused, naming the scores.
  req.mutable_alibi()->set_mode(v1::CAUSAL);
  std::vector<float> scores(heads * q * k, 0.5f);
  scores[1] = -std::numeric_limits<float>::infinity();
  *req.mutable_scores() = FloatTensor({1, heads, q, k}, scores);
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  EXPECT_TRUE(std::isinf(Floats(resp.output())[1]));
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    scores[3] = bad;  // query 0 at position 2, key 3: under the mask
    *req.mutable_scores() = FloatTensor({1, heads, q, k}, scores);
    EXPECT_THAT(AttentionBias(*stub, req),
                StatusIs(StatusCode::kInvalidArgument,
                         HasSubstr("scores gives a result that is NaN (element 3 ")));
  }
  req.clear_scores();
  req.mutable_alibi()->set_mode(v1::SYMMETRIC);
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

// Shaw (tensor2tensor): index = clamp(key - query, -k, k) + k.
int64_t ShawIndex(int64_t k, int64_t query_pos, int64_t key_pos) {
  return std::min(std::max(key_pos - query_pos, -k), k) + k;
}

TEST(AttentionBias, ShawIndicesEmbeddingsAndQueryTermAddedToScores) {
  const int64_t k = 2, d = 4, q = 3, keys = 6, offset = 1, heads = 2;
  std::vector<float> table(static_cast<size_t>((2 * k + 1) * d));
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.125f * static_cast<float>(i) - 1.0f;
  const std::string npy = WriteNpyF32(::testing::TempDir(), "shaw_rel.npy", 2 * k + 1, d, table);
  ServerProcess server({"--table=rel=" + npy});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  v1::BiasRequest req;
  req.set_query_length(q);
  req.set_key_length(keys);
  req.set_query_offset(offset);
  req.mutable_shaw()->set_max_relative_position(k);
  v1::BiasResponse resp;
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  ASSERT_EQ(resp.output().dtype(), v1::INT32);
  std::vector<int32_t> index(q * keys);
  ASSERT_EQ(resp.output().data().size(), index.size() * 4);
  std::memcpy(index.data(), resp.output().data().data(), resp.output().data().size());
  for (int64_t i = 0; i < q; ++i) {
    for (int64_t j = 0; j < keys; ++j) {
      EXPECT_EQ(index[i * keys + j], ShawIndex(k, offset + i, j)) << i << "," << j;
    }
  }

  req.mutable_shaw()->set_table("rel");  // the embeddings [q, k, d]
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  ASSERT_EQ(resp.output().shape_size(), 3);
  const std::vector<float> emb = Floats(resp.output());
  for (int64_t i = 0; i < q; ++i) {
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t f = 0; f < d; ++f) {
        EXPECT_EQ(emb[(i * keys + j) * d + f], table[ShawIndex(k, offset + i, j) * d + f]);
      }
    }
  }

  // The query term added to bfloat16 scores, from a float16 query.
  std::vector<float> query(static_cast<size_t>(heads * q * d)), scores(heads * q * keys);
  for (size_t i = 0; i < query.size(); ++i) query[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>(i % 5) - 2.0f;
  std::string query_bytes(query.size() * 2, '\0'), score_bytes(scores.size() * 2, '\0');
  FromFloat32(query.data(), DType::kFloat16, query_bytes.data(), query.size());
  FromFloat32(scores.data(), DType::kBFloat16, score_bytes.data(), scores.size());
  *req.mutable_query() = MakeTensor({1, heads, q, d}, v1::FLOAT16, query_bytes);
  *req.mutable_scores() = MakeTensor({1, heads, q, keys}, v1::BFLOAT16, score_bytes);
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  ASSERT_EQ(resp.output().dtype(), v1::BFLOAT16);
  std::vector<float> got(scores.size());
  ToFloat32(DType::kBFloat16, resp.output().data().data(), got.data(), got.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < q; ++i) {
      for (int64_t j = 0; j < keys; ++j) {
        double want = scores[(h * q + i) * keys + j];
        for (int64_t f = 0; f < d; ++f) {
          want += double{query[(h * q + i) * d + f]} * table[ShawIndex(k, offset + i, j) * d + f];
        }
        // bfloat16 output: half an ulp (2^-8 relative) plus float32 accumulation.
        EXPECT_NEAR(got[(h * q + i) * keys + j], want, std::fabs(want) / 256 + 1e-6)
            << h << "," << i << "," << j;
      }
    }
  }

  v1::BiasRequest bad = req;
  bad.mutable_query()->set_dtype(v1::INT32);
  EXPECT_THAT(AttentionBias(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("query")));
  bad = req;
  bad.mutable_shaw()->clear_table();
  EXPECT_THAT(AttentionBias(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("shaw.table is empty")));
  bad = req;
  bad.mutable_shaw()->set_max_relative_position(3);
  EXPECT_THAT(AttentionBias(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("shaw.table.shape[0]")));
  bad = req;
  bad.mutable_shaw()->set_max_relative_position(0);
  EXPECT_THAT(AttentionBias(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("shaw.max_relative_position")));
}

TEST(AttentionBias, DebertaBucketsAsHfComputesThem) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  // One query at 210 against keys 0..420: rel = query - key runs 210 .. -210.
  v1::BiasRequest req;
  req.set_query_length(1);
  req.set_key_length(421);
  req.set_query_offset(210);
  req.mutable_deberta();  // defaults 256, 512
  v1::BiasResponse resp;
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  ASSERT_EQ(resp.output().dtype(), v1::INT32);
  std::vector<int32_t> out(421);
  ASSERT_EQ(resp.output().data().size(), out.size() * 4);
  std::memcpy(out.data(), resp.output().data().data(), resp.output().data().size());
  // torch running HF's make_log_bucket_position(rel, 256, 512).
  const std::pair<int, int> torch_values[] = {{0, 0},     {128, 128}, {132, 131},
                                              {134, 133}, {135, 133}, {199, 169},
                                              {200, 169}, {201, 170}, {210, 174}};
  for (const auto& [rel, bucket] : torch_values) {
    EXPECT_EQ(out[210 - rel], bucket) << rel;
    EXPECT_EQ(out[210 + rel], -bucket) << -rel;
  }
  req.mutable_deberta()->set_position_buckets(-1);  // no buckets: the distances themselves
  ASSERT_THAT(AttentionBias(*stub, req, &resp), IsOk());
  std::memcpy(out.data(), resp.output().data().data(), resp.output().data().size());
  for (int j = 0; j < 421; ++j) ASSERT_EQ(out[j], 210 - j);

  v1::BiasRequest bad = req;
  bad.mutable_deberta()->set_position_buckets(1);
  bad.mutable_deberta()->set_max_relative_positions(512);
  EXPECT_THAT(AttentionBias(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("deberta.position_buckets")));
  bad = req;
  *bad.mutable_scores() = FloatTensor({1, 1, 1, 421}, std::vector<float>(421, 0.0f));
  EXPECT_THAT(AttentionBias(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("scores is set; deberta")));
}

}  // namespace
}  // namespace posenc::testing
