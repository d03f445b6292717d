// The Prometheus /metrics of a real posenc-server after Encode calls: requests by method,
// scheme and code, durations, the table cache's misses, evictions and bytes within its
// budget, processed bytes, build info, the kernel histogram's 50 us bucket, in-flight 0.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using absl::StatusCode;

TEST(Metrics, ScrapeCountsRequestsAndCache) {
  ServerProcess server({"--cache_bytes=200000"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  // Tables of 256 rows * d * 4 bytes (40960..49152 bytes, each within the quarter of the
  // budget a single table may take); five of them overflow the 200000-byte budget.
  for (int d : {40, 42, 44, 46, 48, 40}) {
    ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 4, d, "m")), IsOk()) << d;
  }
  v1::EncodeRequest bad = SinusoidalRequest(1, 4, 8, "bad");
  bad.mutable_input()->mutable_data()->resize(1);
  EXPECT_THAT(Encode(*stub, bad), StatusIs(StatusCode::kInvalidArgument));
  const std::string text = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(MetricSum(text, "posenc_requests_total",
                      {"method=\"Encode\"", "scheme=\"sinusoidal\"", "code=\"OK\""}),
            6);
  EXPECT_EQ(MetricSum(text, "posenc_requests_total",
                      {"method=\"Encode\"", "code=\"INVALID_ARGUMENT\""}),
            1);
  EXPECT_EQ(MetricSum(text, "posenc_request_duration_seconds_count",
                      {"method=\"Encode\"", "scheme=\"sinusoidal\""}),
            7);
  EXPECT_GE(MetricSum(text, "posenc_table_cache_evictions_total", {}), 1);
  EXPECT_EQ(MetricSum(text, "posenc_table_cache_misses_total", {}), 6);
  EXPECT_LE(MetricSum(text, "posenc_table_cache_bytes", {}), 200000);
  EXPECT_GT(MetricSum(text, "posenc_table_cache_bytes", {}), 0);
  EXPECT_GT(MetricSum(text, "posenc_processed_bytes_total", {"direction=\"in\""}), 0);
  EXPECT_EQ(MetricSum(text, "posenc_build_info", {"version=\""}), 1);
  EXPECT_NE(text.find("posenc_kernel_duration_seconds_bucket"), std::string::npos);
  EXPECT_NE(text.find("le=\"5e-05\""), std::string::npos) << "50 us bucket";
  EXPECT_EQ(MetricSum(text, "posenc_inflight_requests", {}), 0);
}

}  // namespace
}  // namespace posenc::testing
