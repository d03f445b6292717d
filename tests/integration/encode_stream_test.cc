// EncodeStream against the real posenc-server on port 0: answers in request order and
// counted, a bad request answered with its error while the stream goes on, one over the
// message limit ends it, a client that never reads is held back by flow control instead of
// growing the server, an answer stays charged to --max_inflight_bytes until it has been
// written, and open streams take --max_concurrent_calls slots.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
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

// [good, bad, good]: the bad message is answered with its error (the code and message
// Encode gives), and the stream goes on to answer the third.
TEST(EncodeStream, AnswersABadRequestWithItsErrorAndGoesOn) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  grpc::ClientContext ctx;
  auto stub = Stub(server);
  auto stream = stub->EncodeStream(&ctx);
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "good")));
  EncodeRequest bad = SinusoidalRequest(1, 2, 4, "bad");
  bad.mutable_input()->mutable_data()->resize(3);
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "after")));
  stream->WritesDone();
  EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "good");
  EXPECT_FALSE(resp.has_error());
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "bad");
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(resp.error().message(), AllOf(HasSubstr("input.data has 3 bytes"), HasSubstr("bad")));
  EXPECT_FALSE(resp.has_output());
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "after");
  EXPECT_FALSE(resp.has_error());
  EXPECT_NEAR(Floats(resp.output())[1], PaperPe(0, 1, 4), 1.2e-7);
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_THAT(stream->Finish(), IsOk());
  const std::string text = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_EQ(MetricSum(text, "posenc_requests_total",
                      {"method=\"EncodeStream\"", "code=\"INVALID_ARGUMENT\""}),
            1);
}

// What still ends a stream: a message gRPC itself refuses (over --max_message_bytes) ends
// it with RESOURCE_EXHAUSTED after the earlier answers; no handler saw it.
TEST(EncodeStream, AMessageOverTheSizeLimitEndsTheStream) {
  ServerProcess server({"--max_message_bytes=65536"});
  ASSERT_TRUE(server.started());
  grpc::ClientContext ctx;
  auto stub = Stub(server);
  auto stream = stub->EncodeStream(&ctx);
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "good")));
  EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "good");
  stream->Write(SinusoidalRequest(1, 64, 512, "huge"));  // 128 KiB of input
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_THAT(stream->Finish(), StatusIs(StatusCode::kResourceExhausted));
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
  EXPECT_LT(rss_after - rss_before, 64 * 1024)
      << "server grew by " << rss_after - rss_before << " KiB";
  std::printf("client wrote %d MiB unread; server RSS %ld -> %ld KiB\n", written.load(), rss_before,
              rss_after);
}

// Polls `done` every 20 ms for up to a minute (generous: sanitizer builds are slow).
bool Eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

double StreamAnswers(const ServerProcess& server, const std::string& code = "OK") {
  return ScrapeMetric(server, "posenc_requests_total",
                      {"method=\"EncodeStream\"", "code=\"" + code + "\""});
}

// A sinusoidal CONCAT of 1024 encoding columns to `rows` tokens of width 8: 32 bytes a
// row on the wire, 12384 a row of cost (in + 2 x out + the encoding rows).
EncodeRequest ConcatRequest(int64_t rows) {
  EncodeRequest req = SinusoidalRequest(1, rows, 8);
  req.mutable_sinusoidal()->set_fusion(v1::CONCAT);
  req.mutable_sinusoidal()->set_pe_dim(1024);
  return req;
}

// An answer computed but not yet written (its client does not read) keeps its cost
// charged to --max_inflight_bytes: a call that fits only the rest of the budget is refused
// until the client has read the answer.
TEST(EncodeStream, AnswerHoldsItsAdmissionUntilWritten) {
  constexpr int64_t kBudget = 64 << 20;
  ServerProcess server({"--max_inflight_bytes=" + std::to_string(kBudget)});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  // 4 MiB in, a 4 MiB answer (far past what flow control lets through unread), 12 MiB of
  // cost; the probe's 150 KiB cost 56.7 MiB: it fits the budget alone, not beside the
  // answer.
  const EncodeRequest held = SinusoidalRequest(1, 1024, 1024, "unread");
  const EncodeRequest probe = ConcatRequest(4800);
  grpc::ClientContext ctx;
  auto stream = stub->EncodeStream(&ctx);
  ASSERT_TRUE(stream->Write(held));
  // The answer has been computed (each message is counted when its work ends) ...
  ASSERT_TRUE(Eventually([&] { return StreamAnswers(server) == 1; }));
  // ... and, unread, it still holds its 12 MiB.
  EXPECT_THAT(Encode(*stub, probe),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("--max_inflight_bytes")));
  EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "unread");
  stream->WritesDone();
  EXPECT_THAT(stream->Finish(), IsOk());
  // Written, it is released: the same call now fits.
  EXPECT_TRUE(Eventually([&] { return Encode(*stub, probe).ok(); }));
}

// Streams whose clients never read take --max_concurrent_calls slots for as long as they
// are open: further calls and streams are refused at once with RESOURCE_EXHAUSTED (not
// left waiting), and the slots come back when the streams end.
TEST(EncodeStream, OpenStreamsTakeConcurrentCallSlots) {
  ServerProcess server({"--max_concurrent_calls=2"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  grpc::ClientContext ctx[2];
  std::unique_ptr<grpc::ClientReaderWriter<EncodeRequest, EncodeResponse>> streams[2];
  for (int i = 0; i < 2; ++i) {
    streams[i] = stub->EncodeStream(&ctx[i]);
    ASSERT_TRUE(streams[i]->Write(SinusoidalRequest(1, 2, 4, "s" + std::to_string(i))));
  }
  // Both streams are open and have answered a message, which neither client reads.
  ASSERT_TRUE(Eventually([&] { return StreamAnswers(server) == 2; }));
  EXPECT_THAT(Encode(*stub, SinusoidalRequest(1, 2, 4)),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("--max_concurrent_calls")));
  {
    grpc::ClientContext third_ctx;
    third_ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    auto third = stub->EncodeStream(&third_ctx);
    third->Write(SinusoidalRequest(1, 2, 4));
    EncodeResponse resp;
    EXPECT_FALSE(third->Read(&resp));
    EXPECT_THAT(third->Finish(),
                StatusIs(StatusCode::kResourceExhausted, HasSubstr("--max_concurrent_calls")));
  }
  for (int i = 0; i < 2; ++i) {
    streams[i]->WritesDone();
    EncodeResponse resp;
    ASSERT_TRUE(streams[i]->Read(&resp));
    EXPECT_EQ(resp.request_id(), "s" + std::to_string(i));
    EXPECT_THAT(streams[i]->Finish(), IsOk());
  }
  EXPECT_TRUE(Eventually([&] { return Encode(*stub, SinusoidalRequest(1, 2, 4)).ok(); }));
}

}  // namespace
}  // namespace posenc::testing
