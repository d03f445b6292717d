// grpc.health.v1 against the real posenc-server: Check and Watch say SERVING (for the
// server and for posenc.v1.PositionalEncoding) until SIGTERM, NOT_SERVING after; new calls
// are then refused while a stream in flight still gets answers within --shutdown_grace.
#include <signal.h>

#include <thread>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using absl::StatusCode;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

TEST(Health, ServingUntilSigtermThenInFlightStreamFinishes) {
  ServerProcess server({"--shutdown_grace=5s"});
  ASSERT_TRUE(server.started());
  auto channel = server.Channel();
  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const char* service : {"", "posenc.v1.PositionalEncoding"}) {
    grpc::ClientContext ctx;
    HealthCheckRequest hreq;
    hreq.set_service(service);
    HealthCheckResponse hresp;
    ASSERT_THAT(health->Check(&ctx, hreq, &hresp), IsOk()) << service;
    EXPECT_EQ(hresp.status(), HealthCheckResponse::SERVING) << service;
  }
  // Watch streams the status: SERVING now, NOT_SERVING once SIGTERM arrives.
  grpc::ClientContext watch_ctx;
  auto watch = health->Watch(&watch_ctx, HealthCheckRequest());
  HealthCheckResponse watched;
  ASSERT_TRUE(watch->Read(&watched));
  EXPECT_EQ(watched.status(), HealthCheckResponse::SERVING);
  auto stub = v1::PositionalEncoding::NewStub(channel);
  grpc::ClientContext stream_ctx;
  auto stream = stub->EncodeStream(&stream_ctx);
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "before")));
  v1::EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));

  server.Signal(SIGTERM);
  ASSERT_TRUE(watch->Read(&watched));
  EXPECT_EQ(watched.status(), HealthCheckResponse::NOT_SERVING);
  watch_ctx.TryCancel();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // New calls are refused, retryably: the listener is closed or the call is turned away.
  EXPECT_THAT(Encode(*stub, SinusoidalRequest(1, 2, 4, "after"), nullptr, std::chrono::seconds(2)),
              StatusIs(StatusCode::kUnavailable));
  // The stream that was in flight still gets answers, within the grace period.
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "during")));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "during");
  stream->WritesDone();
  EXPECT_THAT(stream->Finish(), IsOk());
  EXPECT_EQ(server.Wait(), 0);
}

}  // namespace
}  // namespace posenc::testing
