// GraphEncode against the real posenc-server on port 0: a ring's Laplacian eigenpairs
// (L v = lambda v, unit norm, sign fixed) concatenated after the input, and a bad edge.
#include <cmath>

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
      const double lv = 2 * out[i * 3 + c] - out[((i + 1) % n) * 3 + c] -
                        out[((i + n - 1) % n) * 3 + c];
      EXPECT_NEAR(lv, 1.0 * out[i * 3 + c], 1e-5);
      norm += out[i * 3 + c] * out[i * 3 + c];
      if (std::abs(out[i * 3 + c]) > std::abs(largest) + 1e-6) largest = out[i * 3 + c];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5);
    EXPECT_GT(largest, 0);
  }
  EXPECT_EQ(out[0], 10.0f);
  EXPECT_EQ(out[5 * 3], 15.0f);
  req.add_edges(0);
  req.add_edges(n);  // outside [0, n)
  EXPECT_THAT(GraphEncode(*stub, req), StatusIs(StatusCode::kInvalidArgument, HasSubstr("edges[")));
}

}  // namespace
}  // namespace posenc::testing
