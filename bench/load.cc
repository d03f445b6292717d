#include "bench/load.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/shm_region.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/schemes/absolute_scheme.h"
#include "server/tables/table_cache.h"
#include "tests/support/server_child.h"

namespace posenc::bench {
namespace {

// A server binary run as a child process on 127.0.0.1:0; exits the bench if it does not
// start, and stops it with SIGTERM.
class ChildServer {
 public:
  ChildServer(const std::string& name, std::vector<std::string> args)
      : child_(args, std::chrono::seconds(30)) {
    if (!child_.started()) {
      std::fprintf(stderr, "posenc-bench: %s (%s) did not start: '%s'\n", name.c_str(),
                   args[0].c_str(), child_.start_line().c_str());
      std::exit(1);
    }
  }
  ~ChildServer() {
    child_.Signal(SIGTERM);
    child_.Wait();
  }
  const std::string& address() const { return child_.grpc_address(); }

 private:
  testing::ServerChild child_;
};

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per worker
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return channel;
}

constexpr char kEncodeMethod[] = "/posenc.v1.PositionalEncoding/Encode";
constexpr char kStreamMethod[] = "/posenc.v1.PositionalEncoding/EncodeStream";

// One blocking unary call of pre-serialised bytes.
grpc::Status UnaryCall(grpc::GenericStub& stub, const grpc::ByteBuffer& request,
                       grpc::ByteBuffer* response) {
  grpc::ClientContext context;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, kEncodeMethod, grpc::StubOptions(), &request, response,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = std::move(s);
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

// One EncodeStream that sends a request, waits for its response, and repeats until the
// deadline: each message's latency is one round trip on an open stream.
class LockstepStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  LockstepStream(grpc::GenericStub& stub, const grpc::ByteBuffer& request,
                 Clock::time_point deadline, std::vector<double>* latencies_ms)
      : request_(request), deadline_(deadline), latencies_ms_(latencies_ms) {
    stub.PrepareBidiStreamingCall(&context_, kStreamMethod, grpc::StubOptions(), this);
    StartCall();
    SendNextLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    write_done_ = true;
    failed_ |= !ok;
    MaybeNextLocked();
  }
  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) latencies_ms_->push_back(SecondsSince(sent_) * 1e3);
    read_done_ = true;
    failed_ |= !ok;
    MaybeNextLocked();
  }
  void OnDone(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    done_ = true;
    cv_.notify_one();
  }
  grpc::Status Await() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

 private:
  void SendNextLocked() {
    write_done_ = read_done_ = false;
    sent_ = Clock::now();
    StartWrite(&request_);
    StartRead(&response_);
  }
  void MaybeNextLocked() {
    if (!write_done_ || !read_done_ || closing_) return;
    if (failed_ || Clock::now() >= deadline_) {
      closing_ = true;
      if (!failed_) StartWritesDone();
      return;
    }
    SendNextLocked();
  }

  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  Clock::time_point deadline_;
  std::vector<double>* latencies_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  Clock::time_point sent_;
  bool write_done_ = false, read_done_ = false, failed_ = false, closing_ = false;
  bool done_ = false;
  grpc::Status status_;
};

struct CellResult {
  int64_t requests = 0;
  double seconds = 0;
  double rps = 0, mbps = 0, p50_ms = 0, p99_ms = 0;
};

double Percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1,
                            static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())) - 1));
  return sorted[i];
}

// Worker w sends requests[w % requests.size()] (one request shared, or one per worker).
CellResult RunCell(const std::vector<std::shared_ptr<grpc::Channel>>& channels, bool streaming,
                   const std::vector<grpc::ByteBuffer>& requests, size_t payload_bytes,
                   int concurrency, double seconds) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(concurrency));
  std::vector<std::thread> workers;
  std::atomic<int> errors{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&, w] {
      grpc::GenericStub stub(channels[static_cast<size_t>(w)]);
      std::vector<double>& mine = latencies[static_cast<size_t>(w)];
      const grpc::ByteBuffer& request = requests[static_cast<size_t>(w) % requests.size()];
      if (streaming) {
        LockstepStream stream(stub, request, deadline, &mine);
        if (!stream.Await().ok()) errors++;
        return;
      }
      while (Clock::now() < deadline) {
        grpc::ByteBuffer response;
        const Clock::time_point t = Clock::now();
        if (!UnaryCall(stub, request, &response).ok()) {
          errors++;
          return;
        }
        mine.push_back(SecondsSince(t) * 1e3);
      }
    });
  }
  for (auto& t : workers) t.join();
  CellResult r;
  r.seconds = SecondsSince(start);
  if (errors > 0) {
    std::fprintf(stderr, "posenc-bench: %d workers saw an RPC error\n", errors.load());
    std::exit(1);
  }
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  r.requests = static_cast<int64_t>(all.size());
  r.rps = static_cast<double>(r.requests) / r.seconds;
  r.mbps = r.rps * static_cast<double>(payload_bytes) / 1e6;
  r.p50_ms = Percentile(all, 0.50);
  r.p99_ms = Percentile(all, 0.99);
  return r;
}

// The embeddings [nb, seq, 1024] float32 of `payload_bytes`.
Shape PayloadShape(size_t payload_bytes) {
  const int64_t dim = 1024;
  const int64_t rows = static_cast<int64_t>(payload_bytes / sizeof(float)) / dim;
  const int64_t seq = std::min<int64_t>(rows, 1024);
  return {rows / seq, seq, dim};
}

grpc::ByteBuffer Serialize(const v1::EncodeRequest& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  grpc::GenericSerialize<grpc::ProtoBufferWriter, v1::EncodeRequest>(message, &buffer, &own);
  return buffer;
}

// A sinusoidal ADD request on fp32 embeddings [nb, seq, 1024] of `payload_bytes`, filled
// with 0.25; the echo receives the very same bytes.
grpc::ByteBuffer MakeRequest(size_t payload_bytes, v1::EncodeRequest* message) {
  message->set_request_id("bench");
  v1::Tensor* input = message->mutable_input();
  for (int64_t d : PayloadShape(payload_bytes)) input->add_shape(d);
  input->set_dtype(v1::FLOAT32);
  std::string data(payload_bytes, '\0');
  FillFloats(data.data(), DType::kFloat32, payload_bytes / sizeof(float), 0.25f);
  input->set_data(std::move(data));
  message->mutable_sinusoidal();
  return Serialize(*message);
}

// One call, its answer parsed and checked: posenc adds cos(0) = 1 to feature 1 of
// position 0; the echo returns the input.
void Verify(const std::string& name, grpc::GenericStub& stub, const grpc::ByteBuffer& request,
            size_t payload_bytes, bool echo) {
  grpc::ByteBuffer response;
  const grpc::Status status = UnaryCall(stub, request, &response);
  v1::EncodeResponse parsed;
  const bool ok = status.ok() &&
                  grpc::GenericDeserialize<grpc::ProtoBufferReader, v1::EncodeResponse>(
                      &response, &parsed)
                      .ok() &&
                  parsed.output().data().size() == payload_bytes;
  float value = 0;
  if (ok) std::memcpy(&value, parsed.output().data().data() + sizeof(float), sizeof(float));
  const float expected = echo ? 0.25f : 1.25f;
  if (!ok || std::fabs(value - expected) > 1e-6f) {
    std::fprintf(stderr, "posenc-bench: %s answered wrongly (%s; x[1] = %g, expected %g)\n",
                 name.c_str(), status.error_message().c_str(), value, expected);
    std::exit(1);
  }
}

// What both load sections share: the server's flags, the payloads, a cell's time and filter.

std::vector<std::string> ServerArgs(const Options& o, std::vector<std::string> extra) {
  std::vector<std::string> args = {o.server_binary, "--listen=127.0.0.1:0", "--metrics_listen="};
  args.insert(args.end(), extra.begin(), extra.end());
  if (o.threads > 0) args.push_back(absl::StrCat("--threads=", o.threads));
  return args;
}

std::vector<size_t> Payloads(const Options& o) {
  if (o.quick) return {64 << 10, 1 << 20};
  return {64 << 10, 1 << 20, 4 << 20, 48 << 20};
}

// 48 MiB cells get 2.5x the time: fewer, longer calls.
double CellSeconds(const Options& o, size_t payload) {
  return o.cell_seconds * (payload >= (size_t{16} << 20) ? 2.5 : 1.0);
}

bool Selected(const Options& o, const std::string& cell) {
  return o.filter.empty() || cell.find(o.filter) != std::string::npos;
}

std::vector<std::shared_ptr<grpc::Channel>> Channels(const std::string& address) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 8; ++i) channels.push_back(MakeChannel(address));
  return channels;
}

// One side of a cell: where its calls go and what they send.
struct Side {
  const std::vector<std::shared_ptr<grpc::Channel>>& channels;
  const std::vector<grpc::ByteBuffer>& requests;
};

// `first` then `second`, each after a warm-up of the channels the cell uses, alternating
// over o.rounds; each keeps its best, so a noisy round hurts neither.
std::pair<CellResult, CellResult> BestOfRounds(const Options& o, const Side& first,
                                               const Side& second, bool streaming, size_t payload,
                                               int concurrency) {
  const double seconds = CellSeconds(o, payload);
  const double warm = std::min(0.1, seconds / 4);
  CellResult best_first, best_second;
  for (int round = 0; round < o.rounds; ++round) {
    RunCell(first.channels, streaming, first.requests, payload, concurrency, warm);
    CellResult a = RunCell(first.channels, streaming, first.requests, payload, concurrency, seconds);
    RunCell(second.channels, streaming, second.requests, payload, concurrency, warm);
    CellResult b = RunCell(second.channels, streaming, second.requests, payload, concurrency, seconds);
    if (a.mbps > best_first.mbps) best_first = a;
    if (b.mbps > best_second.mbps) best_second = b;
  }
  return {best_first, best_second};
}

json E2eRow(bool streaming, size_t payload, int concurrency, const CellResult& posenc,
            const CellResult& echo) {
  return {{"rpc", streaming ? "EncodeStream" : "Encode"},
          {"scheme", "sinusoidal_add_fp32"},
          {"payload_bytes", payload},
          {"concurrency", concurrency},
          {"posenc_rps", posenc.rps},
          {"echo_rps", echo.rps},
          {"posenc_mbps", posenc.mbps},
          {"echo_mbps", echo.mbps},
          {"ratio", posenc.mbps / echo.mbps},
          {"posenc_p50_ms", posenc.p50_ms},
          {"echo_p50_ms", echo.p50_ms},
          {"posenc_p99_ms", posenc.p99_ms},
          {"echo_p99_ms", echo.p99_ms},
          {"p99_ratio", posenc.p99_ms / echo.p99_ms},
          {"posenc_requests", posenc.requests},
          {"echo_requests", echo.requests}};
}

}  // namespace

json RunE2e(const Options& o) {
  ChildServer posenc("posenc-server", ServerArgs(o, {}));
  ChildServer echo("posenc-bench-echo", {o.echo_binary, "--listen=127.0.0.1:0"});
  const auto posenc_channels = Channels(posenc.address());
  const auto echo_channels = Channels(echo.address());
  json results = json::array();
  for (size_t payload : Payloads(o)) {
    v1::EncodeRequest message;
    const std::vector<grpc::ByteBuffer> requests = {MakeRequest(payload, &message)};
    {
      grpc::GenericStub posenc_stub(posenc_channels[0]);
      grpc::GenericStub echo_stub(echo_channels[0]);
      Verify("posenc-server", posenc_stub, requests[0], payload, false);
      Verify("posenc-bench-echo", echo_stub, requests[0], payload, true);
    }
    for (bool streaming : {false, true}) {
      for (int concurrency : {1, 8}) {
        if (!Selected(o, absl::StrCat(streaming ? "EncodeStream " : "Encode ",
                                      PayloadLabel(payload), " x", concurrency))) {
          continue;
        }
        // Echo first, then posenc.
        const auto [echo_best, posenc_best] =
            BestOfRounds(o, {echo_channels, requests}, {posenc_channels, requests}, streaming,
                         payload, concurrency);
        if (!o.json) {
          std::fprintf(stderr, "  e2e %-12s %9zu B x%d: posenc %8.1f MB/s echo %8.1f MB/s\n",
                       streaming ? "EncodeStream" : "Encode", payload, concurrency,
                       posenc_best.mbps, echo_best.mbps);
        }
        results.push_back(E2eRow(streaming, payload, concurrency, posenc_best, echo_best));
      }
    }
  }
  return results;
}

namespace {

// The in-process kernel alone on `shape` (sinusoidal ADD, fp32): the ceiling any transport
// can reach. Returns payload MB/s.
double KernelMbps(const Shape& shape, size_t payload_bytes) {
  Buffer x(payload_bytes);
  FillFloats(x.data(), DType::kFloat32, payload_bytes / sizeof(float), 0.25f);
  TableCache cache(size_t{256} << 20);
  const double s = BestSeconds(
      [&] {
        TensorView view{DType::kFloat32, shape, x.data()};
        Check(ApplySinusoidal(SinusoidalSpec{}, CombineSpec{}, view, PositionsSpec{}, cache,
                              SchemeLimits{})
                  .status(),
              "ApplySinusoidal");
      },
      0.3);
  return static_cast<double>(payload_bytes) / s / 1e6;
}

// A region of 8 payloads under `key`, its first two filled with 0.25, registered as "bench".
client::ShmRegion RegisterRegion(v1::PositionalEncoding::Stub& stub, const std::string& key,
                                 size_t payload) {
  absl::StatusOr<client::ShmRegion> region = client::ShmRegion::Create(key, 8 * payload);
  Check(region.status(), "ShmRegion::Create");
  FillFloats(region->bytes().data(), DType::kFloat32, 2 * payload / sizeof(float), 0.25f);
  grpc::ClientContext ctx;
  v1::RegisterSharedMemoryResponse resp;
  const grpc::Status st = stub.RegisterSharedMemory(&ctx, region->RegisterRequest("bench"), &resp);
  if (!st.ok()) Check(absl::UnknownError(st.error_message()), "RegisterSharedMemory");
  return std::move(*region);
}

void UnregisterRegion(v1::PositionalEncoding::Stub& stub) {
  grpc::ClientContext ctx;
  v1::UnregisterSharedMemoryRequest unregister;
  unregister.set_name("bench");
  v1::UnregisterSharedMemoryResponse resp;
  stub.UnregisterSharedMemory(&ctx, unregister, &resp);
}

// One Encode by reference per worker, each on its own slice of the region; the first is
// checked once: position 0, feature 1 gains cos(0) = 1.
std::vector<grpc::ByteBuffer> ShmRequests(v1::PositionalEncoding::Stub& stub,
                                          const client::ShmRegion& region, size_t payload) {
  std::vector<grpc::ByteBuffer> requests;
  for (int w = 0; w < 8; ++w) {
    v1::EncodeRequest m;
    for (int64_t d : PayloadShape(payload)) m.mutable_input()->add_shape(d);
    m.mutable_input()->set_dtype(v1::FLOAT32);
    *m.mutable_input()->mutable_shm() = client::ShmRegion::Ref("bench", w * payload, payload);
    m.mutable_sinusoidal();
    requests.push_back(Serialize(m));
    if (w != 0) continue;
    grpc::ClientContext ctx;
    v1::EncodeResponse resp;
    const grpc::Status st = stub.Encode(&ctx, m, &resp);
    float value = 0;
    std::memcpy(&value, region.bytes().data() + sizeof(float), sizeof(float));
    if (!st.ok() || std::fabs(value - 1.25f) > 1e-6f) {
      std::fprintf(stderr, "posenc-bench: Encode by reference answered wrongly (%s, %g)\n",
                   st.error_message().c_str(), value);
      std::exit(1);
    }
  }
  return requests;
}

json ShmRow(size_t payload, int concurrency, const CellResult& shm, const CellResult& inline_,
            double kernel_mbps) {
  return {{"rpc", "Encode"},
          {"payload_bytes", payload},
          {"concurrency", concurrency},
          {"shm_mbps", shm.mbps},
          {"inline_mbps", inline_.mbps},
          {"kernel_mbps", kernel_mbps},
          {"speedup", shm.mbps / inline_.mbps},
          {"kernel_ratio", shm.mbps / kernel_mbps},
          {"shm_p50_ms", shm.p50_ms},
          {"inline_p50_ms", inline_.p50_ms}};
}

}  // namespace

// Encode by shared-memory reference against the same Encode inline and the kernel alone, in
// one run: each worker rotates its own slice of one region in place.
json RunShm(const Options& o) {
  ChildServer posenc("posenc-server --shm", ServerArgs(o, {"--shm"}));
  const auto channels = Channels(posenc.address());
  auto stub = v1::PositionalEncoding::NewStub(channels[0]);
  json results = json::array();
  for (size_t payload : Payloads(o)) {
    const client::ShmRegion region =
        RegisterRegion(*stub, absl::StrCat("/posenc_bench_", getpid(), "_", payload), payload);
    const std::vector<grpc::ByteBuffer> shm_requests = ShmRequests(*stub, region, payload);
    v1::EncodeRequest inline_message;
    const std::vector<grpc::ByteBuffer> inline_requests = {MakeRequest(payload, &inline_message)};
    const double kernel_mbps = KernelMbps(PayloadShape(payload), payload);
    for (int concurrency : {1, 8}) {
      if (!Selected(o, absl::StrCat("shm Encode ", PayloadLabel(payload), " x", concurrency))) {
        continue;
      }
      // Inline first, then by reference.
      const auto [inline_best, shm_best] = BestOfRounds(
          o, {channels, inline_requests}, {channels, shm_requests}, false, payload, concurrency);
      results.push_back(ShmRow(payload, concurrency, shm_best, inline_best, kernel_mbps));
      if (!o.json) {
        std::fprintf(stderr, "  shm Encode %9zu B x%d: shm %8.1f MB/s inline %8.1f MB/s\n",
                     payload, concurrency, shm_best.mbps, inline_best.mbps);
      }
    }
    UnregisterRegion(*stub);
  }
  return results;
}

}  // namespace posenc::bench
