// Integration tests: the real posenc-server binary on port 0, over a real gRPC channel,
// scraped over real HTTP. Each test starts its own server.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/tensor/dtype.h"
#include "tests/integration/server_process.h"
#include "tests/support/npy_writer.h"

namespace posenc::testing {
namespace {

using v1::EncodeRequest;
using v1::EncodeResponse;

v1::Tensor FloatTensor(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  v1::Tensor t;
  for (int64_t d : shape) t.add_shape(d);
  t.set_dtype(v1::FLOAT32);
  t.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  return t;
}

std::vector<float> Floats(const v1::Tensor& t) {
  std::vector<float> out(t.data().size() / 4);
  std::memcpy(out.data(), t.data().data(), out.size() * 4);
  return out;
}

// The paper's sinusoidal encoding in float64, written directly.
double PaperPe(int64_t pos, int64_t col, int64_t d) {
  const double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * (col / 2) / d);
  return col % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

std::string WriteNpyF32(const std::string& name, int64_t rows, int64_t cols,
                        const std::vector<float>& values) {
  return posenc::testing::WriteNpyF32(::testing::TempDir(), name, rows, cols, values);
}

std::unique_ptr<v1::PositionalEncoding::Stub> Stub(const ServerProcess& server) {
  return v1::PositionalEncoding::NewStub(server.Channel());
}

EncodeRequest SinusoidalRequest(int64_t batch, int64_t seq, int64_t d, const std::string& id) {
  EncodeRequest req;
  req.set_request_id(id);
  *req.mutable_input() = FloatTensor({batch, seq, d}, std::vector<float>(batch * seq * d, 0.0f));
  req.mutable_sinusoidal();
  return req;
}

// Sums posenc_requests_total samples whose labels contain every given fragment.
double MetricSum(const std::string& text, const std::string& name,
                 const std::vector<std::string>& fragments) {
  double sum = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name, 0) != 0) continue;
    if (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' ') continue;
    bool all = true;
    for (const auto& f : fragments) all = all && line.find(f) != std::string::npos;
    if (all) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

TEST(Server, ListSchemesNamesEverySchemeAndLoadedTables) {
  const std::string npy = WriteNpyF32("wpe.npy", 3, 2, {1, 2, 3, 4, 5, 6});
  ServerProcess server({"--table=wpe=" + npy});
  ASSERT_TRUE(server.started());
  grpc::ClientContext ctx;
  v1::ListSchemesResponse resp;
  ASSERT_TRUE(Stub(server)->ListSchemes(&ctx, {}, &resp).ok());
  std::set<std::string> names(resp.schemes().begin(), resp.schemes().end());
  for (const char* s : {"sinusoidal", "learned", "rope", "hierarchical", "continuous", "alibi",
                        "t5", "graph_laplacian"}) {
    EXPECT_TRUE(names.count(s)) << s;
  }
  ASSERT_EQ(resp.tables_size(), 1);
  EXPECT_EQ(resp.tables(0).name(), "wpe");
  EXPECT_EQ(std::vector<int64_t>(resp.tables(0).shape().begin(), resp.tables(0).shape().end()),
            (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(resp.tables(0).dtype(), v1::FLOAT32);

  // Learned with that table, positions 2, 0 -> rows [5,6], [1,2].
  EncodeRequest req;
  *req.mutable_input() = FloatTensor({2, 2}, {0.5f, 0.5f, 0, 0});
  req.mutable_positions()->add_ids(2);
  req.mutable_positions()->add_ids(0);
  req.mutable_learned()->set_table("wpe");
  EncodeResponse out;
  grpc::ClientContext ctx2;
  ASSERT_TRUE(Stub(server)->Encode(&ctx2, req, &out).ok());
  EXPECT_EQ(Floats(out.output()), (std::vector<float>{5.5f, 6.5f, 1, 2}));
}

TEST(Server, LoadsSafetensorsBFloat16Table) {
  const std::string path = ::testing::TempDir() + "/t.safetensors";
  {
    // Two tensors; the second is BF16 [2, 2] = 1, 2, -0.5, 0.25.
    const uint16_t bf16[4] = {0x3f80, 0x4000, 0xbf00, 0x3e80};
    std::string header =
        R"({"other":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("pos.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[4,12]}})";
    std::ofstream f(path, std::ios::binary);
    const uint64_t len = header.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << header;
    const float other = 9;
    f.write(reinterpret_cast<const char*>(&other), 4);
    f.write(reinterpret_cast<const char*>(bf16), 8);
  }
  ServerProcess server({"--table=pos=" + path + ":pos.weight"});
  ASSERT_TRUE(server.started());
  EncodeRequest req;
  *req.mutable_input() = FloatTensor({1, 2, 2}, {0, 0, 0, 0});
  req.mutable_learned()->set_table("pos");
  EncodeResponse out;
  grpc::ClientContext ctx;
  ASSERT_TRUE(Stub(server)->Encode(&ctx, req, &out).ok());
  EXPECT_EQ(Floats(out.output()), (std::vector<float>{1, 2, -0.5f, 0.25f}));
}

TEST(Server, EncodeSinusoidalMatchesFloat64Reference) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const int64_t b = 2, s = 6, d = 16;
  EncodeRequest req = SinusoidalRequest(b, s, d, "r1");
  req.mutable_positions()->add_offsets(100);
  req.mutable_positions()->add_offsets(0);
  EncodeResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(Stub(server)->Encode(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.request_id(), "r1");
  ASSERT_EQ(resp.output().shape_size(), 3);
  const auto out = Floats(resp.output());
  for (int64_t r = 0; r < b; ++r)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out[(r * s + t) * d + c], PaperPe((r == 0 ? 100 : 0) + t, c, d), 1.2e-7);
}

TEST(Server, ErrorsCarryTheRightCodeAndNameTheField) {
  ServerProcess server({"--max_message_bytes=1048576"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  auto call = [&](const EncodeRequest& req) {
    grpc::ClientContext ctx;
    EncodeResponse resp;
    return stub->Encode(&ctx, req, &resp);
  };
  {
    EncodeRequest req = SinusoidalRequest(2, 3, 4, "bad-size");
    req.mutable_input()->mutable_data()->resize(95);
    const auto st = call(req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("input.data has 95 bytes; shape [2,3,4] FLOAT32 needs 96"),
              std::string::npos)
        << st.error_message();
    EXPECT_NE(st.error_message().find("bad-size"), std::string::npos);
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 1, 4, "huge");
    req.mutable_input()->clear_shape();
    req.mutable_input()->add_shape(int64_t{1} << 40);
    req.mutable_input()->add_shape(int64_t{1} << 40);
    req.mutable_input()->add_shape(16);
    const auto st = call(req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("input.shape"), std::string::npos);
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 2, 4, "unset");
    req.clear_sinusoidal();
    const auto st = call(req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("scheme"), std::string::npos);
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 2, 4, "neg");
    req.mutable_positions()->add_offsets(-5);
    const auto st = call(req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("positions.offsets[0]"), std::string::npos);
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 2, 4, "nf");
    req.mutable_learned()->set_table("nope");
    const auto st = call(req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(st.error_message().find("learned.table 'nope'"), std::string::npos);
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 1024, 512, "big");  // 2 MiB > 1 MiB limit
    const auto st = call(req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 256, 256, "concat");  // 256 KiB in
    req.mutable_sinusoidal()->set_fusion(v1::CONCAT);
    req.mutable_sinusoidal()->set_pe_dim(1 << 20);  // output far over the limit
    const auto st = call(req);
    EXPECT_TRUE(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                st.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
        << st.error_code();
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() - std::chrono::seconds(1));
    EncodeResponse resp;
    EXPECT_EQ(stub->Encode(&ctx, SinusoidalRequest(1, 2, 4, "late"), &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // After all of that the server still answers correctly.
  grpc::ClientContext ctx;
  EncodeResponse resp;
  ASSERT_TRUE(stub->Encode(&ctx, SinusoidalRequest(1, 2, 4, "ok"), &resp).ok());
  EXPECT_NEAR(Floats(resp.output())[5], PaperPe(1, 1, 4), 1.2e-7);
}

TEST(Server, LearnedPastTheTableIsOutOfRange) {
  const std::string npy = WriteNpyF32("small.npy", 2, 2, {1, 2, 3, 4});
  ServerProcess server({"--table=small=" + npy});
  ASSERT_TRUE(server.started());
  EncodeRequest req;
  *req.mutable_input() = FloatTensor({1, 3, 2}, std::vector<float>(6, 0.0f));
  req.mutable_learned()->set_table("small");
  grpc::ClientContext ctx;
  EncodeResponse resp;
  const auto st = Stub(server)->Encode(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

TEST(Server, StreamAnswersInRequestOrder) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  grpc::ClientContext ctx;
  auto stream = Stub(server)->EncodeStream(&ctx);
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
  EXPECT_TRUE(stream->Finish().ok());
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
    inflight = MetricSum(HttpGet(server.metrics_port(), "/metrics"), "posenc_inflight_requests", {});
  }
  EXPECT_EQ(inflight, 0);
}

TEST(Server, StreamStopsAtABadRequestAfterEarlierAnswers) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  grpc::ClientContext ctx;
  auto stream = Stub(server)->EncodeStream(&ctx);
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "good")));
  EncodeRequest bad = SinusoidalRequest(1, 2, 4, "bad");
  bad.mutable_input()->mutable_data()->resize(3);
  stream->Write(bad);
  stream->WritesDone();
  EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "good");
  EXPECT_FALSE(stream->Read(&resp));
  const auto st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("bad"), std::string::npos);
}

TEST(Server, ClientThatNeverReadsDoesNotGrowServerMemory) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const long rss_before = server.RssKib();
  grpc::ClientContext ctx;
  auto stream = Stub(server)->EncodeStream(&ctx);
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

TEST(Server, HealthServingUntilSigtermThenInFlightStreamFinishes) {
  ServerProcess server({"--shutdown_grace=5s"});
  ASSERT_TRUE(server.started());
  auto channel = server.Channel();
  auto health = grpc::health::v1::Health::NewStub(channel);
  {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest hreq;
    grpc::health::v1::HealthCheckResponse hresp;
    ASSERT_TRUE(health->Check(&ctx, hreq, &hresp).ok());
    EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    grpc::ClientContext named_ctx;
    hreq.set_service("posenc.v1.PositionalEncoding");
    ASSERT_TRUE(health->Check(&named_ctx, hreq, &hresp).ok());
    EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  // Watch streams the status: SERVING now, NOT_SERVING once SIGTERM arrives.
  grpc::ClientContext watch_ctx;
  grpc::health::v1::HealthCheckRequest watch_req;
  auto watch = health->Watch(&watch_ctx, watch_req);
  grpc::health::v1::HealthCheckResponse watched;
  ASSERT_TRUE(watch->Read(&watched));
  EXPECT_EQ(watched.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  auto stub = v1::PositionalEncoding::NewStub(channel);
  grpc::ClientContext stream_ctx;
  auto stream = stub->EncodeStream(&stream_ctx);
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "before")));
  EncodeResponse resp;
  ASSERT_TRUE(stream->Read(&resp));

  server.Signal(SIGTERM);
  ASSERT_TRUE(watch->Read(&watched));
  EXPECT_EQ(watched.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  watch_ctx.TryCancel();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    // New calls are refused (the listener is closed or the call is turned away).
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    EncodeResponse r;
    const auto st = stub->Encode(&ctx, SinusoidalRequest(1, 2, 4, "after"), &r);
    EXPECT_FALSE(st.ok());
  }
  // The stream that was in flight still gets answers, within the grace period.
  ASSERT_TRUE(stream->Write(SinusoidalRequest(1, 2, 4, "during")));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "during");
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(server.Wait(), 0);
}

TEST(Server, MetricsScrapeCountsRequestsAndCache) {
  ServerProcess server({"--cache_bytes=200000"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  // Tables of 256 rows * d * 4 bytes (40960..49152 bytes, each within the quarter of the
  // budget a single table may take); five of them overflow the 200000-byte budget.
  for (int d : {40, 42, 44, 46, 48, 40}) {
    grpc::ClientContext ctx;
    EncodeResponse resp;
    ASSERT_TRUE(stub->Encode(&ctx, SinusoidalRequest(1, 4, d, "m"), &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    EncodeResponse resp;
    EncodeRequest bad = SinusoidalRequest(1, 4, 8, "bad");
    bad.mutable_input()->mutable_data()->resize(1);
    EXPECT_FALSE(stub->Encode(&ctx, bad, &resp).ok());
  }
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

TEST(Server, GetTableStreamsSinusoidalRowsInChunks) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  v1::TableRequest req;
  req.mutable_sinusoidal();
  req.set_length(1000);
  req.set_dim(12);
  req.set_rows_per_chunk(128);
  grpc::ClientContext ctx;
  auto reader = Stub(server)->GetTable(&ctx, req);
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
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(next, 1000);
  EXPECT_EQ(chunks, 8);
}

// HF's rotate_half RoPE in float64, written directly: x [seq, heads, dim] at positions
// offset + t.
std::vector<double> RopeReference(const std::vector<float>& x, int64_t seq, int64_t heads,
                                  int64_t dim, int64_t offset, double base) {
  std::vector<double> out(x.begin(), x.end());
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double angle = static_cast<double>(offset + t) * std::pow(base, -2.0 * i / dim);
        const int64_t a = (t * heads + h) * dim + i, b = a + dim / 2;
        out[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
        out[b] = x[b] * std::cos(angle) + x[a] * std::sin(angle);
      }
  return out;
}

TEST(Server, RopeRotatesQueriesAndGqaKeysInPlace) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const int64_t seq = 5, qh = 4, kh = 2, dim = 16;
  std::vector<float> q(seq * qh * dim), k(seq * kh * dim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37 * i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11 * i);
  EncodeRequest req;
  req.set_request_id("rope");
  *req.mutable_input() = FloatTensor({1, seq, qh, dim}, q);
  *req.mutable_key() = FloatTensor({1, seq, kh, dim}, k);
  req.mutable_positions()->add_offsets(1000);
  req.mutable_rope()->set_base(500000.0);
  EncodeResponse resp;
  grpc::ClientContext ctx;
  const auto st = Stub(server)->Encode(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto q_ref = RopeReference(q, seq, qh, dim, 1000, 500000.0);
  const auto k_ref = RopeReference(k, seq, kh, dim, 1000, 500000.0);
  const auto q_out = Floats(resp.output()), k_out = Floats(resp.key_output());
  ASSERT_EQ(q_out.size(), q.size());
  ASSERT_EQ(k_out.size(), k.size());
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q_out[i], q_ref[i], 2e-6) << i;
  for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k_out[i], k_ref[i], 2e-6) << i;
  EXPECT_EQ(resp.key_output().shape(2), kh);

  // An odd head_dim is refused, naming the field.
  EncodeRequest bad;
  *bad.mutable_input() = FloatTensor({1, 1, 1, 15}, std::vector<float>(15));
  bad.mutable_rope();
  grpc::ClientContext ctx2;
  const auto bad_st = Stub(server)->Encode(&ctx2, bad, &resp);
  EXPECT_EQ(bad_st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad_st.error_message().find("rotary_dim"), std::string::npos) << bad_st.error_message();
}

TEST(Server, GetTableStreamsRopeCosSin) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  v1::TableRequest req;
  req.mutable_rope()->mutable_scaling()->set_type(v1::LINEAR);
  req.mutable_rope()->mutable_scaling()->set_factor(4.0);
  req.set_length(300);
  req.set_dim(8);
  req.set_rows_per_chunk(100);
  grpc::ClientContext ctx;
  auto reader = Stub(server)->GetTable(&ctx, req);
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
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(next, 300);
}

TEST(Server, ReflectionListsTheService) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  // grpc.reflection.v1alpha ServerReflectionRequest{list_services: ""} is field 7, empty:
  // bytes 0x3a 0x00. The reply names the services; raw bytes keep this test free of the
  // reflection proto.
  grpc::GenericStub stub(server.Channel());
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                               &cq);
  void* tag;
  bool ok;
  auto next = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(next(1));
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, 2);
  call->Write(grpc::ByteBuffer(&slice, 1), reinterpret_cast<void*>(2));
  ASSERT_TRUE(next(2));
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(next(3));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("posenc.v1.PositionalEncoding"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  call->WritesDone(reinterpret_cast<void*>(4));
  next(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  next(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST(Server, AlibiBiasAndScoresInPlace) {
  ServerProcess server({"--max_message_bytes=8388608"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const int heads = 8, q = 4, k = 6;  // default query_offset = k - q = 2
  v1::BiasRequest req;
  req.set_query_length(q);
  req.set_key_length(k);
  req.mutable_alibi()->set_num_heads(heads);
  v1::BiasResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->AttentionBias(&ctx, req, &resp).ok());
  }
  ASSERT_EQ(resp.output().dtype(), v1::FLOAT32);
  auto bias = Floats(resp.output());
  ASSERT_EQ(bias.size(), static_cast<size_t>(heads * q * k));
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < q; ++i)
      for (int j = 0; j < k; ++j) {
        const double slope = std::pow(2.0, -8.0 * (h + 1) / heads);  // the paper, 8 heads
        ASSERT_NEAR(bias[(h * q + i) * k + j], -slope * std::abs(i + 2 - j), 1e-6);
      }
  // CAUSAL: -inf above the diagonal.
  req.mutable_alibi()->set_mode(v1::CAUSAL);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->AttentionBias(&ctx, req, &resp).ok());
  }
  bias = Floats(resp.output());
  EXPECT_TRUE(std::isinf(bias[0 * k + 3]) && bias[0 * k + 3] < 0);  // query 0 at 2, key 3
  EXPECT_NEAR(bias[0 * k + 1], -std::pow(2.0, -1.0), 1e-6);       // distance 1, head 0
  // Scores in bf16, [1, heads, q, k] of 1.0: the bias is added in place in bf16.
  req.mutable_alibi()->set_mode(v1::SYMMETRIC);
  v1::Tensor* scores = req.mutable_scores();
  scores->add_shape(1);
  scores->add_shape(heads);
  scores->add_shape(q);
  scores->add_shape(k);
  scores->set_dtype(v1::BFLOAT16);
  std::string ones(heads * q * k * 2, '\0');
  for (int i = 0; i < heads * q * k; ++i) {
    const uint16_t one = 0x3f80;
    std::memcpy(&ones[2 * i], &one, 2);
  }
  scores->set_data(ones);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->AttentionBias(&ctx, req, &resp).ok());
  }
  ASSERT_EQ(resp.output().dtype(), v1::BFLOAT16);
  ASSERT_EQ(resp.output().shape_size(), 4);
  uint16_t v;
  std::memcpy(&v, resp.output().data().data() + 2 * (0 * k + 0), 2);  // h0, q0 (pos 2), k0
  EXPECT_EQ(BFloat16ToFloat(v), BFloat16ToFloat(FloatToBFloat16(1.0f - 2 * 0.5f)));
  // Limits and bad parameters.
  v1::BiasRequest big;
  big.set_query_length(100000);
  big.set_key_length(100000);
  big.mutable_alibi()->set_num_heads(8);
  grpc::ClientContext ctx1;
  EXPECT_EQ(stub->AttentionBias(&ctx1, big, &resp).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  v1::BiasRequest zero = big;
  zero.mutable_alibi()->set_num_heads(0);
  zero.set_query_length(2);
  zero.set_key_length(2);
  grpc::ClientContext ctx2;
  const auto st = stub->AttentionBias(&ctx2, zero, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("alibi.num_heads"), std::string::npos) << st.error_message();
}

TEST(Server, T5BucketsAndTableBias) {
  std::vector<float> table(32 * 2);
  for (int b = 0; b < 32; ++b) {
    table[b * 2] = static_cast<float>(b);
    table[b * 2 + 1] = -static_cast<float>(b);
  }
  const std::string npy = WriteNpyF32("t5.npy", 32, 2, table);
  ServerProcess server({"--table=t5rel=" + npy});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  v1::BiasRequest req;
  req.set_query_length(1);
  req.set_key_length(401);
  req.set_query_offset(200);  // relative = key - 200: -200..200
  req.mutable_t5()->set_bidirectional(true);
  v1::BiasResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->AttentionBias(&ctx, req, &resp).ok());
  }
  ASSERT_EQ(resp.output().dtype(), v1::INT32);
  std::vector<int32_t> ids(resp.output().data().size() / 4);
  std::memcpy(ids.data(), resp.output().data().data(), ids.size() * 4);
  // HF's _relative_position_bucket, 32 buckets, max_distance 128, bidirectional, by hand:
  // 0 -> 0; +1 -> 16+1; -1 -> 1; +20 -> 16 + 8 + floor(log(20/8)/log(16)*8) = 26;
  // +-200 -> capped at 31 / 15.
  EXPECT_EQ(ids[200], 0);
  EXPECT_EQ(ids[201], 17);
  EXPECT_EQ(ids[199], 1);
  EXPECT_EQ(ids[220], 26);
  EXPECT_EQ(ids[400], 31);
  EXPECT_EQ(ids[0], 15);
  req.mutable_t5()->set_table("t5rel");
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->AttentionBias(&ctx, req, &resp).ok());
  }
  const auto bias = Floats(resp.output());
  ASSERT_EQ(bias.size(), 2u * 401);
  EXPECT_EQ(bias[220], 26.0f);         // head 0 reads column 0
  EXPECT_EQ(bias[401 + 220], -26.0f);  // head 1 reads column 1
  req.mutable_t5()->set_table("absent");
  grpc::ClientContext ctx;
  EXPECT_EQ(stub->AttentionBias(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(Server, GraphEncodeRingEigenpairsAndConcatenatedInput) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
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
  grpc::ClientContext ctx;
  const auto st = Stub(server)->GraphEncode(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
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
  grpc::ClientContext ctx2;
  const auto bad = Stub(server)->GraphEncode(&ctx2, req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("edges["), std::string::npos) << bad.error_message();
}

TEST(Server, HierarchicalAndContinuous) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const int64_t s = 3, d = 4;
  EncodeRequest req;
  *req.mutable_input() = FloatTensor({1, s, d}, std::vector<float>(s * d, 0.0f));
  v1::Level* word = req.mutable_hierarchical()->add_levels();
  for (int64_t id : {0, 1, 0}) word->add_ids(id);
  v1::Level* sentence = req.mutable_hierarchical()->add_levels();
  for (int64_t id : {0, 0, 1}) sentence->add_ids(id);
  sentence->set_scale(0.5f);
  EncodeResponse resp;
  {
    grpc::ClientContext ctx;
    const auto st = stub->Encode(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  auto out = Floats(resp.output());
  const int64_t w[] = {0, 1, 0}, p[] = {0, 0, 1};
  for (int64_t t = 0; t < s; ++t)
    for (int64_t c = 0; c < d; ++c)
      EXPECT_NEAR(out[t * d + c], PaperPe(w[t], c, d) + 0.5 * PaperPe(p[t], c, d), 2.5e-7);

  EncodeRequest cont;
  *cont.mutable_input() = FloatTensor({s, d}, std::vector<float>(s * d, 1.0f));
  for (double v : {0.0, 0.5, 2.0}) cont.mutable_positions()->add_values(v);
  cont.mutable_continuous()->set_value_scale(10.0);
  {
    grpc::ClientContext ctx;
    const auto st = stub->Encode(&ctx, cont, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  out = Floats(resp.output());
  const double pos[] = {0.0, 5.0, 20.0};
  for (int64_t t = 0; t < s; ++t)
    for (int64_t c = 0; c < d; ++c) {
      const double angle = pos[t] / std::pow(10000.0, 2.0 * (c / 2) / d);
      EXPECT_NEAR(out[t * d + c], 1.0 + (c % 2 ? std::cos(angle) : std::sin(angle)), 2.5e-7);
    }
  // values are only for continuous
  EncodeRequest wrong = cont;
  wrong.mutable_sinusoidal();
  grpc::ClientContext ctx;
  EXPECT_EQ(stub->Encode(&ctx, wrong, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(Server, UnixSocketListen) {
  const std::string sock = ::testing::TempDir() + "/posenc-" + std::to_string(getpid()) + ".sock";
  ServerProcess server({"--listen=unix:" + sock});
  ASSERT_TRUE(server.started());
  EXPECT_EQ(server.grpc_address(), "unix:" + sock);
  // The start line names the socket, not a port, so talk to it directly.
  auto channel = grpc::CreateChannel("unix:" + sock, grpc::InsecureChannelCredentials());
  auto stub = v1::PositionalEncoding::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.set_wait_for_ready(true);
  v1::ListSchemesResponse resp;
  EXPECT_TRUE(stub->ListSchemes(&ctx, {}, &resp).ok());
}

}  // namespace
}  // namespace posenc::testing
