// Reliability against a real posenc-server: cheap calls are not queued behind long ones,
// deadlines stop work inside it, admission refuses what does not fit before allocating,
// the drain loses no accepted call, start-up errors exit cleanly naming their flag, and
// every refused or unparseable call is answered and counted with its code.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using ::testing::HasSubstr;

using Clock = std::chrono::steady_clock;
using grpc::health::v1::HealthCheckResponse;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// `components` path graphs of 500 nodes with k 64: each needs a dense 500-node solve, about
// 0.13 s apiece on this machine.
v1::GraphRequest SlowGraph(int components) {
  v1::GraphRequest req;
  req.set_num_nodes(500 * components);
  for (int c = 0; c < components; ++c) {
    for (int i = 0; i + 1 < 500; ++i) {
      req.add_edges(c * 500 + i);
      req.add_edges(c * 500 + i + 1);
    }
  }
  req.set_k(64);
  return req;
}

// On a connection of its own: a probe shared with the tests' uploads (gRPC shares a
// connection between channels of the same arguments) would wait behind their bytes.
HealthCheckResponse::ServingStatus Health(const ServerProcess& server) {
  grpc::ChannelArguments own_connection;
  own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(
      server.grpc_address(), grpc::InsecureChannelCredentials(), own_connection));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  HealthCheckResponse resp;
  const grpc::Status status = stub->Check(&ctx, req, &resp);
  return status.ok() ? resp.status() : HealthCheckResponse::UNKNOWN;
}

TEST(Reliability, SmallCallIsNotQueuedBehindTwoLongGraphSolves) {
  ServerProcess server({"--threads=1"});
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 8, 16)), IsOk());  // warm the channel
  const v1::GraphRequest graph = SlowGraph(20);
  auto first = std::async(std::launch::async, [&] {
    return GraphEncode(*stub, graph, nullptr, std::chrono::seconds(60));
  });
  auto second = std::async(std::launch::async, [&] {
    return GraphEncode(*stub, graph, nullptr, std::chrono::seconds(60));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both solves under way
  double worst = 0;
  for (int i = 0; i < 10; ++i) {
    const auto start = Clock::now();
    ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 8, 16)), IsOk());
    worst = std::max(worst, Seconds(Clock::now() - start));
  }
  // Before the work pool, this waited for both solves (several seconds).
  EXPECT_LT(worst, 0.25) << "a [1,8,16] Encode waited behind the graph solves";
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the solves were too short to test anything";
  EXPECT_THAT(first.get(), IsOk());
  EXPECT_THAT(second.get(), IsOk());
}

TEST(Reliability, DeadlineStopsAGraphSolveAndIsCountedAsDeadlineExceeded) {
  ServerProcess server({"--threads=1"});
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  const auto start = Clock::now();
  const grpc::Status status =
      GraphEncode(*stub, SlowGraph(40), nullptr, std::chrono::milliseconds(500));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded));  // gRPC's own status
  // The single bulk worker is free again soon: had the solve run on (~5 s), this small
  // graph would wait for it.
  v1::GraphRequest small = SlowGraph(1);
  const grpc::Status next = GraphEncode(*stub, small, nullptr, std::chrono::seconds(30));
  EXPECT_THAT(next, IsOk());
  EXPECT_LT(Seconds(Clock::now() - start), 2.5);
  EXPECT_EQ(ScrapeMetric(server, "posenc_requests_total",
                         {"method=\"GraphEncode\"", "code=\"DEADLINE_EXCEEDED\""}),
            1);
  EXPECT_EQ(
      ScrapeMetric(server, "posenc_requests_total", {"method=\"GraphEncode\"", "code=\"OK\""}), 1);
}

TEST(Reliability, OverTheByteBudgetIsRefusedAtOnceAndCounted) {
  ServerProcess server({"--max_inflight_bytes=67108864"});
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  // 52 bytes that ask for a 64 MB CONCAT output.
  v1::EncodeRequest req = SinusoidalRequest(1, 1, 8);
  req.mutable_sinusoidal()->set_fusion(v1::CONCAT);
  req.mutable_sinusoidal()->set_pe_dim(16000000);
  const long rss_before = server.RssKib();
  const auto start = Clock::now();
  const grpc::Status status = Encode(*stub, req);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("--max_inflight_bytes"), std::string::npos)
      << status.error_message();
  EXPECT_LT(Seconds(Clock::now() - start), 0.5);
  EXPECT_LT(server.RssKib() - rss_before, 16 * 1024) << "the refusal allocated the output";
  EXPECT_EQ(
      ScrapeMetric(server, "posenc_requests_total",
                   {"method=\"Encode\"", "scheme=\"sinusoidal\"", "code=\"RESOURCE_EXHAUSTED\""}),
      1);
  // What fits still runs.
  req.mutable_sinusoidal()->set_pe_dim(1000);
  EXPECT_THAT(Encode(*stub, req), IsOk());
}

// Between calls the server keeps what a large call freed, so the next one does not page it
// all in again (a client calling one at a time leaves gaps that a trim must not fall into),
// and what it keeps is bounded: twelve such calls leave less than three calls' worth.
TEST(Reliability, FreedMemoryIsKeptBetweenCallsAndBounded) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 4, 64)), IsOk());
  const long baseline = server.RssKib();
  // 16 MiB of input whose table is 16 rows, so the table cache holds almost nothing. A call
  // holds about three times its size: the received slices, the tensor, the response.
  const v1::EncodeRequest large = SinusoidalRequest(256, 16, 1024);
  constexpr long kCallKib = 3 * 16 * 1024;
  for (int i = 0; i < 3; ++i) ASSERT_THAT(Encode(*stub, large), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long kept = server.RssKib();
  for (int i = 0; i < 9; ++i) ASSERT_THAT(Encode(*stub, large), IsOk());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long idle = server.RssKib();
  std::printf("RSS %ld KiB before the 16 MiB calls, %ld 300 ms after three, %ld idle after 12\n",
              baseline, kept, idle);
  EXPECT_GT(kept - baseline, 16 * 1024) << "a 16 MiB call's buffers were handed back between calls";
  EXPECT_LT(idle - baseline, 3 * kCallKib)
      << "RSS " << baseline << " KiB before, " << idle << " idle after twelve calls";
}

TEST(Reliability, ConcurrentCallLimitRefusesTheExtraCall) {
  ServerProcess server({"--threads=1", "--max_concurrent_calls=2"});
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  const v1::GraphRequest graph = SlowGraph(10);
  auto a = std::async(std::launch::async,
                      [&] { return GraphEncode(*stub, graph, nullptr, std::chrono::seconds(60)); });
  auto b = std::async(std::launch::async,
                      [&] { return GraphEncode(*stub, graph, nullptr, std::chrono::seconds(60)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const grpc::Status third = Encode(*stub, SinusoidalRequest(1, 8, 16));
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(third.error_message().find("--max_concurrent_calls"), std::string::npos);
  EXPECT_THAT(a.get(), IsOk());
  EXPECT_THAT(b.get(), IsOk());
  EXPECT_THAT(Encode(*stub, SinusoidalRequest(1, 8, 16)), IsOk());  // slots came back
}

TEST(Reliability, DrainCompletesEveryAcceptedCallIncludingUploads) {
  ServerProcess server({"--threads=1", "--shutdown_grace=20s"});
  ASSERT_TRUE(server.started());
  auto channel = server.Channel();
  auto stub = v1::PositionalEncoding::NewStub(channel);
  ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 8, 16)), IsOk());
  // An open Watch must not hold the drain.
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext watch_ctx;
  auto watch = health->Watch(&watch_ctx, grpc::health::v1::HealthCheckRequest());
  HealthCheckResponse watched;
  ASSERT_TRUE(watch->Read(&watched));
  // 20 calls of 32 MiB, all started (their messages serialized and handed to the
  // transport, their headers read by the server) before SIGTERM; most are still uploading
  // when it comes. A call whose headers the server has not read is not one it accepted
  // (it is refused UNAVAILABLE, retryably), so the test waits for the server to have seen
  // all of them: posenc_transport_calls_started_total, from channelz every 100 ms, counted
  // from after the calls above.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double started_before = ScrapeMetric(server, "posenc_transport_calls_started_total", {});
  constexpr int kCalls = 20;
  const v1::EncodeRequest big = SinusoidalRequest(1, 2048, 4096);
  struct Call {
    grpc::ClientContext ctx;
    v1::EncodeResponse resp;
    std::promise<grpc::Status> done;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::future<grpc::Status>> results;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<Call>());
    Call* c = calls.back().get();
    results.push_back(c->done.get_future());
    stub->async()->Encode(&c->ctx, &big, &c->resp,
                          [c](grpc::Status s) { c->done.set_value(std::move(s)); });
  }
  // A slow solve (about 2 s), started last on a connection of its own so that it is still
  // running at SIGTERM however fast the uploads land: it keeps the drain open long enough
  // to ask health and to be refused during it.
  grpc::ChannelArguments own_connection;
  own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto graph_stub = v1::PositionalEncoding::NewStub(grpc::CreateCustomChannel(
      server.grpc_address(), grpc::InsecureChannelCredentials(), own_connection));
  auto graph = std::async(std::launch::async, [&] {
    return GraphEncode(*graph_stub, SlowGraph(15), nullptr, std::chrono::seconds(60));
  });
  const auto seen_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ScrapeMetric(server, "posenc_transport_calls_started_total", {}) <
             started_before + kCalls + 1 &&
         std::chrono::steady_clock::now() < seen_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(ScrapeMetric(server, "posenc_transport_calls_started_total", {}),
            started_before + kCalls + 1)
      << "the server did not see the calls' headers";
  server.Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Health(server), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(watch->Read(&watched));
  EXPECT_EQ(watched.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(watch->Read(&watched)) << "the Watch stayed open during the drain";
  EXPECT_THAT(watch->Finish(), IsOk());
  {  // a call that arrives now, on a connection of its own, is turned away, retryably
    grpc::ChannelArguments own_connection;
    own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto late_stub = v1::PositionalEncoding::NewStub(grpc::CreateCustomChannel(
        server.grpc_address(), grpc::InsecureChannelCredentials(), own_connection));
    const grpc::Status late = Encode(*late_stub, SinusoidalRequest(1, 8, 16));
    EXPECT_THAT(late, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("server is shutting down; retry on another replica")))
        << late.error_message();
  }
  int ok = 0;
  for (auto& r : results) {
    const grpc::Status s = r.get();
    ok += s.ok();
    EXPECT_THAT(s, IsOk()) << s.error_code() << " " << s.error_message();
  }
  EXPECT_EQ(ok, kCalls);
  EXPECT_THAT(graph.get(), IsOk());
  EXPECT_EQ(server.Wait(), 0);
}

// Rolling-update load: 8 clients, each on its own connection and without retries, send
// 1 MiB Encodes back to back; SIGTERM comes mid-load. Every call must end OK (accepted and
// finished) or UNAVAILABLE (refused, retryable elsewhere): never CANCELLED, which would be
// an accepted call lost. A few rounds, each a fresh server; DRAIN_ROUNDS=N runs N (a soak).
TEST(Reliability, DrainUnderLoadCancelsNoCall) {
  const char* rounds_env = std::getenv("DRAIN_ROUNDS");
  const int rounds = rounds_env != nullptr ? std::max(1, std::atoi(rounds_env)) : 3;
  constexpr int kClients = 8;
  const v1::EncodeRequest req = SinusoidalRequest(1, 256, 1024);  // 1 MiB of float32
  int64_t total = 0, ok = 0, unavailable = 0;
  for (int round = 0; round < rounds; ++round) {
    ServerProcess server({"--threads=2", "--shutdown_grace=20s"});
    ASSERT_TRUE(server.started());
    std::atomic<bool> gone{false};
    std::atomic<int64_t> round_ok{0};
    std::mutex mu;
    std::map<grpc::StatusCode, int64_t> codes;
    std::vector<std::string> other_messages;
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&] {
        grpc::ChannelArguments args;
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
        args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
        args.SetMaxReceiveMessageSize(64 << 20);
        auto stub = v1::PositionalEncoding::NewStub(grpc::CreateCustomChannel(
            server.grpc_address(), grpc::InsecureChannelCredentials(), args));
        // Through the drain and until the server has exited: refused calls are retried at
        // once, so uploads are in flight whenever the transport closes.
        while (!gone.load()) {
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
          v1::EncodeResponse resp;
          const grpc::Status s = stub->Encode(&ctx, req, &resp);
          if (s.ok()) round_ok.fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          ++codes[s.error_code()];
          if (!s.ok() && s.error_code() != grpc::StatusCode::UNAVAILABLE) {
            other_messages.push_back(absl::StrCat(s.error_code(), " ", s.error_message(), " ",
                                                  ctx.debug_error_string()));
          }
          // A refused client waits a moment before it tries again, as a client would before
          // it retries elsewhere; a refused connection does not make it spin.
          if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
      });
    }
    // Load for a while (at least 50 calls answered), then SIGTERM in the middle of it.
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    while (round_ok.load() < 50 && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    server.Signal(SIGTERM);
    EXPECT_EQ(server.Wait(), 0);
    gone.store(true);
    for (auto& t : clients) t.join();
    for (const auto& [code, n] : codes) total += n;
    ok += codes[grpc::StatusCode::OK];
    unavailable += codes[grpc::StatusCode::UNAVAILABLE];
    EXPECT_EQ(codes[grpc::StatusCode::CANCELLED], 0) << "round " << round;
    EXPECT_THAT(other_messages, ::testing::IsEmpty()) << "round " << round;
  }
  EXPECT_GT(ok, 0);
  EXPECT_EQ(ok + unavailable, total);
  std::printf("drain under load: %d rounds, %lld calls, %lld OK, %lld UNAVAILABLE\n", rounds,
              static_cast<long long>(total), static_cast<long long>(ok),
              static_cast<long long>(unavailable));
}

TEST(Reliability, BiasOfExactlyTheMessageLimitIsRefusedBeforeItIsBuilt) {
  ServerProcess server({"--max_message_bytes=1048576"});
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  v1::BiasRequest req;
  req.set_query_length(512);
  req.set_key_length(512);
  req.mutable_alibi()->set_num_heads(1);  // 512 * 512 * 4 bytes = the limit, before framing
  const grpc::Status status = AttentionBias(*stub, req);
  EXPECT_THAT(
      status,
      StatusIs(absl::StatusCode::kResourceExhausted,
               HasSubstr("the bias [1,512,512] would be 1048576 bytes; --max_message_bytes")));
  EXPECT_EQ(ScrapeMetric(server, "posenc_requests_total",
                         {"method=\"AttentionBias\"", "code=\"RESOURCE_EXHAUSTED\""}),
            1);
  EXPECT_EQ(ScrapeMetric(server, "posenc_requests_total",
                         {"method=\"AttentionBias\"", "code=\"OK\""}),
            0);
}

TEST(Reliability, UnparseableRequestIsInvalidArgumentAndCounted) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  grpc::GenericStub generic(server.Channel());
  // The tensor rpcs parse their requests themselves; GetTable and ListSchemes are parsed by
  // gRPC, and the interceptor rewrites its bare UNIMPLEMENTED.
  const std::vector<std::pair<std::string, std::string>> rpcs = {
      {"Encode", "/posenc.v1.PositionalEncoding/Encode"},
      {"AttentionBias", "/posenc.v1.PositionalEncoding/AttentionBias"},
      {"GraphEncode", "/posenc.v1.PositionalEncoding/GraphEncode"},
      {"ListSchemes", "/posenc.v1.PositionalEncoding/ListSchemes"},
      {"ModelInfer", "/inference.GRPCInferenceService/ModelInfer"},
  };
  for (const auto& [method, path] : rpcs) {
    SCOPED_TRACE(method);
    const char garbage[] = "\xff\xff\xff\xff\x0f";
    grpc::Slice slice(garbage, sizeof(garbage) - 1);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, path, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) { done.set_value(s); });
    const grpc::Status status = done.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find(method), std::string::npos) << status.error_message();
    // Counted when the call closes (only then is a cancelled upload told from a bad message).
    double counted = 0;
    for (int i = 0; i < 100 && counted == 0; ++i) {
      counted = ScrapeMetric(server, "posenc_requests_total",
                             {"method=\"" + method + "\"", "code=\"INVALID_ARGUMENT\""});
      if (counted == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(counted, 1);
  }
  EXPECT_EQ(ScrapeMetric(server, "posenc_inflight_requests", {}), 0);
  // Later answers are unchanged.
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  EXPECT_THAT(Encode(*stub, SinusoidalRequest(1, 8, 16)), IsOk());
}

TEST(Reliability, MessageTheTransportRefusesIsCounted) {
  ServerProcess server({"--max_message_bytes=1048576"});
  ASSERT_TRUE(server.started());
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto stub = v1::PositionalEncoding::NewStub(
      grpc::CreateCustomChannel(server.grpc_address(), grpc::InsecureChannelCredentials(), args));
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(Encode(*stub, SinusoidalRequest(1, 512, 1024)),
                StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("larger than max")));
  }
  EXPECT_THAT(Encode(*stub, SinusoidalRequest(1, 8, 16)), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the monitor's next tick
  EXPECT_EQ(ScrapeMetric(server, "posenc_transport_failed_calls_total", {}), 2);
}

TEST(Reliability, InflightGaugeCountsAnOpenStream) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  grpc::ClientContext ctx;
  auto stream = stub->EncodeStream(&ctx);
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4)));
  v1::EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(ScrapeMetric(server, "posenc_inflight_requests", {}), 1);
  stream->WritesDone();
  EXPECT_THAT(stream->Finish(), IsOk());
}

// Runs posenc-server with `flags`; returns its exit status (-1 for a signal) and stderr.
std::pair<int, std::string> RunServer(const std::vector<std::string>& flags) {
  int err[2];
  EXPECT_EQ(pipe(err), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    std::vector<std::string> args = {BinaryPath("server/posenc-server"),
                                     "--metrics_listen=", "--http_listen="};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(err[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(err[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

// The last line posenc itself printed (gRPC may log a line of its own before it).
std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

TEST(Reliability, StartupErrorsPrintOneLineNamingTheFlagAndExitNonZero) {
  const std::string file = ::testing::TempDir() + "/not_a_pem";
  FILE* f = fopen(file.c_str(), "w");
  fputs("not a certificate\n", f);
  fclose(f);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--listen=127.0.0.1:0", "--table=x=/missing.npy"}, "--table"},
      {{"--listen=127.0.0.1:0", "--tls_key=" + file}, "--tls_cert"},
      {{"--listen=127.0.0.1:0", "--tls_cert=" + file}, "--tls_key"},
      {{"--listen=127.0.0.1:0", "--tls_client_ca=" + file}, "--tls_client_ca"},
      {{"--listen=127.0.0.1:0", "--tls_cert=" + file, "--tls_key=" + file}, "--tls_cert"},
      {{"--listen=192.0.2.1:0"}, "--listen"},
      {{"--listen=127.0.0.1:0", "--max_message_bytes=3000000000"}, "--max_message_bytes"},
      {{"--listen=127.0.0.1:0", "--max_inflight_bytes=lots"}, "--max_inflight_bytes"},
      {{"--listen=127.0.0.1:0", "--shutdown_grace=soon"}, "--shutdown_grace"},
      {{"--listen=127.0.0.1:0", "--no_such_flag=1"}, "--no_such_flag"},
  };
  for (const auto& [flags, named] : cases) {
    const auto [status, err] = RunServer(flags);
    EXPECT_GT(status, 0) << flags.back() << ": " << err;  // an exit code, not a signal
    EXPECT_NE(LastLine(err).find(named), std::string::npos) << flags.back() << ": " << err;
    EXPECT_EQ(LastLine(err).rfind("posenc-server: ", 0), 0u) << err;
  }
}

TEST(Reliability, ABusyPortIsAnErrorNotASharedPort) {
  ServerProcess first;
  ASSERT_TRUE(first.started());
  const std::string address = first.grpc_address();
  const auto [status, err] = RunServer({"--listen=" + address});
  EXPECT_GT(status, 0) << err;
  EXPECT_NE(LastLine(err).find("--listen"), std::string::npos) << err;
}

TEST(Reliability, UnixSocketIsGroupAccessibleOrAsConfigured) {
  for (const auto& [flag, mode] : {std::pair<std::string, int>{"", 0660}, {"0600", 0600}}) {
    const std::string path = ::testing::TempDir() + "/mode" + flag + ".sock";
    std::vector<std::string> flags = {"--listen=unix:" + path};
    if (!flag.empty()) flags.push_back("--listen_socket_mode=" + flag);
    ServerProcess server(flags);
    ASSERT_TRUE(server.started());
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, mode) << flag;
  }
}

TEST(Reliability, VersionFlagPrintsTheVersion) {
  const auto [status, err] = RunServer({"--version"});
  EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace posenc::testing
