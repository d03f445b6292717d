// GetTable against the real posenc-server on port 0: sinusoidal rows and RoPE cos/sin
// (linear scaling) streamed in chunks of at most rows_per_chunk, every row against the
// formula in float64.
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

TEST(GetTable, StreamsSinusoidalRowsInChunks) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  v1::TableRequest req;
  req.mutable_sinusoidal();
  req.set_length(1000);
  req.set_dim(12);
  req.set_rows_per_chunk(128);
  grpc::ClientContext ctx;
  auto stub = Stub(server);
  auto reader = stub->GetTable(&ctx, req);
  v1::TableChunk chunk;
  int64_t next = 0;
  int chunks = 0;
  while (reader->Read(&chunk)) {
    EXPECT_EQ(chunk.first_position(), next);
    const int64_t n = chunk.rows().shape(0);
    EXPECT_LE(n, 128);
    const auto rows = Floats(chunk.rows());
    for (int64_t r = 0; r < n; ++r)
      for (int c = 0; c < 12; ++c) ASSERT_NEAR(rows[r * 12 + c], PaperPe(next + r, c, 12), 1.2e-7);
    next += n;
    ++chunks;
  }
  EXPECT_THAT(reader->Finish(), IsOk());
  EXPECT_EQ(next, 1000);
  EXPECT_EQ(chunks, 8);
}

TEST(GetTable, StreamsRopeCosSin) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  v1::TableRequest req;
  req.mutable_rope()->mutable_scaling()->set_type(v1::LINEAR);
  req.mutable_rope()->mutable_scaling()->set_factor(4.0);
  req.set_length(300);
  req.set_dim(8);
  req.set_rows_per_chunk(100);
  grpc::ClientContext ctx;
  auto stub = Stub(server);
  auto reader = stub->GetTable(&ctx, req);
  v1::TableChunk chunk;
  int64_t next = 0;
  while (reader->Read(&chunk)) {
    ASSERT_EQ(chunk.rows().shape_size(), 3);
    EXPECT_EQ(chunk.rows().shape(1), 2);
    EXPECT_EQ(chunk.rows().shape(2), 4);
    const auto rows = Floats(chunk.rows());
    for (int64_t r = 0; r < chunk.rows().shape(0); ++r)
      for (int i = 0; i < 4; ++i) {
        const double angle = (next + r) / 4.0 * std::pow(10000.0, -2.0 * i / 8);
        ASSERT_NEAR(rows[r * 8 + i], std::cos(angle), 1.2e-7);
        ASSERT_NEAR(rows[r * 8 + 4 + i], std::sin(angle), 1.2e-7);
      }
    next += chunk.rows().shape(0);
  }
  EXPECT_THAT(reader->Finish(), IsOk());
  EXPECT_EQ(next, 300);
}

}  // namespace
}  // namespace posenc::testing
