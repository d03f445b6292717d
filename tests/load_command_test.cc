// Tests for `posenc-client load`'s pure parts (client/load_command): the --mix grammar, the
// latency histogram's percentiles, and the retry service config, which is checked against
// a fake in-process service that answers UNAVAILABLE: a retried call succeeds, and a call
// larger than grpc.per_rpc_retry_buffer_size is retried only once the buffer is raised.
#include "client/load_command.h"

#include <atomic>
#include <string>

#include "client/posenc_client.h"
#include "client/tensor_proto.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_matchers.h"

namespace posenc::client {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseMixTest, ItemsDimsAndWeights) {
  auto mix =
      ParseMix("sinusoidal:1,8,16*4; rope:1,128,8,64;alibi:8,128,128;graph:256,8;table:64,16*2");
  ASSERT_THAT(mix, IsOk());
  ASSERT_EQ(mix->size(), 5u);
  EXPECT_EQ((*mix)[0].kind, "sinusoidal");
  EXPECT_THAT((*mix)[0].dims, ElementsAre(1, 8, 16));
  EXPECT_EQ((*mix)[0].weight, 4);
  EXPECT_EQ((*mix)[0].label, "sinusoidal:1,8,16");
  EXPECT_THAT((*mix)[1].dims, ElementsAre(1, 128, 8, 64));
  EXPECT_EQ((*mix)[1].weight, 1);
  EXPECT_EQ((*mix)[4].kind, "table");
  EXPECT_EQ((*mix)[4].weight, 2);
}

TEST(ParseMixTest, Presets) {
  auto large = ParseMix("large");
  ASSERT_THAT(large, IsOk());
  ASSERT_EQ(large->size(), 1u);
  EXPECT_THAT((*large)[0].dims, ElementsAre(1, 1024, 256));  // 1 MiB of float32
  auto mixed = ParseMix("mixed");
  ASSERT_THAT(mixed, IsOk());
  EXPECT_EQ(mixed->size(), 5u);
}

TEST(ParseMixTest, RefusesBadItemsNamingThem) {
  const struct {
    const char* mix;
    const char* message;
  } cases[] = {
      {"", "--mix is empty"},
      {"bogus:1,2", "'bogus:1,2': the kind is not"},
      {"sinusoidal:1,8", "sinusoidal takes 3 dims (B,S,D)"},
      {"rope:1,8,8", "rope takes 4 dims (B,S,H,D)"},
      {"alibi:8,0,4", "every dim must be an integer >= 1"},
      {"graph:8,x", "every dim must be an integer >= 1"},
      {"table:8,8*0", "weight after '*' must be an integer in [1, 1000]"},
      {"sinusoidal", "expected KIND:DIMS"},
  };
  for (const auto& c : cases) {
    auto mix = ParseMix(c.mix);
    EXPECT_THAT(mix, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message))) << c.mix;
  }
}

TEST(LatencyHistogramTest, PercentilesWithinTwoPercent) {
  LatencyHistogram h;
  EXPECT_EQ(h.PercentileMillis(0.5), 0.0);
  for (int ms = 1; ms <= 1000; ++ms) h.Add(absl::Milliseconds(ms));
  EXPECT_EQ(h.count(), 1000);
  EXPECT_NEAR(h.PercentileMillis(0.50), 500.0, 500.0 * 0.02);
  EXPECT_NEAR(h.PercentileMillis(0.99), 990.0, 990.0 * 0.02);
  EXPECT_DOUBLE_EQ(h.PercentileMillis(1.0), 1000.0);  // clipped to the largest seen
  EXPECT_DOUBLE_EQ(h.MaxMillis(), 1000.0);
  EXPECT_NEAR(h.MeanMillis(), 500.5, 1e-9);
}

TEST(LatencyHistogramTest, MergeAddsCounts) {
  LatencyHistogram a, b;
  for (int i = 0; i < 99; ++i) a.Add(absl::Microseconds(100));
  b.Add(absl::Seconds(2));
  a.Merge(b);
  EXPECT_EQ(a.count(), 100);
  EXPECT_NEAR(a.PercentileMillis(0.5), 0.1, 0.1 * 0.02);
  EXPECT_DOUBLE_EQ(a.PercentileMillis(1.0), 2000.0);
}

TEST(CallStatsTest, CountsErrorsByCode) {
  CallStats s;
  s.Record(absl::OkStatus(), absl::Milliseconds(1), 10, 20);
  s.Record(absl::UnavailableError("Broken pipe"), absl::Milliseconds(2), 10, 0);
  s.Record(absl::UnavailableError("later"), absl::Milliseconds(2), 10, 0);
  EXPECT_EQ(s.calls, 3);
  EXPECT_EQ(s.errors(), 2);
  EXPECT_EQ(s.bytes_sent, 30);
  EXPECT_EQ(s.bytes_received, 20);
  EXPECT_EQ(s.codes[absl::StatusCode::kUnavailable], 2);
  EXPECT_EQ(s.first_message[absl::StatusCode::kUnavailable], "Broken pipe");
}

TEST(LoadServiceConfigTest, RoundRobinAndRetryPolicy) {
  EXPECT_EQ(LoadServiceConfig("", false), "");
  const auto config = nlohmann::json::parse(LoadServiceConfig("round_robin", true));
  EXPECT_TRUE(config["loadBalancingConfig"][0].contains("round_robin"));
  const auto& policy = config["methodConfig"][0]["retryPolicy"];
  EXPECT_EQ(policy["maxAttempts"], 5);
  EXPECT_EQ(policy["retryableStatusCodes"], nlohmann::json::array({"UNAVAILABLE"}));
  EXPECT_EQ(config["methodConfig"][0]["name"][0]["service"], "posenc.v1.PositionalEncoding");
}

// Answers UNAVAILABLE to the first `failures` attempts, then echoes the input.
class FlakyService final : public v1::PositionalEncoding::Service {
 public:
  explicit FlakyService(int failures) : failures_(failures) {}
  grpc::Status Encode(grpc::ServerContext*, const v1::EncodeRequest* request,
                      v1::EncodeResponse* response) override {
    if (attempts_.fetch_add(1) < failures_)
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "flaky");
    *response->mutable_output() = request->input();
    return grpc::Status::OK;
  }
  int attempts() const { return attempts_.load(); }

 private:
  const int failures_;
  std::atomic<int> attempts_{0};
};

class RetryTest : public ::testing::Test {
 protected:
  // Starts a FlakyService on a loopback port and sends one Encode of `floats` float32s.
  absl::Status EncodeOnce(int failures, int64_t floats, bool retry, int retry_buffer_bytes) {
    service_ = std::make_unique<FlakyService>(failures);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    builder.SetMaxReceiveMessageSize(-1);
    server_ = builder.BuildAndStart();
    ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", port);
    options.timeout = absl::Seconds(10);
    options.service_config_json = LoadServiceConfig("round_robin", retry);
    if (retry_buffer_bytes > 0) {
      options.int_channel_args.emplace_back(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, retry_buffer_bytes);
    }
    auto client = PosencClient::Create(options);
    if (!client.ok()) return client.status();
    v1::EncodeRequest request;
    auto input = MakeTensor(std::vector<float>(floats, 0.5f), {1, floats});
    if (!input.ok()) return input.status();
    *request.mutable_input() = *input;
    request.mutable_sinusoidal();
    return (*client)->Encode(request).status();
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  std::unique_ptr<FlakyService> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(RetryTest, WithoutThePolicyUnavailableReachesTheCaller) {
  const absl::Status status = EncodeOnce(1, 16, /*retry=*/false, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(service_->attempts(), 1);
}

TEST_F(RetryTest, ThePolicyRetriesUnavailable) {
  const absl::Status status = EncodeOnce(2, 16, /*retry=*/true, 0);
  EXPECT_THAT(status, IsOk()) << status;
  EXPECT_EQ(service_->attempts(), 3);
}

// The failover defect: a 1 MiB call exceeds gRPC's default 256 KiB per-call retry buffer,
// so it is not retried (the call commits once its request outgrows the buffer).
TEST_F(RetryTest, LargeCallIsRetriedOnlyWithALargerRetryBuffer) {
  constexpr int64_t kOneMiBOfFloats = (1 << 20) / 4;
  const absl::Status small_buffer = EncodeOnce(1, kOneMiBOfFloats, /*retry=*/true, 0);
  EXPECT_EQ(small_buffer.code(), absl::StatusCode::kUnavailable) << small_buffer;
  EXPECT_EQ(service_->attempts(), 1);
  server_->Shutdown();

  const absl::Status large_buffer = EncodeOnce(1, kOneMiBOfFloats, /*retry=*/true, 4 << 20);
  EXPECT_THAT(large_buffer, IsOk()) << large_buffer;
  EXPECT_EQ(service_->attempts(), 2);
}

}  // namespace
}  // namespace posenc::client
