// EncodeStream against the real posenc-server on port 0: answers in request order and
// counted, a bad request ends the stream with its code after the earlier answers, and a
// client that never reads is held back by flow control instead of growing the server.
#include <atomic>
#include <cstdio>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using absl::StatusCode;
using ::testing::AllOf;
using ::testing::HasSubstr;
using v1::EncodeRequest;
using v1::EncodeResponse;

TEST(EncodeStream, AnswersInRequestOrder) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  grpc::ClientContext ctx;
  auto stub = Stub(server);
  auto stream = stub->EncodeStream(&ctx);
  const int n = 40;
  std::thread writer([&] {
    for (int i = 0; i < n; ++i) {
      EncodeRequest req = SinusoidalRequest(1, 3, 8, "s" + std::to_string(i));
      req.mutable_positions()->add_offsets(i);
      ASSERT_TRUE(stream->Write(req));
    }
    stream->WritesDone();
  });
  EncodeResponse resp;
  int i = 0;
  while (stream->Read(&resp)) {
    EXPECT_EQ(resp.request_id(), "s" + std::to_string(i));
    EXPECT_NEAR(Floats(resp.output())[0], PaperPe(i, 0, 8), 1.2e-7);
    ++i;
  }
  writer.join();
  EXPECT_THAT(stream->Finish(), IsOk());
  EXPECT_EQ(i, n);
  const std::string text = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_EQ(MetricSum(text, "posenc_requests_total",
                      {"method=\"EncodeStream\"", "scheme=\"sinusoidal\"", "code=\"OK\""}),
            n);
  EXPECT_EQ(MetricSum(text, "posenc_requests_total", {"method=\"EncodeStream\""}), n);
  // The server lets go of a stream just after its status reaches the client: poll briefly.
  double inflight = -1;
  for (int attempt = 0; attempt < 50 && inflight != 0; ++attempt) {
    if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    inflight = ScrapeMetric(server, "posenc_inflight_requests", {});
  }
  EXPECT_EQ(inflight, 0);
}

TEST(EncodeStream, StopsAtABadRequestAfterEarlierAnswers) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  grpc::ClientContext ctx;
  auto stub = Stub(server);
  auto stream = stub->EncodeStream(&ctx);
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "good")));
  EncodeRequest bad = SinusoidalRequest(1, 2, 4, "bad");
  bad.mutable_input()->mutable_data()->resize(3);
  stream->Write(bad);
  stream->WritesDone();
  EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "good");
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_THAT(stream->Finish(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("input.data has 3 bytes"), HasSubstr("bad"))));
}

TEST(EncodeStream, ClientThatNeverReadsDoesNotGrowServerMemory) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const long rss_before = server.RssKib();
  grpc::ClientContext ctx;
  auto stub = Stub(server);
  auto stream = stub->EncodeStream(&ctx);
  std::atomic<int> written{0};
  std::atomic<bool> stop{false};
  const EncodeRequest req = SinusoidalRequest(1, 256, 1024, "flood");  // 1 MiB each
  std::thread writer([&] {
    while (!stop && written < 400) {
      if (!stream->Write(req)) break;
      ++written;
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long rss_after = server.RssKib();
  stop = true;
  ctx.TryCancel();  // unblocks the writer
  writer.join();
  // gRPC flow control plus the server's read window stop the flood after a few messages.
  EXPECT_LT(written.load(), 100) << "writes were not held back";
  EXPECT_LT(rss_after - rss_before, 64 * 1024) << "server grew by " << rss_after - rss_before
                                                << " KiB";
  std::printf("client wrote %d MiB unread; server RSS %ld -> %ld KiB\n", written.load(),
              rss_before, rss_after);
}

}  // namespace
}  // namespace posenc::testing
