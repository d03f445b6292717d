#include "server/metrics/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/http/http_core.h"

namespace posenc {
namespace {

constexpr int kNumCodes = 17;
constexpr int kNumMethods = static_cast<int>(Method::kCount);

const char* const kCodeNames[kNumCodes] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

// 5 us (a small Encode's kernel) to 30 s (a large graph solve), about three per decade.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {5e-6,  10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
          25e-3, 50e-3, 0.1,   0.25,  0.5,    1.0,    2.5,    5.0,  10.0,   30.0};
}

// The standard process_* metrics (as the Go and Python clients export them), read from
// /proc/self on each scrape: prometheus-cpp has none of its own.
class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    const long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    std::ifstream stat("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // Fields after the command name (which may hold spaces), from field 3 on.
    const size_t close = text.rfind(')');
    std::vector<std::string> f;
    if (close != std::string::npos) f = absl::StrSplit(text.substr(close + 2), ' ');
    auto field = [&](size_t n) { return n - 3 < f.size() ? std::atof(f[n - 3].c_str()) : 0.0; };
    static const double boot_time = BootTime();
    Add(families, "process_cpu_seconds_total", "User and system CPU time, in seconds.",
        prometheus::MetricType::Counter, (field(14) + field(15)) / static_cast<double>(ticks));
    Add(families, "process_resident_memory_bytes", "Resident memory size in bytes.",
        prometheus::MetricType::Gauge, field(24) * static_cast<double>(page));
    Add(families, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
        prometheus::MetricType::Gauge, field(23));
    Add(families, "process_start_time_seconds", "Start time since the epoch, in seconds.",
        prometheus::MetricType::Gauge, boot_time + field(22) / static_cast<double>(ticks));
    Add(families, "process_open_fds", "Open file descriptors.", prometheus::MetricType::Gauge,
        static_cast<double>(OpenFds()));
    struct rlimit limit {};
    getrlimit(RLIMIT_NOFILE, &limit);
    Add(families, "process_max_fds", "Limit of open file descriptors.",
        prometheus::MetricType::Gauge, static_cast<double>(limit.rlim_cur));
    return families;
  }

 private:
  static void Add(std::vector<prometheus::MetricFamily>& families, const char* name,
                  const char* help, prometheus::MetricType type, double value) {
    prometheus::MetricFamily family{name, help, type, {}};
    prometheus::ClientMetric metric;
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
    families.push_back(std::move(family));
  }
  static double BootTime() {
    std::ifstream in("/proc/stat");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("btime ", 0) == 0) return std::atof(line.c_str() + 6);
    }
    return 0;
  }
  static int OpenFds() {
    int n = 0;
    if (DIR* dir = opendir("/proc/self/fd")) {
      while (const dirent* e = readdir(dir)) n += e->d_name[0] != '.';
      closedir(dir);
    }
    return n - 1;  // the directory being read
  }
};

}  // namespace

const char* MethodName(Method m) {
  static const char* const names[] = {"Encode",
                                      "EncodeStream",
                                      "AttentionBias",
                                      "GetTable",
                                      "ListSchemes",
                                      "GraphEncode",
                                      "RegisterSharedMemory",
                                      "UnregisterSharedMemory",
                                      "SharedMemoryStatus",
                                      "ModelInfer",
                                      "ModelStreamInfer",
                                      "ModelMetadata",
                                      "ModelConfig",
                                      "ServerMetadata",
                                      "RepositoryIndex",
                                      "HttpInfer",
                                      "HttpServerMetadata",
                                      "HttpModelMetadata",
                                      "HttpModelConfig",
                                      "HttpRepositoryIndex",
                                      "HttpSharedMemory"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(Method::kCount));
  return names[static_cast<int>(m)];
}

struct ServiceMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<ProcessCollector> process = std::make_shared<ProcessCollector>();
  // Pre-built children, indexed [method][scheme][code] (scheme 0 is "none"); null for
  // pairs never served. Sized once in Create, never resized.
  std::array<std::vector<std::array<prometheus::Counter*, kNumCodes>>, kNumMethods> requests{};
  std::array<std::vector<prometheus::Histogram*>, kNumMethods> durations{};
  std::vector<prometheus::Histogram*> kernels;  // [scheme]; kernels[0] is null
  // [transport][direction: 0 in, 1 out]
  std::array<std::array<prometheus::Counter*, 2>, 2> bytes{};
  prometheus::Counter* transport_failed = nullptr;
  std::atomic<int64_t> transport_failed_seen{0};
  prometheus::Counter* transport_started = nullptr;
  prometheus::Counter* flooded_connections = nullptr;
  std::atomic<int64_t> transport_started_seen{0};
  prometheus::Gauge* shm_regions = nullptr;
  prometheus::Gauge* shm_mapped_bytes = nullptr;
  prometheus::Gauge* inflight = nullptr;
  prometheus::Counter* cache_hits = nullptr;
  prometheus::Counter* cache_misses = nullptr;
  prometheus::Counter* cache_evictions = nullptr;
  prometheus::Gauge* cache_bytes = nullptr;
  // /metrics over HTTP (StartExposer); last, so it stops before what it serves goes.
  std::unique_ptr<HttpHandler> handler;
  std::unique_ptr<HttpCore> http;
};

namespace {

// One unlabelled series of a new family.
prometheus::Counter* AddCounter(prometheus::Registry& reg, const char* name, const char* help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(reg).Add({});
}
prometheus::Gauge* AddGauge(prometheus::Registry& reg, const char* name, const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(reg).Add({});
}

}  // namespace

// Every (method, scheme) pair a method serves gets its series up front, so a dashboard
// reads zeros rather than gaps, and the hot path only indexes arrays.
void ServiceMetrics::RegisterCallSeries(Impl& impl, const std::vector<MetricsScheme>& schemes) {
  auto& reg = *impl.registry;
  auto& requests = prometheus::BuildCounter()
                       .Name("posenc_requests_total")
                       .Help("RPCs handled, by method, scheme and gRPC status code.")
                       .Register(reg);
  auto& durations = prometheus::BuildHistogram()
                        .Name("posenc_request_duration_seconds")
                        .Help("Time from the start of an RPC to its status, in seconds.")
                        .Register(reg);
  auto& kernels = prometheus::BuildHistogram()
                      .Name("posenc_kernel_duration_seconds")
                      .Help("Time spent applying a scheme to one request, in seconds.")
                      .Register(reg);
  const size_t num_schemes = schemes.size() + 1;
  auto serves = [&](int m, size_t s) {
    if (s == 0) return true;  // "none": every method
    const std::vector<Method>& methods = schemes[s - 1].methods;
    return std::find(methods.begin(), methods.end(), static_cast<Method>(m)) != methods.end();
  };
  for (int m = 0; m < kNumMethods; ++m) {
    impl.requests[m].assign(num_schemes, {});
    impl.durations[m].assign(num_schemes, nullptr);
    for (size_t s = 0; s < num_schemes; ++s) {
      if (!serves(m, s)) continue;
      const std::map<std::string, std::string> labels = {
          {"method", MethodName(static_cast<Method>(m))},
          {"scheme", s == 0 ? std::string("none") : schemes[s - 1].name}};
      for (int c = 0; c < kNumCodes; ++c) {
        auto with_code = labels;
        with_code["code"] = kCodeNames[c];
        impl.requests[m][s][c] = &requests.Add(with_code);
      }
      impl.durations[m][s] = &durations.Add(labels, LatencyBuckets());
    }
  }
  impl.kernels.assign(num_schemes, nullptr);
  for (size_t s = 1; s < num_schemes; ++s) {
    impl.kernels[s] = &kernels.Add({{"scheme", schemes[s - 1].name}}, LatencyBuckets());
  }
  auto& bytes = prometheus::BuildCounter()
                    .Name("posenc_processed_bytes_total")
                    .Help(
                        "Tensor bytes received (in) and sent (out), inline in the messages "
                        "or by shared-memory reference.")
                    .Register(reg);
  for (int t = 0; t < 2; ++t) {
    for (int d = 0; d < 2; ++d) {
      impl.bytes[t][d] = &bytes.Add(
          {{"direction", d == 0 ? "in" : "out"}, {"transport", t == 0 ? "inline" : "shm"}});
    }
  }
}

std::unique_ptr<ServiceMetrics> ServiceMetrics::Create(const std::string& version,
                                                       const std::vector<MetricsScheme>& schemes) {
  auto impl = std::make_unique<Impl>();
  RegisterCallSeries(*impl, schemes);
  auto& reg = *impl->registry;
  impl->transport_failed = AddCounter(
      reg, "posenc_transport_failed_calls_total",
      "Calls gRPC's transport ended before any handler saw them: mostly messages over "
      "--max_message_bytes (RESOURCE_EXHAUSTED), or clients that gave up while uploading. "
      "From channelz; not in posenc_requests_total, whose method and code they have none of.");
  impl->transport_started = AddCounter(
      reg, "posenc_transport_calls_started_total",
      "Calls gRPC's transport started: streams whose headers the server has read, uploads "
      "still arriving included. From channelz, every 100 ms. A call the server had not yet "
      "seen when it began to drain is refused UNAVAILABLE, to be retried elsewhere.");
  impl->flooded_connections = AddCounter(
      reg, "posenc_transport_flood_connections_ended_total",
      "Client connections the server ended because their HTTP/2 streams ended without a "
      "message faster than the stream-flood limits allow (rapid reset, CVE-2023-44487).");
  impl->shm_regions =
      AddGauge(reg, "posenc_shm_regions", "Shared-memory regions registered (--shm).");
  impl->shm_mapped_bytes = AddGauge(reg, "posenc_shm_mapped_bytes",
                                    "Bytes of shared memory mapped, including unregistered "
                                    "regions that requests still use.");
  impl->inflight = AddGauge(reg, "posenc_inflight_requests", "RPCs in progress.");
  impl->cache_hits = AddCounter(reg, "posenc_table_cache_hits_total",
                                "Precomputed-table lookups served from the cache.");
  impl->cache_misses = AddCounter(reg, "posenc_table_cache_misses_total",
                                  "Precomputed-table lookups that computed the table.");
  impl->cache_evictions = AddCounter(reg, "posenc_table_cache_evictions_total",
                                     "Tables evicted to stay within --cache_bytes.");
  impl->cache_bytes =
      AddGauge(reg, "posenc_table_cache_bytes", "Bytes held by the precomputed-table cache.");
  prometheus::BuildGauge()
      .Name("posenc_build_info")
      .Help("Always 1; the version label says which build serves.")
      .Register(reg)
      .Add({{"version", version}})
      .Set(1);
  return std::unique_ptr<ServiceMetrics>(new ServiceMetrics(std::move(impl)));
}

ServiceMetrics::ServiceMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServiceMetrics::~ServiceMetrics() = default;

void ServiceMetrics::RecordRequest(Method method, int scheme, int code, double seconds) {
  const int m = static_cast<int>(method);
  const auto& durations = impl_->durations[m];
  const size_t s = scheme > 0 && static_cast<size_t>(scheme) < durations.size() && durations[scheme]
                       ? static_cast<size_t>(scheme)
                       : 0;
  if (code < 0 || code >= kNumCodes) code = 2;  // UNKNOWN
  impl_->requests[m][s][code]->Increment();
  impl_->durations[m][s]->Observe(seconds);
}

void ServiceMetrics::RecordKernel(int scheme, double seconds) {
  if (scheme <= 0 || static_cast<size_t>(scheme) >= impl_->kernels.size()) return;
  if (auto* h = impl_->kernels[static_cast<size_t>(scheme)]) h->Observe(seconds);
}

void ServiceMetrics::AddBytes(Transport transport, uint64_t in, uint64_t out) {
  const auto& counters = impl_->bytes[transport == Transport::kInline ? 0 : 1];
  if (in) counters[0]->Increment(static_cast<double>(in));
  if (out) counters[1]->Increment(static_cast<double>(out));
}

namespace {
// Raises `counter` to `total` (a running total read elsewhere); a smaller total is ignored.
void RaiseTo(prometheus::Counter* counter, std::atomic<int64_t>& seen_total, int64_t total) {
  int64_t seen = seen_total.load();
  while (total > seen && !seen_total.compare_exchange_weak(seen, total)) {
  }
  if (total > seen) counter->Increment(static_cast<double>(total - seen));
}
}  // namespace

void ServiceMetrics::SetTransportFailedCalls(int64_t total) {
  RaiseTo(impl_->transport_failed, impl_->transport_failed_seen, total);
}

void ServiceMetrics::SetTransportStartedCalls(int64_t total) {
  RaiseTo(impl_->transport_started, impl_->transport_started_seen, total);
}

void ServiceMetrics::CountFloodedConnection() { impl_->flooded_connections->Increment(); }

void ServiceMetrics::SetSharedMemory(int64_t regions, uint64_t mapped_bytes) {
  impl_->shm_regions->Set(static_cast<double>(regions));
  impl_->shm_mapped_bytes->Set(static_cast<double>(mapped_bytes));
}

void ServiceMetrics::InflightAdd(int delta) { impl_->inflight->Increment(delta); }

void ServiceMetrics::OnHit() { impl_->cache_hits->Increment(); }
void ServiceMetrics::OnMiss() { impl_->cache_misses->Increment(); }
void ServiceMetrics::OnEvict(size_t count) {
  impl_->cache_evictions->Increment(static_cast<double>(count));
}
void ServiceMetrics::OnBytes(size_t total_bytes) {
  impl_->cache_bytes->Set(static_cast<double>(total_bytes));
}

namespace {

// A scrape's connection: its request must arrive within this, and a scrape is one small GET.
constexpr std::chrono::milliseconds kMetricsRequestTimeout{2000};
constexpr size_t kMetricsMaxBody = 4096;

// GET /metrics: the registry and the process collector in Prometheus's text format,
// serialized on the I/O thread (a scrape is small and lock-free to collect).
class MetricsHandler final : public HttpHandler {
 public:
  MetricsHandler(std::shared_ptr<prometheus::Registry> registry,
                 std::shared_ptr<prometheus::Collectable> process)
      : registry_(std::move(registry)), process_(std::move(process)) {}

  std::optional<HttpResponse> Screen(HttpRequest& request) override {
    if (request.path != "/metrics") return Text(404, "only /metrics is served here\n");
    if (request.method != "GET") {
      HttpResponse r = Text(405, "use GET\n");
      r.headers.emplace_back("Allow", "GET");
      return r;
    }
    return std::nullopt;
  }

  void Handle(HttpRequest, HttpRespond respond) override {
    std::vector<prometheus::MetricFamily> families = registry_->Collect();
    std::vector<prometheus::MetricFamily> process = process_->Collect();
    families.insert(families.end(), std::make_move_iterator(process.begin()),
                    std::make_move_iterator(process.end()));
    HttpResponse r = Text(200, prometheus::TextSerializer().Serialize(families));
    r.content_type = "text/plain; version=0.0.4";
    std::move(respond)(std::move(r));
  }

 private:
  static HttpResponse Text(int status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = std::move(body);
    return r;
  }

  const std::shared_ptr<prometheus::Registry> registry_;
  const std::shared_ptr<prometheus::Collectable> process_;
};

}  // namespace

// Served by server/http's event-driven core: an idle or slow scraper holds a few KiB and no
// thread, so sockets left open (slowloris) cannot delay a scrape.
absl::StatusOr<int> ServiceMetrics::StartExposer(const std::string& address) {
  impl_->handler = std::make_unique<MetricsHandler>(impl_->registry, impl_->process);
  HttpCoreOptions options;
  options.listen = address;
  options.flag = "--metrics_listen";
  options.max_body_bytes = kMetricsMaxBody;
  options.header_timeout = kMetricsRequestTimeout;
  options.body_timeout = kMetricsRequestTimeout;
  options.io_threads = 1;
  absl::StatusOr<std::unique_ptr<HttpCore>> http = HttpCore::Start(options, *impl_->handler);
  if (!http.ok()) return http.status();
  impl_->http = std::move(*http);
  return impl_->http->port();
}

std::string ServiceMetrics::Render() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(impl_->registry->Collect());
}

}  // namespace posenc
