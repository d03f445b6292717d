// The bias and graph plans of schemes/ (what service/ and the Open Inference Protocol front
// both call): which errors, which output shape and dtype, and the concatenation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "server/schemes/bias_scheme.h"
#include "server/schemes/graph_scheme.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::IsOkAndHolds;
using ::posenc::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

NamedTables TablesWithT5(int64_t buckets, int64_t heads) {
  NamedTables tables;
  auto t = std::make_shared<Table>();
  t->rows = buckets;
  t->cols = heads;
  t->data.assign(static_cast<size_t>(buckets * heads), 0.5f);
  EXPECT_THAT(tables.Add({"t5", t, DType::kFloat32}), IsOk());
  return tables;
}

BiasSpec T5(const std::string& table, bool scores) {
  BiasSpec spec;
  spec.t5 = T5Spec{};
  spec.t5_table = table;
  spec.geom = MakeBiasGeometry(3, 5);
  spec.add_to_scores = scores;
  return spec;
}

TEST(BiasPlan, OutputShapeAndDtypeFollowTheScheme) {
  const NamedTables tables = TablesWithT5(32, 4);
  BiasSpec alibi;
  alibi.alibi = AlibiSpec{6};
  alibi.geom = MakeBiasGeometry(2, 7);
  auto plan = PlanBias(alibi, tables);
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output_shape, ElementsAre(6, 2, 7));
  EXPECT_EQ(plan->output_dtype, DType::kFloat32);

  plan = PlanBias(T5("", false), tables);  // no table: bucket ids
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output_shape, ElementsAre(3, 5));
  EXPECT_EQ(plan->output_dtype, DType::kInt32);

  plan = PlanBias(T5("t5", false), tables);  // the table's columns are the heads
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output_shape, ElementsAre(4, 3, 5));
  std::vector<float> out(4 * 3 * 5);
  ASSERT_THAT(BuildBias(*plan, TensorView{DType::kFloat32, plan->output_shape, out.data()}),
              IsOk());
  EXPECT_THAT(out, ::testing::Each(0.5f));
}

TEST(BiasPlan, ErrorsNameTheField) {
  const NamedTables tables = TablesWithT5(32, 4);
  EXPECT_THAT(PlanBias(BiasSpec{}, tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set alibi or t5")));
  EXPECT_THAT(PlanBias(T5("nope", false), tables),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("t5.table 'nope'")));
  EXPECT_THAT(PlanBias(T5("", true), tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scores is set")));
  const NamedTables wrong = TablesWithT5(16, 4);  // not num_buckets (32) rows
  EXPECT_THAT(PlanBias(T5("t5", false), wrong),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t5.table")));
  BiasSpec alibi;
  alibi.alibi = AlibiSpec{8};
  alibi.geom = MakeBiasGeometry(1024, 1024);
  auto plan = PlanBias(alibi, tables);
  ASSERT_THAT(plan, IsOk());
  SchemeLimits limits;
  limits.max_output_bytes = 1 << 20;  // 8 * 1024 * 1024 * 4 bytes do not fit
  EXPECT_THAT(BiasOutputBytes(*plan, limits),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--max_message_bytes")));
  limits.max_output_bytes = size_t{64} << 20;
  EXPECT_THAT(BiasOutputBytes(*plan, limits), IsOkAndHolds(int64_t{8} * 1024 * 1024 * 4));
}

TEST(GraphPlan, ConcatenatesOntoTheInputInItsDtype) {
  const std::vector<int64_t> edges = {0, 1, 1, 2};  // a path of three nodes
  GraphSpec spec{3, edges, 1, false};
  // [3, 2] float16 features: each row is [r, -r].
  std::vector<float> values = {0, 0, 1, -1, 2, -2};
  std::vector<uint16_t> half(values.size());
  FromFloat32(values.data(), DType::kFloat16, half.data(), values.size());
  const ConstTensorView input(DType::kFloat16, {3, 2}, half.data());
  auto alone = ApplyGraph(spec, std::nullopt, SchemeLimits{});
  auto joined = ApplyGraph(spec, input, SchemeLimits{});
  ASSERT_THAT(alone, IsOk());
  ASSERT_THAT(joined, IsOk());
  EXPECT_THAT(joined->shape, ElementsAre(3, 3));
  EXPECT_EQ(joined->dtype, DType::kFloat16);
  std::vector<float> got(9), vec(3);
  ToFloat32(DType::kFloat16, joined->data.data(), got.data(), got.size());
  std::memcpy(vec.data(), alone->data.data(), 3 * sizeof(float));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r * 3 + 0], values[r * 2 + 0]);
    EXPECT_EQ(got[r * 3 + 1], values[r * 2 + 1]);
    EXPECT_NEAR(got[r * 3 + 2], vec[r], 1e-3);  // the eigenvector, rounded to float16
  }
  const ConstTensorView wrong(DType::kFloat16, {2, 2}, half.data());
  EXPECT_THAT(ApplyGraph(spec, wrong, SchemeLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[num_nodes (3), d]")));
}

}  // namespace
}  // namespace posenc
