#include "client/load_command.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <memory>
#include <set>
#include <thread>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli_call.h"
#include "client/cli_flags.h"
#include "client/posenc_client.h"
#include "client/tensor_io.h"
#include "client/tensor_proto.h"
#include "grpc/grpc.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"

namespace posenc::client {

const char kLoadUsage[] = R"(usage: posenc-client load [flags]

Closed-loop load: --concurrency threads each keep one call in flight until --duration
passes or --max-requests calls have started. Prints calls/s, MB/s (10^6 bytes, request and
response messages), p50/p90/p99/max latency per mix item and overall, and the calls by
gRPC code. Exit 0 when every call was OK, 1 when any failed, 2 for bad flags.

  --target ADDR          as for the other commands; several replicas:
                         ipv4:127.0.0.1:50051,127.0.0.1:50052 (with --lb round_robin)
  --concurrency N        calls in flight (default 8)
  --duration DUR         e.g. 10s, 5m, 500ms (default 10s)
  --max-requests N       stop after N calls have started (default 0: only --duration)
  --deadline DUR         per call (default --timeout, else 30s)
  --mix MIX              requests, "KIND:DIMS[*WEIGHT];..." or a preset (default mixed):
                           sinusoidal:B,S,D    Encode, sinusoidal, input [B,S,D] float32
                           rope:B,S,H,D        Encode, rope (neox, bshd), query [B,S,H,D]
                           alibi:H,Q,K         AttentionBias, ALiBi, output [H,Q,K]
                           graph:N,K           GraphEncode, a ring of N nodes, k = K
                           table:L,D           GetTable, sinusoidal rows [L,D] (a stream)
                         WEIGHT (default 1) is the item's share of the calls. Presets:
                           small  sinusoidal:1,8,16;rope:1,16,8,64;alibi:8,64,64
                           mixed  sinusoidal:1,8,16*4;rope:1,128,8,64*2;alibi:8,128,128;
                                  graph:256,8;table:1024,64
                           large  sinusoidal:1,1024,256 (1 MiB each way)
  --channels N           channels, each with its own connections (default 1); threads
                         take them in turn
  --lb POLICY            round_robin or pick_first (default: gRPC's, pick_first)
  --retry                service-config retry policy: UNAVAILABLE retried, up to 5
                         attempts, backoff 50 ms .. 1 s; raises grpc.per_rpc_retry_buffer_size
  --retry-buffer-bytes N per-call retry buffer (default with --retry: max(256 KiB, twice
                         the largest request)); calls larger than it are not retried
  --max-reconnect-backoff DUR   grpc.max_reconnect_backoff_ms (gRPC's default: 120s)
  --seed N               input values (default 0)
  --json                 one JSON object on stdout instead of the text report
  --tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name, --timeout: as for the other commands
)";

namespace {

constexpr int kExitFailed = kExitRpc;  // a call failed or no channel connected

// --------------------------------------------------------------------------------------
// Mix.

struct KindSpec {
  const char* name;
  size_t dims;
  const char* meaning;
};
constexpr KindSpec kKinds[] = {{"sinusoidal", 3, "B,S,D"},
                               {"rope", 4, "B,S,H,D"},
                               {"alibi", 3, "H,Q,K"},
                               {"graph", 2, "N,K"},
                               {"table", 2, "L,D"}};

const std::map<std::string, std::string>& MixPresets() {
  static const auto* presets = new std::map<std::string, std::string>{
      {"small", "sinusoidal:1,8,16;rope:1,16,8,64;alibi:8,64,64"},
      {"mixed", "sinusoidal:1,8,16*4;rope:1,128,8,64*2;alibi:8,128,128;graph:256,8;table:1024,64"},
      {"large", "sinusoidal:1,1024,256"}};
  return *presets;
}

absl::StatusOr<MixItem> ParseMixItem(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--mix item '", text, "': ", why));
  };
  std::vector<absl::string_view> kind_rest = absl::StrSplit(text, absl::MaxSplits(':', 1));
  if (kind_rest.size() != 2) return bad("expected KIND:DIMS, e.g. sinusoidal:1,8,16");
  MixItem item;
  item.kind = std::string(absl::StripAsciiWhitespace(kind_rest[0]));
  const KindSpec* spec = nullptr;
  for (const KindSpec& k : kKinds) {
    if (item.kind == k.name) spec = &k;
  }
  if (spec == nullptr) return bad("the kind is not sinusoidal, rope, alibi, graph or table");
  std::vector<absl::string_view> dims_weight =
      absl::StrSplit(kind_rest[1], absl::MaxSplits('*', 1));
  if (dims_weight.size() == 2 &&
      (!absl::SimpleAtoi(dims_weight[1], &item.weight) || item.weight < 1 || item.weight > 1000)) {
    return bad("the weight after '*' must be an integer in [1, 1000]");
  }
  for (absl::string_view part : absl::StrSplit(dims_weight[0], ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v < 1) return bad("every dim must be an integer >= 1");
    item.dims.push_back(v);
  }
  if (item.dims.size() != spec->dims) {
    return bad(absl::StrCat(item.kind, " takes ", spec->dims, " dims (", spec->meaning, ")"));
  }
  item.label = absl::StrCat(item.kind, ":", absl::StrJoin(item.dims, ","));
  return item;
}

}  // namespace

absl::StatusOr<std::vector<MixItem>> ParseMix(absl::string_view text) {
  if (auto it = MixPresets().find(std::string(text)); it != MixPresets().end()) text = it->second;
  std::vector<MixItem> items;
  for (absl::string_view part : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    ASSIGN_OR_RETURN(MixItem item, ParseMixItem(absl::StripAsciiWhitespace(part)));
    items.push_back(std::move(item));
  }
  if (items.empty()) {
    return absl::InvalidArgumentError("--mix is empty; give e.g. sinusoidal:1,8,16 or a preset");
  }
  return items;
}

std::string LoadServiceConfig(const std::string& lb_policy, bool retry) {
  nlohmann::json config = nlohmann::json::object();
  if (!lb_policy.empty()) {
    config["loadBalancingConfig"] =
        nlohmann::json::array({{{lb_policy, nlohmann::json::object()}}});
  }
  if (retry) {
    // A call is retried only before the client has seen response headers, and only while
    // its request fits grpc.per_rpc_retry_buffer_size.
    config["methodConfig"] = nlohmann::json::array({{
        {"name", nlohmann::json::array({{{"service", "posenc.v1.PositionalEncoding"}}})},
        {"retryPolicy",
         {{"maxAttempts", 5},
          {"initialBackoff", "0.05s"},
          {"maxBackoff", "1s"},
          {"backoffMultiplier", 2},
          {"retryableStatusCodes", {"UNAVAILABLE"}}}},
    }});
  }
  return config.empty() ? "" : config.dump();
}

// --------------------------------------------------------------------------------------
// Statistics.

namespace {
constexpr double kBucketGrowth = 1.02;
constexpr double kMaxMicros = 1e8;
const int kNumBuckets =
    static_cast<int>(std::ceil(std::log(kMaxMicros) / std::log(kBucketGrowth))) + 2;
}  // namespace

void LatencyHistogram::Add(absl::Duration latency) {
  if (buckets_.empty()) buckets_.assign(kNumBuckets, 0);
  const double us = std::max(absl::ToDoubleMicroseconds(latency), 0.0);
  // Bucket i > 0 holds (growth^(i-1), growth^i] us; bucket 0 everything up to 1 us.
  int index = us <= 1.0 ? 0 : static_cast<int>(std::ceil(std::log(us) / std::log(kBucketGrowth)));
  index = std::min(index, kNumBuckets - 1);
  ++buckets_[index];
  ++count_;
  sum_us_ += us;
  max_us_ = std::max(max_us_, us);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  if (buckets_.empty()) buckets_.assign(kNumBuckets, 0);
  for (int i = 0; i < kNumBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_us_ += other.sum_us_;
  max_us_ = std::max(max_us_, other.max_us_);
}

double LatencyHistogram::PercentileMillis(double q) const {
  if (count_ == 0) return 0.0;
  const int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * count_)));
  int64_t seen = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) return std::min(std::pow(kBucketGrowth, i), max_us_) / 1000.0;
  }
  return max_us_ / 1000.0;
}

void CallStats::Record(const absl::Status& status, absl::Duration elapsed, int64_t sent,
                       int64_t received) {
  ++calls;
  bytes_sent += sent;
  bytes_received += received;
  ++codes[status.code()];
  if (!status.ok()) first_message.emplace(status.code(), std::string(status.message()));
  latency.Add(elapsed);
}

void CallStats::Merge(const CallStats& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  for (const auto& [code, n] : other.codes) codes[code] += n;
  for (const auto& [code, message] : other.first_message) first_message.emplace(code, message);
  latency.Merge(other.latency);
}

int64_t CallStats::errors() const {
  auto ok = codes.find(absl::StatusCode::kOk);
  return calls - (ok == codes.end() ? 0 : ok->second);
}

namespace {

const std::set<std::string> kLoadFlags = {
    "concurrency", "duration", "max-requests", "deadline",           "mix",
    "channels",    "lb",       "retry",        "retry-buffer-bytes", "max-reconnect-backoff",
    "seed",        "json"};

struct LoadConfig {
  ClientOptions client;  // target, TLS, timeout (= the per-call deadline)
  int64_t concurrency = 8;
  absl::Duration duration = absl::Seconds(10);
  int64_t max_requests = 0;
  int64_t channels = 1;
  std::string lb;
  bool retry = false;
  int64_t retry_buffer_bytes = 0;  // 0: derived from the largest request
  absl::Duration max_reconnect_backoff = absl::ZeroDuration();  // 0: gRPC's
  int64_t seed = 0;
  bool json = false;
  std::vector<MixItem> mix;
};

// A duration flag of the load run: in (0, 24h].
absl::StatusOr<absl::Duration> LoadDuration(const Flags& f, const std::string& name,
                                            absl::Duration fallback) {
  return f.Duration(name, fallback, absl::ZeroDuration(), absl::Hours(24), /*lo_exclusive=*/true);
}

absl::StatusOr<LoadConfig> ReadLoadConfig(const Flags& f) {
  LoadConfig config;
  ASSIGN_OR_RETURN(config.client, ClientOptionsFromFlags(f));
  ASSIGN_OR_RETURN(config.client.timeout, LoadDuration(f, "deadline", config.client.timeout));
  ASSIGN_OR_RETURN(config.concurrency, f.IntIn("concurrency", 1, 1024, config.concurrency));
  ASSIGN_OR_RETURN(config.duration, LoadDuration(f, "duration", config.duration));
  ASSIGN_OR_RETURN(config.max_requests, f.IntIn("max-requests", 0, int64_t{1} << 40, 0));
  ASSIGN_OR_RETURN(config.channels, f.IntIn("channels", 1, 256, config.channels));
  ASSIGN_OR_RETURN(config.retry_buffer_bytes, f.IntIn("retry-buffer-bytes", 1, INT32_MAX, 0));
  ASSIGN_OR_RETURN(config.max_reconnect_backoff,
                   LoadDuration(f, "max-reconnect-backoff", config.max_reconnect_backoff));
  ASSIGN_OR_RETURN(config.seed, f.IntIn("seed", 0, INT64_MAX, 0));
  config.lb = f.Str("lb");
  if (!config.lb.empty() && config.lb != "round_robin" && config.lb != "pick_first") {
    return absl::InvalidArgumentError(
        absl::StrCat("--lb '", config.lb, "' is not round_robin or pick_first"));
  }
  ASSIGN_OR_RETURN(config.retry, f.Bool("retry"));
  ASSIGN_OR_RETURN(config.json, f.Bool("json"));
  ASSIGN_OR_RETURN(config.mix, ParseMix(f.Str("mix", "mixed")));
  return config;
}

// --------------------------------------------------------------------------------------
// Requests: built once per mix item, sent many times (read-only, so shared by threads).

using AnyRequest =
    std::variant<v1::EncodeRequest, v1::BiasRequest, v1::GraphRequest, v1::TableRequest>;

struct PreparedCall {
  const MixItem* item;
  AnyRequest request;
  int64_t request_bytes;
};

absl::StatusOr<v1::Tensor> RandomTensor(const std::vector<int64_t>& shape, uint64_t seed) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape, "--mix"));
  return MakeTensor(RandomFloats(static_cast<size_t>(n), seed), shape);
}

absl::StatusOr<AnyRequest> BuildRequest(const MixItem& item, uint64_t seed) {
  const std::vector<int64_t>& d = item.dims;
  if (item.kind == "sinusoidal" || item.kind == "rope") {
    v1::EncodeRequest request;
    ASSIGN_OR_RETURN(*request.mutable_input(), RandomTensor(d, seed));
    if (item.kind == "rope") {
      request.mutable_rope();
    } else {
      request.mutable_sinusoidal();
    }
    return request;
  }
  if (item.kind == "alibi") {
    v1::BiasRequest request;
    request.mutable_alibi()->set_num_heads(static_cast<int32_t>(d[0]));
    request.set_query_length(d[1]);
    request.set_key_length(d[2]);
    return request;
  }
  if (item.kind == "graph") {
    v1::GraphRequest request;
    request.set_num_nodes(d[0]);
    request.set_k(static_cast<int32_t>(d[1]));
    for (int64_t i = 0; i < d[0]; ++i) {  // a ring: i -- i+1
      request.add_edges(i);
      request.add_edges((i + 1) % d[0]);
    }
    return request;
  }
  v1::TableRequest request;  // "table"
  request.mutable_sinusoidal();
  request.set_length(d[0]);
  request.set_dim(static_cast<int32_t>(d[1]));
  return request;
}

// One call; returns the bytes of the response messages.
absl::StatusOr<int64_t> Issue(const PosencClient& client, const AnyRequest& any) {
  if (const auto* r = std::get_if<v1::EncodeRequest>(&any)) {
    ASSIGN_OR_RETURN(const v1::EncodeResponse response, client.Encode(*r));
    return static_cast<int64_t>(response.ByteSizeLong());
  }
  if (const auto* r = std::get_if<v1::BiasRequest>(&any)) {
    ASSIGN_OR_RETURN(const v1::BiasResponse response, client.AttentionBias(*r));
    return static_cast<int64_t>(response.ByteSizeLong());
  }
  if (const auto* r = std::get_if<v1::GraphRequest>(&any)) {
    ASSIGN_OR_RETURN(const v1::GraphResponse response, client.GraphEncode(*r));
    return static_cast<int64_t>(response.ByteSizeLong());
  }
  ASSIGN_OR_RETURN(const std::vector<v1::TableChunk> chunks,
                   client.GetTable(std::get<v1::TableRequest>(any)));
  int64_t bytes = 0;
  for (const v1::TableChunk& chunk : chunks) bytes += static_cast<int64_t>(chunk.ByteSizeLong());
  return bytes;
}

absl::StatusOr<std::vector<PreparedCall>> PrepareCalls(const LoadConfig& config) {
  std::vector<PreparedCall> calls;
  for (const MixItem& item : config.mix) {
    ASSIGN_OR_RETURN(AnyRequest request,
                     BuildRequest(item, static_cast<uint64_t>(config.seed) + calls.size()));
    const int64_t bytes =
        static_cast<int64_t>(std::visit([](const auto& r) { return r.ByteSizeLong(); }, request));
    calls.push_back({&item, std::move(request), bytes});
  }
  return calls;
}

// --------------------------------------------------------------------------------------
// Channels and the run.

int64_t RetryBufferBytes(const LoadConfig& config, const std::vector<PreparedCall>& calls) {
  if (config.retry_buffer_bytes > 0) return config.retry_buffer_bytes;
  int64_t largest = 0;
  for (const PreparedCall& call : calls) largest = std::max(largest, call.request_bytes);
  return std::clamp<int64_t>(2 * largest, 256 << 10, INT32_MAX);
}

absl::StatusOr<std::vector<std::unique_ptr<PosencClient>>> MakeClients(const LoadConfig& config,
                                                                       int64_t retry_buffer_bytes) {
  ClientOptions options = config.client;
  options.service_config_json = LoadServiceConfig(config.lb, config.retry);
  if (config.retry) {
    options.int_channel_args.emplace_back(GRPC_ARG_ENABLE_RETRIES, 1);
    options.int_channel_args.emplace_back(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE,
                                          static_cast<int>(retry_buffer_bytes));
  }
  if (config.max_reconnect_backoff > absl::ZeroDuration()) {
    options.int_channel_args.emplace_back(
        GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
        static_cast<int>(absl::ToInt64Milliseconds(config.max_reconnect_backoff)));
  }
  // Without this, channels with equal arguments share one connection per address.
  if (config.channels > 1)
    options.int_channel_args.emplace_back(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::vector<std::unique_ptr<PosencClient>> clients;
  for (int64_t i = 0; i < config.channels; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<PosencClient> client, PosencClient::Create(options));
    clients.push_back(std::move(client));
  }
  return clients;
}

// The order calls are drawn in: item i appears weight(i) times, interleaved round by round
// so that a heavy item's calls do not come in one burst.
std::vector<size_t> Schedule(const std::vector<MixItem>& mix) {
  std::vector<size_t> order;
  for (int round = 0; round < 1000; ++round) {
    bool any = false;
    for (size_t i = 0; i < mix.size(); ++i) {
      if (mix[i].weight > round) {
        order.push_back(i);
        any = true;
      }
    }
    if (!any) break;
  }
  return order;
}

struct RunResult {
  std::vector<CallStats> per_item;
  CallStats total;
  absl::Duration elapsed;
};

RunResult RunWorkers(const LoadConfig& config, const std::vector<PreparedCall>& calls,
                     const std::vector<std::unique_ptr<PosencClient>>& clients) {
  const std::vector<size_t> order = Schedule(config.mix);
  std::atomic<int64_t> next{0};
  std::vector<std::vector<CallStats>> stats(config.concurrency,
                                            std::vector<CallStats>(calls.size()));
  const absl::Time start = absl::Now();
  const absl::Time end = start + config.duration;
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < config.concurrency; ++w) {
    workers.emplace_back([&, w] {
      const PosencClient& client = *clients[w % clients.size()];
      while (true) {
        const int64_t n = next.fetch_add(1);
        if ((config.max_requests > 0 && n >= config.max_requests) || absl::Now() >= end) break;
        const size_t item = order[n % order.size()];
        const absl::Time call_start = absl::Now();
        absl::StatusOr<int64_t> received = Issue(client, calls[item].request);
        stats[w][item].Record(received.status(), absl::Now() - call_start,
                              calls[item].request_bytes, received.value_or(0));
      }
    });
  }
  for (std::thread& t : workers) t.join();
  RunResult result;
  result.elapsed = absl::Now() - start;
  result.per_item.resize(calls.size());
  for (const auto& worker : stats) {
    for (size_t i = 0; i < calls.size(); ++i) {
      result.per_item[i].Merge(worker[i]);
      result.total.Merge(worker[i]);
    }
  }
  return result;
}

// --------------------------------------------------------------------------------------
// Reports.

std::string CodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

nlohmann::json LatencyJson(const LatencyHistogram& h) {
  return {{"p50", h.PercentileMillis(0.50)},
          {"p90", h.PercentileMillis(0.90)},
          {"p99", h.PercentileMillis(0.99)},
          {"max", h.MaxMillis()},
          {"mean", h.MeanMillis()}};
}

void PrintJson(const LoadConfig& config, int64_t retry_buffer, const RunResult& r) {
  const double seconds = absl::ToDoubleSeconds(r.elapsed);
  nlohmann::json codes = nlohmann::json::object();
  for (const auto& [code, n] : r.total.codes) codes[CodeName(code)] = n;
  nlohmann::json messages = nlohmann::json::object();
  for (const auto& [code, message] : r.total.first_message) messages[CodeName(code)] = message;
  nlohmann::json mix = nlohmann::json::array();
  for (size_t i = 0; i < config.mix.size(); ++i) {
    const CallStats& s = r.per_item[i];
    mix.push_back({{"item", config.mix[i].label},
                   {"calls", s.calls},
                   {"errors", s.errors()},
                   {"latency_ms", LatencyJson(s.latency)}});
  }
  nlohmann::json out = {{"target", config.client.target},
                        {"concurrency", config.concurrency},
                        {"channels", config.channels},
                        {"lb", config.lb},
                        {"retry", config.retry},
                        {"retry_buffer_bytes", config.retry ? retry_buffer : 0},
                        {"seconds", seconds},
                        {"calls", r.total.calls},
                        {"ok", r.total.calls - r.total.errors()},
                        {"errors", r.total.errors()},
                        {"calls_per_second", r.total.calls / seconds},
                        {"mb_per_second_sent", r.total.bytes_sent / seconds / 1e6},
                        {"mb_per_second_received", r.total.bytes_received / seconds / 1e6},
                        {"latency_ms", LatencyJson(r.total.latency)},
                        {"codes", codes},
                        {"first_error", messages},
                        {"mix", mix}};
  std::cout << out.dump() << "\n";
}

std::string LatencyText(const LatencyHistogram& h) {
  return absl::StrFormat("p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms",
                         h.PercentileMillis(0.5), h.PercentileMillis(0.9), h.PercentileMillis(0.99),
                         h.MaxMillis());
}

void PrintText(const LoadConfig& config, int64_t retry_buffer, const RunResult& r) {
  const double seconds = absl::ToDoubleSeconds(r.elapsed);
  std::cout << absl::StrFormat(
      "load: target=%s concurrency=%d channels=%d lb=%s retry=%s\n", config.client.target,
      config.concurrency, config.channels, config.lb.empty() ? "default" : config.lb,
      config.retry ? absl::StrCat("on (buffer ", retry_buffer, " bytes)") : "off");
  for (size_t i = 0; i < config.mix.size(); ++i) {
    const CallStats& s = r.per_item[i];
    std::cout << absl::StrFormat("  %-28s calls %-8d errors %-6d %s\n", config.mix[i].label,
                                 s.calls, s.errors(), LatencyText(s.latency));
  }
  std::cout << absl::StrFormat(
      "total: %d calls in %.2f s: %.1f calls/s, %.2f MB/s sent, %.2f MB/s received\n",
      r.total.calls, seconds, r.total.calls / seconds, r.total.bytes_sent / seconds / 1e6,
      r.total.bytes_received / seconds / 1e6);
  std::cout << "latency: " << LatencyText(r.total.latency) << "\n";
  std::vector<std::string> codes;
  for (const auto& [code, n] : r.total.codes) codes.push_back(absl::StrCat(CodeName(code), "=", n));
  std::cout << "codes: " << absl::StrJoin(codes, " ") << "\n";
  std::cout << "errors: " << r.total.errors() << "\n";
  for (const auto& [code, message] : r.total.first_message) {
    std::cout << "  first " << CodeName(code) << ": " << message << "\n";
  }
}

int LoadUsageError(const absl::Status& status) {
  return UsageError(status, "posenc-client load", "posenc-client load --help for usage");
}

}  // namespace

int RunLoadCommand(const std::vector<std::string>& args) {
  auto flags = ParseCommandFlags(args, kLoadFlags, {"retry", "json"});
  if (!flags.ok()) return LoadUsageError(flags.status());
  if (flags->Has("help")) {
    std::cout << kLoadUsage;
    return kExitOk;
  }
  auto config = ReadLoadConfig(*flags);
  if (!config.ok()) return LoadUsageError(config.status());
  auto calls = PrepareCalls(*config);
  if (!calls.ok()) return LoadUsageError(calls.status());
  const int64_t retry_buffer = RetryBufferBytes(*config, *calls);
  auto clients = MakeClients(*config, retry_buffer);
  if (!clients.ok()) return LoadUsageError(clients.status());
  for (const auto& client : *clients) {
    if (absl::Status s = client->WaitForConnected(config->client.timeout); !s.ok()) {
      std::cerr << "posenc-client load: cannot connect to " << config->client.target << " within "
                << absl::FormatDuration(config->client.timeout) << "\n";
      return kExitFailed;
    }
  }
  const RunResult result = RunWorkers(*config, *calls, *clients);
  if (config->json) {
    PrintJson(*config, retry_buffer, result);
  } else {
    PrintText(*config, retry_buffer, result);
  }
  return result.total.errors() == 0 ? kExitOk : kExitFailed;
}

}  // namespace posenc::client
