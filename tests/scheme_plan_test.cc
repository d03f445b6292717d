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
  EXPECT_THAT(tables.Add({"t5", t, DType::kFloat32, nullptr}), IsOk());
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
  EXPECT_THAT(PlanBias(BiasSpec{}, tables), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     HasSubstr("set alibi, t5, shaw or deberta")));
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

NamedTables TablesWith(const std::string& name, int64_t rows, int64_t cols) {
  NamedTables tables;
  auto t = std::make_shared<Table>();
  t->rows = rows;
  t->cols = cols;
  t->data.assign(static_cast<size_t>(rows * cols), 0.25f);
  EXPECT_THAT(tables.Add({name, t, DType::kFloat32, nullptr}), IsOk());
  return tables;
}

TEST(BiasPlan, ShawOutputsAndWhichTensorsGoWithIt) {
  const NamedTables tables = TablesWith("rel", 5, 8);  // k = 2: [2k + 1, d = 8]
  BiasSpec shaw;
  shaw.shaw = ShawSpec{2};
  shaw.geom = MakeBiasGeometry(3, 4);
  auto plan = PlanBias(shaw, tables);  // no table: indices
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output_shape, ElementsAre(3, 4));
  EXPECT_EQ(plan->output_dtype, DType::kInt32);
  shaw.shaw_table = "rel";  // embeddings
  plan = PlanBias(shaw, tables);
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output_shape, ElementsAre(3, 4, 8));
  EXPECT_EQ(plan->output_dtype, DType::kFloat32);
  shaw.query_shape = Shape{2, 6, 3, 8};  // the query term, in the query's dtype
  shaw.query_dtype = DType::kBFloat16;
  plan = PlanBias(shaw, tables);
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output_shape, ElementsAre(2, 6, 3, 4));
  EXPECT_EQ(plan->output_dtype, DType::kBFloat16);
  EXPECT_TRUE(plan->shaw_query_term);
  EXPECT_THAT(BiasOutputBytes(*plan, SchemeLimits{}), IsOkAndHolds(int64_t{2 * 6 * 3 * 4 * 2}));

  BiasSpec bad = shaw;
  bad.query_shape = Shape{2, 6, 3, 7};
  EXPECT_THAT(PlanBias(bad, tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("d (8, shaw.table's width)")));
  bad = shaw;
  bad.shaw_table = "";
  EXPECT_THAT(PlanBias(bad, tables), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("query is set but shaw.table")));
  bad.query_shape.reset();
  bad.add_to_scores = true;
  EXPECT_THAT(PlanBias(bad, tables), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("scores is set but shaw.table")));
  bad.shaw_table = "rel";
  EXPECT_THAT(PlanBias(bad, tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scores is set but query")));
  bad.shaw_table = "missing";
  EXPECT_THAT(PlanBias(bad, tables),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("shaw.table 'missing'")));
  bad = shaw;
  bad.shaw = ShawSpec{3};  // the table has 5 rows, not 7
  EXPECT_THAT(PlanBias(bad, tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shaw.table.shape[0] is 5")));

  BiasSpec deberta;
  deberta.deberta = DebertaSpec{};
  deberta.geom = MakeBiasGeometry(3, 4);
  plan = PlanBias(deberta, tables);
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output_shape, ElementsAre(3, 4));
  EXPECT_EQ(plan->output_dtype, DType::kInt32);
  deberta.add_to_scores = true;
  EXPECT_THAT(PlanBias(deberta, tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scores is set; deberta")));
  deberta.add_to_scores = false;
  deberta.query_shape = Shape{1, 1, 3, 8};
  EXPECT_THAT(PlanBias(deberta, tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("query is set; only shaw")));
}

TEST(GraphPlan, EncodingsTheirFieldsAndTheInput) {
  const std::vector<int64_t> edges = {0, 1, 1, 2};
  const NamedTables none;
  GraphRequestSpec walk;
  walk.encoding = GraphEncodingKind::kRandomWalk;
  walk.graph = GraphSpec{3, edges, 0, false};
  walk.walk_length = 2;
  auto r = ApplyGraph(walk, std::nullopt, SchemeLimits{}, none);
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->shape, ElementsAre(3, 2));
  EXPECT_EQ(r->dtype, DType::kFloat32);

  GraphRequestSpec paths;
  paths.encoding = GraphEncodingKind::kShortestPath;
  paths.graph = GraphSpec{3, edges, 0, false};
  const std::vector<int64_t> anchors = {2};
  paths.anchors = anchors;
  r = ApplyGraph(paths, std::nullopt, SchemeLimits{}, none);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->dtype, DType::kInt32);
  std::vector<int32_t> hops(3);
  std::memcpy(hops.data(), r->data.data(), 12);
  EXPECT_THAT(hops, ElementsAre(2, 1, 0));
  // With features: the distances as numbers after them, in the features' dtype.
  const std::vector<float> features = {7, 8, 9};
  const ConstTensorView input(DType::kFloat32, {3, 1}, features.data());
  r = ApplyGraph(paths, input, SchemeLimits{}, none);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->dtype, DType::kFloat32);
  std::vector<float> joined(6);
  std::memcpy(joined.data(), r->data.data(), 24);
  EXPECT_THAT(joined, ElementsAre(7, 2, 8, 1, 9, 0));

  GraphRequestSpec tree;
  tree.encoding = GraphEncodingKind::kTree;
  tree.graph = GraphSpec{3, {}, 0, false};
  const std::vector<int64_t> parents = {-1, 0, 0};
  tree.parents = parents;
  tree.max_depth = 2;
  tree.max_children = 2;
  r = ApplyGraph(tree, std::nullopt, SchemeLimits{}, none);
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->shape, ElementsAre(3, 4));
  const NamedTables tables = TablesWith("kids", 2, 5);
  tree.tree_table = "kids";
  r = ApplyGraph(tree, std::nullopt, SchemeLimits{}, tables);
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->shape, ElementsAre(3, 5));
  tree.max_children = 3;
  EXPECT_THAT(ApplyGraph(tree, std::nullopt, SchemeLimits{}, tables),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[max_children (3), d]")));
  tree.tree_table = "absent";
  EXPECT_THAT(ApplyGraph(tree, std::nullopt, SchemeLimits{}, tables),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("table 'absent'")));

  // Fields of another encoding, and edges with TREE.
  GraphRequestSpec mixed = walk;
  mixed.anchors = anchors;
  EXPECT_THAT(ApplyGraph(mixed, std::nullopt, SchemeLimits{}, none),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("anchors is set; only encoding SHORTEST_PATH")));
  mixed = walk;
  mixed.graph.k = 2;
  EXPECT_THAT(ApplyGraph(mixed, std::nullopt, SchemeLimits{}, none),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("k is set")));
  GraphRequestSpec tree_edges = tree;
  tree_edges.tree_table.clear();
  tree_edges.max_children = 2;
  tree_edges.graph.edges = edges;
  EXPECT_THAT(ApplyGraph(tree_edges, std::nullopt, SchemeLimits{}, none),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("edges must be empty")));
  mixed = paths;
  mixed.depth_decay = 0.5;
  EXPECT_THAT(ApplyGraph(mixed, std::nullopt, SchemeLimits{}, none),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("depth_decay is set")));
}

}  // namespace
}  // namespace posenc
