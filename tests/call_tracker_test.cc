// CallTracker: arrivals and ends keep the count of calls in flight (other services' calls
// count as arrivals and running, not in flight); calls arriving after StartDrain are late,
// earlier ones are not; WaitIdle returns at once when idle, times out while a call runs and
// returns when the last one ends. Then through its interceptor on an in-process server
// (port 0): a posenc call is tracked while its handler runs and forgotten when it ends; a
// bidirectional stream is left to its reactor's CallRecord. A CallRecord tracks a call for
// its lifetime and cuts the status it sends to size.
#include "server/service/call_tracker.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/common/client_text.h"

namespace posenc {
namespace {

using Clock = CallTracker::Clock;

TEST(CallTrackerTest, ArrivalsAndEndsKeepTheCountInFlight) {
  CallTracker tracker(nullptr);
  grpc::ServerContext a, b, health;
  EXPECT_EQ(tracker.inflight(), 0u);
  std::shared_ptr<TrackedCall> call_a = tracker.Arrive(&a, Method::kEncode);
  std::shared_ptr<TrackedCall> call_b = tracker.Arrive(&b, Method::kGraphEncode);
  tracker.ArriveOther(&health);
  EXPECT_EQ(tracker.inflight(), 2u);
  EXPECT_EQ(tracker.running(), 3);
  EXPECT_EQ(tracker.arrivals(), 3);
  EXPECT_EQ(tracker.Find(&a), call_a);
  EXPECT_EQ(tracker.Find(&b), call_b);
  EXPECT_EQ(call_b->method, Method::kGraphEncode);
  EXPECT_EQ(tracker.Find(&health), nullptr);  // other services' calls have no record
  EXPECT_FALSE(call_a->late);

  tracker.End(&a);
  EXPECT_EQ(tracker.inflight(), 1u);
  EXPECT_EQ(tracker.Find(&a), nullptr);
  EXPECT_EQ(tracker.Find(&b), call_b);
  tracker.EndOther(&health);
  EXPECT_EQ(tracker.running(), 1);
  tracker.End(&b);
  EXPECT_EQ(tracker.inflight(), 0u);
  EXPECT_EQ(tracker.running(), 0);
  EXPECT_EQ(tracker.arrivals(), 3);  // arrivals only grow
}

TEST(CallTrackerTest, CallsArrivingAfterTheDrainBeganAreLate) {
  CallTracker tracker(nullptr);
  grpc::ServerContext before, after;
  std::shared_ptr<TrackedCall> early = tracker.Arrive(&before, Method::kEncode);
  EXPECT_FALSE(tracker.draining());
  tracker.StartDrain();
  EXPECT_TRUE(tracker.draining());
  // No server runs here, so channelz sees no upload open at StartDrain to accept.
  std::shared_ptr<TrackedCall> late = tracker.Arrive(&after, Method::kEncode);
  EXPECT_FALSE(early->late);
  EXPECT_TRUE(late->late);
  tracker.End(&after);
  tracker.End(&before);
}

TEST(CallTrackerTest, WaitIdleWaitsForTheLastCallToEnd) {
  CallTracker tracker(nullptr);
  EXPECT_TRUE(tracker.WaitIdle(Clock::now()));  // idle: no wait, even with no time left

  grpc::ServerContext first, second, other;
  tracker.Arrive(&first, Method::kEncode);
  tracker.Arrive(&second, Method::kEncodeStream);
  tracker.ArriveOther(&other);  // a health Watch does not hold the drain
  tracker.StartDrain();
  EXPECT_FALSE(tracker.WaitIdle(Clock::now() + std::chrono::milliseconds(50)));

  std::atomic<bool> all_ended{false};
  std::thread ender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    tracker.End(&first);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    all_ended.store(true);
    tracker.End(&second);
  });
  const bool idle = tracker.WaitIdle(Clock::now() + std::chrono::seconds(30));
  const bool ended_when_returned = all_ended.load();
  ender.join();
  EXPECT_TRUE(idle);
  EXPECT_TRUE(ended_when_returned) << "WaitIdle returned while a call was still in flight";
  EXPECT_EQ(tracker.inflight(), 0u);
  tracker.EndOther(&other);
}

TEST(CallTrackerTest, ACallRecordTracksFromConstructionToDestruction) {
  CallTracker tracker(nullptr);
  grpc::ServerContext context;
  {
    CallRecord record(&tracker, &context, Method::kEncodeStream);
    EXPECT_EQ(tracker.Find(&context), record.call());
    EXPECT_EQ(record.call()->method, Method::kEncodeStream);
    EXPECT_EQ(tracker.inflight(), 1u);
    // A status echoing a client string is cut to what a client accepts as metadata.
    const grpc::Status sent = record.Closing(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request_id " + std::string(100000, 'x')));
    EXPECT_EQ(sent.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_LE(sent.error_message().size(), kMaxStatusMessageBytes + 24);  // Elide's marker
    EXPECT_THAT(sent.error_message(), ::testing::StartsWith("request_id xxx"));
    const grpc::Status short_status(grpc::StatusCode::NOT_FOUND, "no such scheme");
    EXPECT_EQ(record.Closing(short_status).error_message(), "no such scheme");
    EXPECT_EQ(tracker.inflight(), 1u);  // a status sent is not yet the end
  }
  EXPECT_EQ(tracker.inflight(), 0u);
  EXPECT_EQ(tracker.Find(&context), nullptr);
  EXPECT_EQ(tracker.arrivals(), 1);
}

// ListSchemes answers only when the test finishes its reactor, and reports what the tracker
// saw of the call meanwhile.
class HeldService final : public v1::PositionalEncoding::CallbackService {
 public:
  explicit HeldService(CallTracker* tracker) : tracker_(tracker) {}
  std::promise<std::pair<std::shared_ptr<TrackedCall>, grpc::ServerUnaryReactor*>> seen;

  // A bidirectional stream that answers nothing and ends when the client's writes do.
  grpc::ServerBidiReactor<v1::EncodeRequest, v1::EncodeResponse>* EncodeStream(
      grpc::CallbackServerContext*) override {
    class Drain final : public grpc::ServerBidiReactor<v1::EncodeRequest, v1::EncodeResponse> {
     public:
      Drain() { StartRead(&request_); }
      void OnReadDone(bool ok) override {
        if (ok) {
          StartRead(&request_);
        } else {
          Finish(grpc::Status::OK);
        }
      }
      void OnDone() override { delete this; }

     private:
      v1::EncodeRequest request_;
    };
    return new Drain();
  }

  grpc::ServerUnaryReactor* ListSchemes(grpc::CallbackServerContext* context,
                                        const v1::ListSchemesRequest*,
                                        v1::ListSchemesResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    seen.set_value({tracker_->Find(context), reactor});
    return reactor;
  }

 private:
  CallTracker* const tracker_;
};

TEST(CallTrackerTest, TheInterceptorTracksACallWhileItRuns) {
  CallTracker tracker(nullptr);
  HeldService service(&tracker);
  grpc::ServerBuilder builder;
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(tracker.NewInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(creators));
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::PositionalEncoding::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));

  std::future<grpc::Status> answer = std::async(std::launch::async, [&] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ListSchemesResponse response;
    return stub->ListSchemes(&context, v1::ListSchemesRequest(), &response);
  });
  auto [call, reactor] = service.seen.get_future().get();
  ASSERT_NE(call, nullptr) << "the handler's call has no record";
  EXPECT_EQ(call->method, Method::kListSchemes);
  EXPECT_FALSE(call->late);
  EXPECT_THAT(call->peer, ::testing::HasSubstr("127.0.0.1"));
  EXPECT_EQ(tracker.inflight(), 1u);
  EXPECT_FALSE(tracker.WaitIdle(Clock::now() + std::chrono::milliseconds(20)));

  reactor->Finish(grpc::Status::OK);
  EXPECT_TRUE(answer.get().ok());
  // The call ends (the interceptor is destroyed) just after the client has its answer.
  EXPECT_TRUE(tracker.WaitIdle(Clock::now() + std::chrono::seconds(30)));
  EXPECT_EQ(tracker.inflight(), 0u);
  EXPECT_EQ(tracker.arrivals(), 1);

  // A bidirectional stream gets no interceptor: its reactor keeps its own CallRecord
  // (which this test service's does not), so the tracker never sees it.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto stream = stub->EncodeStream(&context);
    ASSERT_TRUE(stream->Write(v1::EncodeRequest()));
    ASSERT_TRUE(stream->WritesDone());
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_EQ(tracker.arrivals(), 1);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

}  // namespace
}  // namespace posenc
