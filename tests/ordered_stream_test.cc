// OrderedStreamReactor on an in-process gRPC server (port 0), serving a bidi rpc of the
// reflection proto with test handlers: answers come back in request order even when each
// handler runs on its own thread for a different time; a client that does not read gets at
// most the window (plus what the transports buffer) handled ahead; a handler's error ends
// the stream after the earlier answers; a refused stream reads nothing.
#include "server/service/ordered_stream.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace posenc {
namespace {

using grpc::reflection::v1::ServerReflection;
using grpc::reflection::v1::ServerReflectionRequest;
using grpc::reflection::v1::ServerReflectionResponse;
using Reactor = OrderedStreamReactor<ServerReflectionRequest, ServerReflectionResponse>;

// Each stream gets a reactor built from the fixture's current settings.
class TestStreamService final : public ServerReflection::CallbackService {
 public:
  size_t window = 2;
  // Answers a request on the thread `schedule` runs it on (the reactor's, when unset).
  std::function<grpc::Status(ServerReflectionRequest&, ServerReflectionResponse&)> answer;
  std::function<void(absl::AnyInvocable<void() &&>)> schedule;
  Reactor::OnFinish on_finish;
  grpc::Status refuse = grpc::Status::OK;

  grpc::ServerBidiReactor<ServerReflectionRequest, ServerReflectionResponse>* ServerReflectionInfo(
      grpc::CallbackServerContext*) override {
    auto handler = [answer = answer, schedule = schedule](ServerReflectionRequest& in,
                                                          ServerReflectionResponse& out,
                                                          Reactor::Reply reply) {
      auto job = [&answer, &in, &out, reply = std::move(reply)]() mutable {
        std::move(reply)(answer(in, out), Admission::Ticket());
      };
      if (schedule) {
        schedule(std::move(job));
      } else {
        std::move(job)();
      }
    };
    return new Reactor(window, handler, on_finish, refuse);
  }
};

class OrderedStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Echoes the request's host; counts the requests handled.
    service_.answer = [this](ServerReflectionRequest& in, ServerReflectionResponse& out) {
      out.set_valid_host(in.host() + std::string(response_padding_, 'x'));
      handled_.fetch_add(1);
      return grpc::Status::OK;
    };
    service_.on_finish = [this](const grpc::Status& status, bool from_handler) {
      finish_code_.store(static_cast<int>(status.error_code()));
      finish_from_handler_.store(from_handler);
      finished_.fetch_add(1);
    };
  }
  void Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = ServerReflection::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                          grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  static ServerReflectionRequest Request(int i) {
    ServerReflectionRequest request;
    request.set_host(std::to_string(i));
    return request;
  }
  static void SetDeadline(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  }
  // One stream: writes requests 0..n-1 from another thread while reading every answer;
  // returns the answers' hosts in order and the stream's status.
  struct Exchange {
    std::vector<std::string> hosts;
    grpc::Status status;
  };
  Exchange WriteAndReadAll(int n) {
    grpc::ClientContext context;
    SetDeadline(context);
    auto stream = stub_->ServerReflectionInfo(&context);
    std::thread writer([&] {
      for (int i = 0; i < n; ++i) {
        if (!stream->Write(Request(i))) break;
      }
      stream->WritesDone();
    });
    Exchange exchange;
    ServerReflectionResponse response;
    while (stream->Read(&response)) exchange.hosts.push_back(response.valid_host());
    writer.join();
    exchange.status = stream->Finish();
    return exchange;
  }
  // Waits until handled_ has not changed for 300 ms (or 10 s passed); returns it.
  int SettledHandled() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int last = handled_.load();
    auto last_change = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const int now = handled_.load();
      if (now != last) {
        last = now;
        last_change = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last_change > std::chrono::milliseconds(300)) {
        break;
      }
    }
    return last;
  }

  TestStreamService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ServerReflection::Stub> stub_;
  size_t response_padding_ = 0;
  std::atomic<int> handled_{0};
  std::atomic<int> finished_{0};
  std::atomic<int> finish_code_{-1};
  std::atomic<bool> finish_from_handler_{false};
};

TEST_F(OrderedStreamTest, AnswersInRequestOrderWhenHandledOnOtherThreads) {
  // Every job runs on a thread of its own after a random delay: a reactor that let a later
  // request overtake an earlier one would answer out of order.
  std::mt19937 random(7);
  std::mutex random_mu;  // guards random and jobs
  std::vector<std::thread> jobs;
  service_.window = 4;
  service_.schedule = [&](absl::AnyInvocable<void() &&> job) {
    std::lock_guard<std::mutex> lock(random_mu);
    const int delay_ms = static_cast<int>(random() % 5);
    jobs.emplace_back([job = std::move(job), delay_ms]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      std::move(job)();
    });
  };
  Start();
  constexpr int kRequests = 40;
  const auto [hosts, status] = WriteAndReadAll(kRequests);
  {
    std::lock_guard<std::mutex> lock(random_mu);
    for (std::thread& job : jobs) job.join();
  }
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(hosts.size(), static_cast<size_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(hosts[i], std::to_string(i)) << "answer " << i;
  EXPECT_EQ(handled_.load(), kRequests);
  EXPECT_EQ(finished_.load(), 1);
  EXPECT_EQ(finish_code_.load(), 0);
}

TEST_F(OrderedStreamTest, AClientThatDoesNotReadIsNotReadAhead) {
  // 1 MiB answers: a few fill the transports' buffers, and then each further request waits
  // for the client to read. The requests are tiny, so all of them reach the server at once.
  response_padding_ = 1 << 20;
  service_.window = 2;
  Start();
  constexpr int kRequests = 64;
  grpc::ClientContext context;
  SetDeadline(context);
  auto stream = stub_->ServerReflectionInfo(&context);
  for (int i = 0; i < kRequests; ++i) ASSERT_TRUE(stream->Write(Request(i)));
  ASSERT_TRUE(stream->WritesDone());
  const int ahead = SettledHandled();
  RecordProperty("handled_ahead", ahead);
  // The window, the answer being written and what HTTP/2 flow control lets through
  // (64 KiB windows on each side, a few MiB where gRPC's BDP probing grows them); far below
  // the 64 requests sent.
  EXPECT_GE(ahead, 2);
  EXPECT_LE(ahead, 16) << "the server handled requests the client has not read the answers of";
  EXPECT_EQ(finished_.load(), 0);
  // Reading lets the rest through, in order.
  ServerReflectionResponse response;
  int read = 0;
  while (stream->Read(&response)) {
    EXPECT_EQ(response.valid_host().substr(0, std::to_string(read).size()), std::to_string(read));
    EXPECT_EQ(response.valid_host().size(), std::to_string(read).size() + (1u << 20));
    ++read;
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(read, kRequests);
  EXPECT_EQ(handled_.load(), kRequests);
}

TEST_F(OrderedStreamTest, AHandlerErrorEndsTheStreamAfterTheEarlierAnswers) {
  service_.answer = [this](ServerReflectionRequest& in, ServerReflectionResponse& out) {
    handled_.fetch_add(1);
    if (in.host() == "3") return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "host 3");
    out.set_valid_host(in.host());
    return grpc::Status::OK;
  };
  Start();
  const auto [hosts, status] = WriteAndReadAll(10);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "host 3");
  EXPECT_THAT(hosts, ::testing::ElementsAre("0", "1", "2"));
  EXPECT_EQ(handled_.load(), 4);  // nothing is read after the failed request
  EXPECT_EQ(finished_.load(), 1);
  EXPECT_EQ(finish_code_.load(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_TRUE(finish_from_handler_.load());
}

TEST_F(OrderedStreamTest, ARefusedStreamFinishesAtOnceAndReadsNothing) {
  service_.refuse = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  Start();
  grpc::ClientContext context;
  SetDeadline(context);
  auto stream = stub_->ServerReflectionInfo(&context);
  stream->Write(Request(0));  // may fail: the stream may already be over
  stream->WritesDone();
  ServerReflectionResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "the server is shutting down");
  EXPECT_EQ(handled_.load(), 0);
  EXPECT_EQ(finished_.load(), 1);
  EXPECT_EQ(finish_code_.load(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  EXPECT_FALSE(finish_from_handler_.load());
}

TEST_F(OrderedStreamTest, AClientThatGoesAwayEndsTheStreamCancelled) {
  response_padding_ = 1 << 20;  // answers the client never reads stay queued
  Start();
  {
    grpc::ClientContext context;
    SetDeadline(context);
    auto stream = stub_->ServerReflectionInfo(&context);
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(stream->Write(Request(i)));
    SettledHandled();
    context.TryCancel();
    stream->Finish();
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (finished_.load() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(finished_.load(), 1);
  EXPECT_EQ(finish_code_.load(), static_cast<int>(grpc::StatusCode::CANCELLED));
  EXPECT_FALSE(finish_from_handler_.load());
}

}  // namespace
}  // namespace posenc
