#include "bench/load.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/shm_region.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.grpc.pb.h"
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

// The rpcs of one front: posenc.v1 (Encode, EncodeStream) or the Open Inference Protocol
// (ModelInfer, ModelStreamInfer). Both servers serve both.
struct Front {
  const char* unary_rpc;
  const char* stream_rpc;
  const char* unary_method;
  const char* stream_method;
  bool inference;
};
constexpr Front kNativeFront{"Encode", "EncodeStream", "/posenc.v1.PositionalEncoding/Encode",
                             "/posenc.v1.PositionalEncoding/EncodeStream", false};
constexpr Front kInferenceFront{"ModelInfer", "ModelStreamInfer",
                                "/inference.GRPCInferenceService/ModelInfer",
                                "/inference.GRPCInferenceService/ModelStreamInfer", true};

// One blocking unary call of pre-serialised bytes.
grpc::Status UnaryCall(grpc::GenericStub& stub, const char* method, const grpc::ByteBuffer& request,
                       grpc::ByteBuffer* response) {
  grpc::ClientContext context;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, response, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

// One stream that sends a request, waits for its response, and repeats until the deadline
// or `max_messages` (0: no limit), at least once: each message's latency is one round trip
// on an open stream. With `last_response`, the last answer is kept there.
class LockstepStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  LockstepStream(grpc::GenericStub& stub, const char* method, const grpc::ByteBuffer& request,
                 Clock::time_point deadline, std::vector<double>* latencies_ms,
                 grpc::ByteBuffer* last_response = nullptr, int64_t max_messages = 0)
      : request_(request), deadline_(deadline), latencies_ms_(latencies_ms),
        last_response_(last_response), max_messages_(max_messages) {
    stub.PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(), this);
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
    if (ok) {
      latencies_ms_->push_back(SecondsSince(sent_) * 1e3);
      if (last_response_) *last_response_ = response_;
    }
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
    if (failed_ || Clock::now() >= deadline_ ||
        (max_messages_ > 0 && static_cast<int64_t>(latencies_ms_->size()) >= max_messages_)) {
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
  grpc::ByteBuffer* last_response_;
  const int64_t max_messages_;
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
  const size_t i =
      std::min(sorted.size() - 1,
               static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())) - 1));
  return sorted[i];
}

using Channels = std::vector<std::shared_ptr<grpc::Channel>>;

// Where a cell's calls go and what they send: each round opens its connections with
// connect(), and worker w calls over channels[w % channels] with requests[w % requests]
// (one request shared, or one per worker).
struct Side {
  std::function<Channels()> connect;
  const std::vector<grpc::ByteBuffer>& requests;
};

CellResult RunCell(const Channels& channels, const std::vector<grpc::ByteBuffer>& requests,
                   const Front& front, bool streaming, size_t payload_bytes, int concurrency,
                   double seconds) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(concurrency));
  std::vector<std::thread> workers;
  std::atomic<int> errors{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&, w] {
      const size_t i = static_cast<size_t>(w);
      grpc::GenericStub stub(channels[i % channels.size()]);
      std::vector<double>& mine = latencies[i];
      const grpc::ByteBuffer& request = requests[i % requests.size()];
      if (streaming) {
        LockstepStream stream(stub, front.stream_method, request, deadline, &mine);
        if (!stream.Await().ok()) errors++;
        return;
      }
      while (Clock::now() < deadline) {
        grpc::ByteBuffer response;
        const Clock::time_point t = Clock::now();
        if (!UnaryCall(stub, front.unary_method, request, &response).ok()) {
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

// The embeddings [nb, seq, dim] float32 of `payload_bytes`: dim 1024 (256 below 4 KiB),
// seq up to 1024.
Shape PayloadShape(size_t payload_bytes) {
  const int64_t floats = static_cast<int64_t>(payload_bytes / sizeof(float));
  const int64_t dim = std::min<int64_t>(1024, floats);
  const int64_t rows = floats / dim;
  const int64_t seq = std::min<int64_t>(rows, 1024);
  return {rows / seq, seq, dim};
}

std::string ShapeLabel(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

template <typename Message>
grpc::ByteBuffer Serialize(const Message& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  grpc::GenericSerialize<grpc::ProtoBufferWriter, Message>(message, &buffer, &own);
  return buffer;
}

std::string Floats(const Shape& shape, float value) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string data(static_cast<size_t>(n) * sizeof(float), '\0');
  FillFloats(data.data(), DType::kFloat32, static_cast<size_t>(n), value);
  return data;
}

// What a cell sends, the same bytes to posenc and to the echo, and how an answer is checked:
// float `check_index` of the first output is `expected` from posenc (the echo returns the
// input, 0.25 everywhere), and the outputs hold payload_bytes in all.
struct Workload {
  std::string scheme;  // "sinusoidal_add_fp32", "rope_decode_fp32"
  std::string label;   // the cell's name for --filter: "16 KiB", "rope [1,1,32,128]"
  std::string shape;   // the tensors: "[1,4,1024]", "[1,1,32,128]+key[1,1,8,128]"
  size_t payload_bytes = 0;
  grpc::ByteBuffer native_request;     // EncodeRequest
  grpc::ByteBuffer inference_request;  // ModelInferRequest
  size_t check_index = 0;
  float expected = 0;
  const grpc::ByteBuffer& RequestFor(const Front& front) const {
    return front.inference ? inference_request : native_request;
  }
};

constexpr float kFill = 0.25f;

void AddInferInput(const std::string& name, const Shape& shape, inference::ModelInferRequest& r) {
  auto* in = r.add_inputs();
  in->set_name(name);
  in->set_datatype("FP32");
  for (int64_t d : shape) in->add_shape(d);
  r.add_raw_input_contents(Floats(shape, kFill));
}

// Sinusoidal ADD on fp32 embeddings of `payload_bytes` filled with 0.25: position 0,
// feature 1 gains cos(0) = 1.
Workload SinusoidalWorkload(size_t payload_bytes) {
  const Shape shape = PayloadShape(payload_bytes);
  Workload w;
  w.scheme = "sinusoidal_add_fp32";
  w.label = PayloadLabel(payload_bytes);
  w.shape = ShapeLabel(shape);
  w.payload_bytes = payload_bytes;
  v1::EncodeRequest m;
  m.set_request_id("bench");
  for (int64_t d : shape) m.mutable_input()->add_shape(d);
  m.mutable_input()->set_dtype(v1::FLOAT32);
  m.mutable_input()->set_data(Floats(shape, kFill));
  m.mutable_sinusoidal();
  w.native_request = Serialize(m);
  inference::ModelInferRequest r;
  r.set_model_name("sinusoidal");
  r.set_id("bench");
  AddInferInput("input", shape, r);
  w.inference_request = Serialize(r);
  w.check_index = 1;
  w.expected = kFill + 1.0f;
  return w;
}

// A decode step of RoPE (NEOX, base 10000, BSHD): queries [batch, 1, 32, 128] and keys
// [batch, 1, 8, 128] at positions 1000 + b (a KV cache already 1000 long). Feature 0 of
// row 0 pairs with feature 64 at angle 1000 * inv_freq[0] = 1000 rad.
constexpr int64_t kDecodeOffset = 1000;
Workload RopeDecodeWorkload(int64_t batch) {
  const Shape q = {batch, 1, 32, 128}, k = {batch, 1, 8, 128};
  Workload w;
  w.scheme = "rope_decode_fp32";
  w.label = absl::StrCat("rope ", ShapeLabel(q));
  w.shape = absl::StrCat(ShapeLabel(q), "+key", ShapeLabel(k));
  w.payload_bytes = static_cast<size_t>((batch * 32 * 128 + batch * 8 * 128) * 4);
  v1::EncodeRequest m;
  m.set_request_id("bench");
  for (int64_t d : q) m.mutable_input()->add_shape(d);
  m.mutable_input()->set_dtype(v1::FLOAT32);
  m.mutable_input()->set_data(Floats(q, kFill));
  for (int64_t d : k) m.mutable_key()->add_shape(d);
  m.mutable_key()->set_dtype(v1::FLOAT32);
  m.mutable_key()->set_data(Floats(k, kFill));
  for (int64_t b = 0; b < batch; ++b) m.mutable_positions()->add_offsets(kDecodeOffset + b);
  m.mutable_rope();
  w.native_request = Serialize(m);
  inference::ModelInferRequest r;
  r.set_model_name("rope");
  r.set_id("bench");
  AddInferInput("input", q, r);
  AddInferInput("key", k, r);
  std::string positions = absl::StrCat(R"({"offsets": [)");
  for (int64_t b = 0; b < batch; ++b) {
    absl::StrAppend(&positions, b ? ", " : "", "\"", kDecodeOffset + b, "\"");
  }
  absl::StrAppend(&positions, "]}");
  (*r.mutable_parameters())["positions"].set_string_param(positions);
  w.inference_request = Serialize(r);
  const double angle = static_cast<double>(kDecodeOffset);
  w.check_index = 0;
  w.expected = static_cast<float>(kFill * (std::cos(angle) - std::sin(angle)));
  return w;
}

// The answer's tensor bytes in all and its first output's float `index`, or false when it
// is not a successful answer of `front`.
bool ParseAnswer(const Front& front, bool streaming, grpc::ByteBuffer& buffer, size_t index,
                 size_t* bytes, float* value) {
  std::string first;
  *bytes = 0;
  if (!front.inference) {
    v1::EncodeResponse parsed;
    if (!grpc::GenericDeserialize<grpc::ProtoBufferReader, v1::EncodeResponse>(&buffer, &parsed)
             .ok()) {
      return false;
    }
    first = parsed.output().data();
    *bytes = first.size() + parsed.key_output().data().size();
  } else {
    inference::ModelInferResponse parsed;
    if (streaming) {
      inference::ModelStreamInferResponse stream;
      if (!grpc::GenericDeserialize<grpc::ProtoBufferReader, inference::ModelStreamInferResponse>(
               &buffer, &stream)
               .ok() ||
          !stream.error_message().empty()) {
        return false;
      }
      parsed = stream.infer_response();
    } else if (!grpc::GenericDeserialize<grpc::ProtoBufferReader, inference::ModelInferResponse>(
                    &buffer, &parsed)
                    .ok()) {
      return false;
    }
    if (parsed.raw_output_contents_size() == 0) return false;
    first = parsed.raw_output_contents(0);
    for (const std::string& c : parsed.raw_output_contents()) *bytes += c.size();
  }
  if (first.size() < (index + 1) * sizeof(float)) return false;
  std::memcpy(value, first.data() + index * sizeof(float), sizeof(float));
  return true;
}

// One unary call and one stream message, their answers parsed and checked.
void Verify(const std::string& name, const std::shared_ptr<grpc::Channel>& channel,
            const Front& front, const Workload& w, bool echo) {
  grpc::GenericStub stub(channel);
  const float expected = echo ? kFill : w.expected;
  for (bool streaming : {false, true}) {
    grpc::ByteBuffer response;
    grpc::Status status;
    if (streaming) {
      std::vector<double> latencies;
      LockstepStream stream(stub, front.stream_method, w.RequestFor(front), Clock::now(),
                            &latencies, &response);
      status = stream.Await();
    } else {
      status = UnaryCall(stub, front.unary_method, w.RequestFor(front), &response);
    }
    size_t bytes = 0;
    float value = 0;
    const bool ok = status.ok() &&
                    ParseAnswer(front, streaming, response, w.check_index, &bytes, &value) &&
                    bytes == w.payload_bytes;
    if (!ok || std::fabs(value - expected) > 1e-5f) {
      std::fprintf(stderr,
                   "posenc-bench: %s answered %s %s wrongly (%s; %zu bytes; x[%zu] = %g, "
                   "expected %g)\n",
                   name.c_str(), streaming ? front.stream_rpc : front.unary_rpc, w.shape.c_str(),
                   status.error_message().c_str(), bytes, w.check_index, value, expected);
      std::exit(1);
    }
  }
}

// What both load sections share: the server's flags, the payloads, a cell's time and filter.

// Admission is not what the bench measures: the call limit leaves room for 64 workers.
std::vector<std::string> ServerArgs(const Options& o, std::vector<std::string> extra) {
  std::vector<std::string> args = {o.server_binary, "--listen=127.0.0.1:0", "--metrics_listen=",
                                   "--http_listen=", "--max_concurrent_calls=1024"};
  args.insert(args.end(), extra.begin(), extra.end());
  if (o.threads > 0) args.push_back(absl::StrCat("--threads=", o.threads));
  return args;
}

std::vector<size_t> Payloads(const Options& o) {
  if (o.quick) return {16 << 10, 1 << 20};
  return {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 48 << 20};
}

// Concurrency 64 up to 1 MiB: 64 calls of 48 MiB would not fit a default admission budget
// (nor this machine's memory beside the echo's).
std::vector<int> Concurrencies(const Options& o, size_t payload) {
  if (o.quick) return {1, 8};
  if (payload <= (size_t{1} << 20)) return {1, 8, 64};
  return {1, 8};
}

// Small cells get half the time (they make thousands of calls in it), 48 MiB 2.5x: fewer,
// longer calls.
double CellSeconds(const Options& o, size_t payload) {
  if (payload >= (size_t{16} << 20)) return o.cell_seconds * 2.5;
  if (payload < (size_t{1} << 20)) return o.cell_seconds * 0.5;
  return o.cell_seconds;
}

bool Selected(const Options& o, const std::string& cell) {
  return o.filter.empty() || cell.find(o.filter) != std::string::npos;
}

// Eight connections of their own to `address`.
Channels Connect(const std::string& address) {
  Channels channels;
  for (int i = 0; i < 8; ++i) channels.push_back(MakeChannel(address));
  return channels;
}

// Each of a side's figures at its best over the rounds: the throughput (with the requests
// and seconds of that round), the lowest p50 and the lowest p99.
void KeepBest(const CellResult& round, CellResult& best) {
  const bool first = best.requests == 0;
  const double p50 = first ? round.p50_ms : std::min(best.p50_ms, round.p50_ms);
  const double p99 = first ? round.p99_ms : std::min(best.p99_ms, round.p99_ms);
  if (first || round.mbps > best.mbps) best = round;
  best.p50_ms = p50;
  best.p99_ms = p99;
}

// `first` then `second`, each on the connections it opens for the round and after a
// warm-up on them, alternating over o.rounds; each side keeps each figure at its best
// (KeepBest), so a noisy round hurts neither. A connection keeps what it settled into
// (flow-control windows, the server thread that polls it, socket buffers) for as long as it
// lives, and that alone moved a cell by up to 2x between runs; fresh connections each round
// let the best of the rounds find each side's good state instead of keeping its first.
std::pair<CellResult, CellResult> BestOfRounds(const Options& o, const Side& first,
                                               const Side& second, const Front& front,
                                               bool streaming, size_t payload, int concurrency) {
  const double seconds = CellSeconds(o, payload);
  const double warm = std::min(0.1, seconds / 4);
  CellResult best_first, best_second;
  auto round_of = [&](const Side& side) {
    const Channels channels = side.connect();
    RunCell(channels, side.requests, front, streaming, payload, concurrency, warm);
    return RunCell(channels, side.requests, front, streaming, payload, concurrency, seconds);
  };
  for (int round = 0; round < o.rounds; ++round) {
    KeepBest(round_of(first), best_first);
    KeepBest(round_of(second), best_second);
  }
  return {best_first, best_second};
}

json E2eRow(const Front& front, bool streaming, const Workload& w, int concurrency,
            const CellResult& posenc, const CellResult& echo) {
  return {{"rpc", streaming ? front.stream_rpc : front.unary_rpc},
          {"front", front.inference ? "inference" : "posenc.v1"},
          {"scheme", w.scheme},
          {"shape", w.shape},
          {"label", w.label},
          {"payload_bytes", w.payload_bytes},
          {"concurrency", concurrency},
          {"posenc_rps", posenc.rps},
          {"echo_rps", echo.rps},
          {"posenc_mbps", posenc.mbps},
          {"echo_mbps", echo.mbps},
          {"ratio", posenc.mbps / echo.mbps},
          {"posenc_p50_ms", posenc.p50_ms},
          {"echo_p50_ms", echo.p50_ms},
          {"p50_ratio", posenc.p50_ms / echo.p50_ms},
          {"posenc_p99_ms", posenc.p99_ms},
          {"echo_p99_ms", echo.p99_ms},
          {"p99_ratio", posenc.p99_ms / echo.p99_ms},
          {"posenc_requests", posenc.requests},
          {"echo_requests", echo.requests}};
}

// The workloads of each front: sinusoidal at every payload, then the RoPE decode steps
// (batch 1 and 8); the Open Inference Protocol up to 1 MiB.
std::vector<Workload> Workloads(const Options& o, const Front& front) {
  std::vector<Workload> out;
  for (size_t payload : Payloads(o)) {
    if (front.inference && payload > (size_t{1} << 20)) continue;
    out.push_back(SinusoidalWorkload(payload));
  }
  out.push_back(RopeDecodeWorkload(1));
  if (!o.quick) out.push_back(RopeDecodeWorkload(8));
  return out;
}

}  // namespace

json RunE2e(const Options& o) {
  // With --echo-vs-echo the "posenc" side is a second echo (an A/A run).
  const char* server_name = o.echo_vs_echo ? "posenc-bench-echo (as the server)" : "posenc-server";
  ChildServer posenc(server_name, o.echo_vs_echo ? std::vector<std::string>{o.echo_binary,
                                                                            "--listen=127.0.0.1:0"}
                                                 : ServerArgs(o, {}));
  ChildServer echo("posenc-bench-echo", {o.echo_binary, "--listen=127.0.0.1:0"});
  const Channels posenc_channels = Connect(posenc.address());  // for the answers' checks
  const Channels echo_channels = Connect(echo.address());
  const auto connect_posenc = [&] { return Connect(posenc.address()); };
  const auto connect_echo = [&] { return Connect(echo.address()); };
  json results = json::array();
  for (const Front* front : {&kNativeFront, &kInferenceFront}) {
    for (const Workload& w : Workloads(o, *front)) {
      bool verified = false;
      const std::vector<grpc::ByteBuffer> requests = {w.RequestFor(*front)};
      for (bool streaming : {false, true}) {
        for (int concurrency : Concurrencies(o, w.payload_bytes)) {
          const char* rpc = streaming ? front->stream_rpc : front->unary_rpc;
          if (!Selected(o, absl::StrCat(rpc, " ", w.label, " x", concurrency))) continue;
          if (!verified) {
            Verify(server_name, posenc_channels[0], *front, w, o.echo_vs_echo);
            Verify("posenc-bench-echo", echo_channels[0], *front, w, true);
            verified = true;
          }
          // Echo first, then posenc.
          const auto [echo_best, posenc_best] =
              BestOfRounds(o, {connect_echo, requests}, {connect_posenc, requests}, *front,
                           streaming, w.payload_bytes, concurrency);
          if (!o.json) {
            std::fprintf(stderr,
                         "  e2e %-16s %-18s x%-2d: posenc %8.1f MB/s echo %8.1f MB/s, p50 "
                         "%.3f / %.3f ms\n",
                         rpc, w.label.c_str(), concurrency, posenc_best.mbps, echo_best.mbps,
                         posenc_best.p50_ms, echo_best.p50_ms);
          }
          results.push_back(E2eRow(*front, streaming, w, concurrency, posenc_best, echo_best));
        }
      }
    }
  }
  return results;
}

json DriveTarget(const Options& o) {
  const std::shared_ptr<grpc::Channel> channel = MakeChannel(o.target);
  grpc::GenericStub stub(channel);
  json results = json::array();
  for (const Front* front : {&kNativeFront, &kInferenceFront}) {
    for (const Workload& w : Workloads(o, *front)) {
      for (bool streaming : {false, true}) {
        const char* rpc = streaming ? front->stream_rpc : front->unary_rpc;
        const std::string cell = absl::StrCat(rpc, " ", w.label, " x1");
        if (!Selected(o, cell)) continue;
        std::vector<double> latencies;
        const Clock::time_point start = Clock::now();
        if (streaming) {
          LockstepStream stream(stub, front->stream_method, w.RequestFor(*front),
                                Clock::time_point::max(), &latencies, nullptr, o.calls);
          const grpc::Status status = stream.Await();
          if (!status.ok()) Check(absl::UnknownError(status.error_message()), cell);
        } else {
          for (int64_t i = 0; i < o.calls; ++i) {
            grpc::ByteBuffer response;
            const Clock::time_point t = Clock::now();
            const grpc::Status status =
                UnaryCall(stub, front->unary_method, w.RequestFor(*front), &response);
            if (!status.ok()) Check(absl::UnknownError(status.error_message()), cell);
            latencies.push_back(SecondsSince(t) * 1e3);
          }
        }
        const double seconds = SecondsSince(start);
        std::sort(latencies.begin(), latencies.end());
        results.push_back({{"cell", cell},
                           {"calls", latencies.size()},
                           {"seconds", seconds},
                           {"p50_ms", Percentile(latencies, 0.5)}});
      }
    }
  }
  return results;
}

namespace {

// The in-process kernel alone on `shape` (sinusoidal ADD, fp32, with the check of its
// result for values that are not finite, as a call runs it): the ceiling any transport can
// reach. Returns payload MB/s.
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
          {"inline_p50_ms", inline_.p50_ms},
          {"shm_p99_ms", shm.p99_ms},
          {"inline_p99_ms", inline_.p99_ms}};
}

}  // namespace

// Encode by shared-memory reference against the same Encode inline and the kernel alone, in
// one run: each worker rotates its own slice of one region in place.
json RunShm(const Options& o) {
  ChildServer posenc("posenc-server --shm", ServerArgs(o, {"--shm"}));
  // A region belongs to the connection that registered it, so every worker of these cells
  // shares that one connection (inline too, so both sides pay the same transport).
  const Channels channels = {MakeChannel(posenc.address())};
  const auto same_connection = [&] { return channels; };
  auto stub = v1::PositionalEncoding::NewStub(channels[0]);
  json results = json::array();
  for (size_t payload : Payloads(o)) {
    const client::ShmRegion region =
        RegisterRegion(*stub, absl::StrCat("/posenc_bench_", getpid(), "_", payload), payload);
    const std::vector<grpc::ByteBuffer> shm_requests = ShmRequests(*stub, region, payload);
    const std::vector<grpc::ByteBuffer> inline_requests = {
        SinusoidalWorkload(payload).native_request};
    const double kernel_mbps = KernelMbps(PayloadShape(payload), payload);
    for (int concurrency : {1, 8}) {
      if (!Selected(o, absl::StrCat("shm Encode ", PayloadLabel(payload), " x", concurrency))) {
        continue;
      }
      // Inline first, then by reference.
      const auto [inline_best, shm_best] =
          BestOfRounds(o, {same_connection, inline_requests}, {same_connection, shm_requests},
                       kNativeFront, false, payload, concurrency);
      results.push_back(ShmRow(payload, concurrency, shm_best, inline_best, kernel_mbps));
      if (!o.json) {
        std::fprintf(stderr, "  shm Encode %9zu B x%d: shm %8.1f MB/s inline %8.1f MB/s\n", payload,
                     concurrency, shm_best.mbps, inline_best.mbps);
      }
    }
    UnregisterRegion(*stub);
  }
  return results;
}

}  // namespace posenc::bench
