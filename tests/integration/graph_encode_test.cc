// GraphEncode against the real posenc-server on port 0: a ring's Laplacian eigenpairs
// (L v = lambda v, unit norm, sign fixed) concatenated after the input, and a bad edge.
#include <cmath>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using absl::StatusCode;
using ::testing::HasSubstr;

TEST(GraphEncode, RingEigenpairsAndConcatenatedInput) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const int n = 6;
  v1::GraphRequest req;
  req.set_num_nodes(n);
  for (int i = 0; i < n; ++i) {
    req.add_edges(i);
    req.add_edges((i + 1) % n);
  }
  req.add_edges(2);  // a repeated pair and a self-loop change nothing
  req.add_edges(1);
  req.add_edges(4);
  req.add_edges(4);
  req.set_k(2);
  *req.mutable_input() = FloatTensor({n, 1}, {10, 11, 12, 13, 14, 15});
  v1::GraphResponse resp;
  ASSERT_THAT(GraphEncode(*stub, req, &resp), IsOk());
  // Ring Laplacian eigenvalues 2 - 2cos(2 pi j / n): j = 1 gives 1, twice.
  ASSERT_EQ(resp.eigenvalues_size(), 2);
  EXPECT_NEAR(resp.eigenvalues(0), 1.0, 1e-9);
  EXPECT_NEAR(resp.eigenvalues(1), 1.0, 1e-9);
  ASSERT_EQ(resp.output().shape(1), 3);
  const auto out = Floats(resp.output());
  for (int c = 1; c < 3; ++c) {  // L v = lambda v, |v| = 1, entry of largest magnitude > 0
    double norm = 0, largest = 0;
    for (int i = 0; i < n; ++i) {
      const double lv =
          2 * out[i * 3 + c] - out[((i + 1) % n) * 3 + c] - out[((i + n - 1) % n) * 3 + c];
      EXPECT_NEAR(lv, 1.0 * out[i * 3 + c], 1e-5);
      norm += out[i * 3 + c] * out[i * 3 + c];
      if (std::abs(out[i * 3 + c]) > std::abs(largest) + 1e-6) largest = out[i * 3 + c];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5);
    EXPECT_GT(largest, 0);
  }
  EXPECT_EQ(out[0], 10.0f);
  EXPECT_EQ(out[5 * 3], 15.0f);
  // An input holding NaN would give a result that is not finite: refused.
  v1::GraphRequest nan_input = req;
  *nan_input.mutable_input() = FloatTensor({n, 1}, {10, 11, std::nanf(""), 13, 14, 15});
  EXPECT_THAT(GraphEncode(*stub, nan_input),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("input gives a result that is not finite (element 6 ")));
  req.add_edges(0);
  req.add_edges(n);  // outside [0, n)
  EXPECT_THAT(GraphEncode(*stub, req), StatusIs(StatusCode::kInvalidArgument, HasSubstr("edges[")));
}

TEST(GraphEncode, RandomWalkShortestPathAndTree) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  // A triangle 0-1-2 and an isolated node 3.
  v1::GraphRequest walk;
  walk.set_num_nodes(4);
  for (int64_t v : {0, 1, 1, 2, 2, 0}) walk.add_edges(v);
  walk.set_encoding(v1::RANDOM_WALK);
  walk.set_walk_length(3);
  v1::GraphResponse resp;
  ASSERT_THAT(GraphEncode(*stub, walk, &resp), IsOk());
  // (P^s)[i][i] on a triangle: 0, 1/2, 1/4; the isolated node's row is zeros.
  EXPECT_EQ(Floats(resp.output()),
            (std::vector<float>{0, 0.5f, 0.25f, 0, 0.5f, 0.25f, 0, 0.5f, 0.25f, 0, 0, 0}));
  EXPECT_EQ(resp.eigenvalues_size(), 0);

  v1::GraphRequest paths = walk;
  paths.clear_walk_length();
  paths.set_encoding(v1::SHORTEST_PATH);
  paths.add_anchors(2);
  paths.add_anchors(3);
  ASSERT_THAT(GraphEncode(*stub, paths, &resp), IsOk());
  ASSERT_EQ(resp.output().dtype(), v1::INT32);
  std::vector<int32_t> hops(8);
  ASSERT_EQ(resp.output().data().size(), 32u);
  std::memcpy(hops.data(), resp.output().data().data(), 32);
  EXPECT_EQ(hops, (std::vector<int32_t>{1, -1, 1, -1, 0, -1, -1, 0}));
  // After features, the hops are numbers in the features' dtype.
  *paths.mutable_input() = FloatTensor({4, 1}, {5, 6, 7, 8});
  ASSERT_THAT(GraphEncode(*stub, paths, &resp), IsOk());
  EXPECT_EQ(Floats(resp.output()), (std::vector<float>{5, 1, -1, 6, 1, -1, 7, 0, -1, 8, -1, 0}));

  v1::GraphRequest tree;
  tree.set_num_nodes(4);
  tree.set_encoding(v1::TREE);
  for (int64_t p : {-1, 0, 0, 2}) tree.add_parents(p);
  tree.set_max_depth(2);
  tree.set_max_children(2);
  ASSERT_THAT(GraphEncode(*stub, tree, &resp), IsOk());
  // Paths: 1 = (0), 2 = (1), 3 = (1, 0); blocks of 2, the node's own step first.
  EXPECT_EQ(Floats(resp.output()),
            (std::vector<float>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1}));

  v1::GraphRequest bad = tree;
  bad.set_parents(1, 3);  // parents {-1, 3, 3, 2}: 2 -> 3 -> 2 is a cycle
  bad.set_parents(2, 3);
  EXPECT_THAT(GraphEncode(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("(a cycle)")));
  bad = tree;
  bad.add_edges(0);
  bad.add_edges(1);
  EXPECT_THAT(GraphEncode(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("edges must be empty")));
  bad = tree;
  bad.set_max_children(1);
  EXPECT_THAT(GraphEncode(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("node 2 is child 1")));
  bad = walk;
  bad.set_walk_length(0);
  EXPECT_THAT(GraphEncode(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("walk_length")));
  bad.set_walk_length(1 << 20);
  EXPECT_THAT(GraphEncode(*stub, bad),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("walk_length")));
  bad = paths;
  bad.set_anchors(0, 9);
  EXPECT_THAT(GraphEncode(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("anchors[0]")));
  bad = walk;
  bad.set_encoding(static_cast<v1::GraphEncoding>(42));
  EXPECT_THAT(GraphEncode(*stub, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("encoding")));
}

}  // namespace
}  // namespace posenc::testing
