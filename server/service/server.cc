#include "server/service/server.h"

#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <cerrno>
#include <cstring>

#include <algorithm>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/support/log.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/common/log.h"
#include "server/common/port_in_use.h"
#include "server/common/status_macros.h"
#include "server/service/channelz.h"
#include "server/service/stream_flood_guard.h"
#include "server/shm/peer_identity.h"
#include "server/tables/table_file.h"

namespace posenc {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// gRPC only finds a bad certificate or key when the server starts, and then says nothing
// useful; OpenSSL can tell which flag is at fault first.
absl::Status CheckKeyPair(const std::string& cert_pem, const std::string& key_pem) {
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  absl::Status status;
  if (cert == nullptr) {
    status = absl::InvalidArgumentError("--tls_cert: not a PEM certificate");
  } else if (key == nullptr) {
    status = absl::InvalidArgumentError("--tls_key: not a PEM private key");
  } else if (X509_check_private_key(cert, key) != 1) {
    status = absl::InvalidArgumentError("--tls_key does not match the --tls_cert certificate");
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return status;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& options) {
  if (options.tls_cert.empty() && options.tls_key.empty()) {
    if (!options.tls_client_ca.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert.empty() || options.tls_key.empty()) {
    return absl::InvalidArgumentError(options.tls_cert.empty() ? "--tls_key needs --tls_cert"
                                                               : "--tls_cert needs --tls_key");
  }
  grpc::SslServerCredentialsOptions ssl;
  ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert, "--tls_cert"));
  ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key, "--tls_key"));
  RETURN_IF_ERROR(CheckKeyPair(cert, key));
  ssl.pem_key_cert_pairs.push_back({key, cert});
  if (!options.tls_client_ca.empty()) {  // mutual TLS
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(options.tls_client_ca, "--tls_client_ca"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::Status LoadTables(const std::vector<std::string>& specs, NamedTables& tables) {
  for (const std::string& spec : specs) {
    absl::StatusOr<NamedTableData> loaded = LoadTableSpec(spec);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("--table=", spec, ": ", loaded.status().message()));
    }
    auto table = std::make_shared<Table>();
    table->rows = loaded->shape[0];
    table->cols = loaded->shape[1];
    table->data = std::move(loaded->data);
    std::shared_ptr<const std::vector<double>> float64_values;
    if (!loaded->float64_data.empty()) {
      float64_values = std::make_shared<const std::vector<double>>(std::move(loaded->float64_data));
    }
    absl::Status added = tables.Add(NamedTable{loaded->name, std::move(table), loaded->source_dtype,
                                               std::move(float64_values)});
    if (!added.ok()) {
      return absl::Status(added.code(), absl::StrCat("--table=", spec, ": ", added.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const ServerOptions& options) {
  if (absl::StartsWith(options.listen, "unix-abstract:") && !options.listen_allow_abstract) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen=", options.listen,
                     ": an abstract unix socket has no file mode, so any "
                     "local user can connect; use unix:/path or add --listen_allow_abstract"));
  }
  if (options.max_message_bytes > kMaxMessageBytesLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_message_bytes=", options.max_message_bytes, " is over ",
                     kMaxMessageBytesLimit, " (protobuf's 2 GiB message limit, less framing)"));
  }
  if (options.max_message_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_message_bytes=", options.max_message_bytes, " is under 4096"));
  }
  return absl::OkStatus();
}

// The owner names (SharedMemoryOwner) of the connections with these peers: each peer
// itself, for owners the socket tables could not name, and its "tcp:<inode>".
std::set<std::string> LiveShmOwners(const std::set<std::string>& peers) {
  std::set<std::string> owners = peers;
  for (const std::string& peer : peers) {
    if (std::optional<std::string> owner = ConnectionOwner(peer)) owners.insert(*owner);
  }
  return owners;
}

// Free heap (all arenas) over which the monitor trims even while calls run: above what the
// largest calls reuse between them (TuneProcessForServing keeps 64 MiB per arena).
constexpr size_t kTrimFreeBytes = size_t{128} << 20;

// Per connection: HTTP/2 streams open at once, and bytes of one header list.
constexpr int kMaxStreamsPerConnection = 128;
constexpr int kMaxMetadataBytes = 16 << 10;
// gRPC's transport memory quota is --max_inflight_bytes / this. Buffered uploads cost about
// twice their bytes in resident memory (read buffers, then the assembled message). Above
// kUploadPressureDivisor's share, so that the stream-flood guard ends stalled uploads
// before the quota's reclaimer closes connections (well-behaved clients' among them).
constexpr uint64_t kTransportQuotaDivisor = 2;

// The stream-flood guard's limits: stalled uploads are ended while more uploads are in
// progress than four times the call slots (--max_concurrent_calls), which admission could
// never run at once.
StreamFloodLimits FloodLimits(const ServerOptions& options) {
  StreamFloodLimits limits;
  limits.max_uploads = 4 * options.admission.max_concurrent_calls;
  return limits;
}

// Memory outside admitted calls over which the stream-flood guard ends the stalled
// connections holding the most uploads: --max_inflight_bytes / this. What gRPC buffers for
// uploads spread thinner than the guard's count limits grew past the budget before its
// quota's reclaimer acted (and the reclaimer closes well-behaved clients' connections).
constexpr uint64_t kUploadPressureDivisor = 4;

// This process's resident bytes (/proc/self/statm), or 0.
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Whether memory that no admitted call accounts for is over `limit`: resident memory less
// the admitted bytes first (cheap, but it counts the free heap glibc keeps), then the heap
// in use (mallinfo2 walks every arena: only when the first says so).
bool UploadMemoryPressure(const Admission& admission, uint64_t limit) {
  const uint64_t admitted = admission.inflight_bytes();
  if (ResidentBytes() <= admitted + limit) return false;
  const struct mallinfo2 heap = mallinfo2();
  return heap.uordblks + heap.hblkhd > admitted + limit;
}

// Transport limits, from the options: what gRPC's core may hold before any handler runs.
void ConfigureTransport(const ServerOptions& options, grpc::ServerBuilder& builder) {
  const int max_message = static_cast<int>(options.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  // gRPC 1.51 inflates a compressed message whole and only then checks its size: a few MB
  // of gzip on the wire became gigabytes. Unless asked for, a compressed request is refused
  // (UNIMPLEMENTED naming the algorithm) when its headers arrive, before any byte is
  // inflated. Responses are never compressed.
  if (!options.accept_compressed) {
    builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
    builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  }
  // The transport's buffers (uploads in progress, frames, metadata) draw on one quota, a
  // fraction of the admission budget; under its pressure gRPC shrinks flow-control windows
  // and then closes the connections that hold the most.
  grpc::ResourceQuota quota("posenc-transport");
  quota.Resize(static_cast<size_t>(
      std::min<uint64_t>(options.admission.max_inflight_bytes / kTransportQuotaDivisor,
                         std::numeric_limits<int32_t>::max())));
  builder.SetResourceQuota(quota);
  // Per connection: streams at once (one client cannot open thousands), header list size.
  // Not tied to --max_concurrent_calls: a call over that limit must be refused at once
  // (RESOURCE_EXHAUSTED), not held back by the transport.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  // A dead peer is found within keepalive time + timeout; idle connections close after 5
  // minutes; no connection lives past an hour (+ 5 minutes of grace for the calls it
  // carries), so a client cannot pin transport memory forever. Not with --shm: a client's
  // regions belong to its connection, and a client that registers once (as Triton's do)
  // would lose them when the server closed it; its connection then ends only when the
  // client closes it or keepalive finds it dead.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (!options.shm.enabled) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 5 * 60 * 1000);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, 60 * 60 * 1000);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, 5 * 60 * 1000);
  }
  // A second server on a busy port must fail, not silently share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

// Binds a unix:/path socket with `mode` from its first moment: the umask is set for the
// bind (gRPC creates the socket file in BuildAndStart), so no other uid can connect in the
// window before a chmod. The umask is process-wide; Start runs before any other thread
// creates files.
class SocketUmask {
 public:
  SocketUmask(bool active, uint32_t mode)
      : active_(active), saved_(active ? umask(static_cast<mode_t>(~mode & 0777)) : 0) {}
  ~SocketUmask() {
    if (active_) umask(saved_);
  }

 private:
  const bool active_;
  const mode_t saved_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PosencServer>> PosencServer::Create(const ServerOptions& options,
                                                                   ServiceMetrics* metrics) {
  RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<PosencServer> server(new PosencServer());
  RETURN_IF_ERROR(LoadTables(options.tables, server->tables_));
  ASSIGN_OR_RETURN(server->credentials_, Credentials(options));
  server->options_ = options;
  server->metrics_ = metrics;
  server->CreateServices(options);
  return server;
}

absl::Status PosencServer::Serve() {
  if (server_) return absl::FailedPreconditionError("the server is serving already");
  RETURN_IF_ERROR(Listen(options_, credentials_));
  health_->Set(v1::PositionalEncoding::service_full_name(), true);
  health_->Set(inference::GRPCInferenceService::service_full_name(), true);
  monitor_ = std::thread(&PosencServer::Monitor, this, options_.stall_threshold);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PosencServer>> PosencServer::Start(const ServerOptions& options,
                                                                  ServiceMetrics* metrics) {
  ASSIGN_OR_RETURN(std::unique_ptr<PosencServer> server, Create(options, metrics));
  RETURN_IF_ERROR(server->Serve());
  return server;
}

void PosencServer::CreateServices(const ServerOptions& options) {
  cache_ = std::make_unique<TableCache>(options.cache_bytes, metrics_);
  tracker_ = std::make_unique<CallTracker>(metrics_, options.log_requests);
  admission_ = std::make_unique<Admission>(options.admission);
  SharedMemoryRegistry::Options shm_options = options.shm;
  if (metrics_) {  // the gauges follow every change at once; the monitor catches late unmaps
    shm_options.on_change = [this] {
      metrics_->SetSharedMemory(shm_->regions(), shm_->mapped_bytes());
    };
  }
  shm_ = std::make_unique<SharedMemoryRegistry>(std::move(shm_options));
  const int workers = std::max(1, options.threads);
  pool_ = std::make_unique<WorkPool>(/*cheap_threads=*/std::max(2, workers), workers);
  health_ = std::make_unique<HealthService>();
  ServiceState state;
  state.cache = cache_.get();
  state.tables = &tables_;
  state.metrics = metrics_;
  state.shm = shm_.get();
  state.limits.max_output_bytes = options.max_message_bytes - kResponseFramingBytes;
  state.version = kVersion;
  const ServiceRuntime runtime{pool_.get(), admission_.get(), tracker_.get(), shm_.get()};
  runner_ = std::make_unique<CallRunner>(runtime, options.max_message_bytes, metrics_);
  service_ = std::make_unique<PositionalEncodingService>(state, *runner_);
  inference_ = std::make_unique<InferenceService>(
      state, *runner_, InferenceServiceOptions{/*shm_enabled=*/options.shm.enabled});
  reflection_v1_ = std::make_unique<ReflectionV1Service>(
      std::vector<std::string>{v1::PositionalEncoding::service_full_name(),
                               inference::GRPCInferenceService::service_full_name(),
                               grpc::health::v1::Health::service_full_name(),
                               grpc::reflection::v1::ServerReflection::service_full_name(),
                               "grpc.reflection.v1alpha.ServerReflection"});
}

namespace {

// gRPC logs a port it cannot bind as a multi-line ERROR while BuildAndStart runs. While one
// server starts, gRPC's log lines are held here; a failed start drops them (Listen's status
// says what failed, in one line), otherwise they are written out when this goes.
class HeldGrpcLog {
 public:
  HeldGrpcLog() { gpr_set_log_function(&HeldGrpcLog::Hold); }
  ~HeldGrpcLog() {
    gpr_set_log_function(nullptr);  // back to gRPC's default (stderr)
    if (dropped_) {
      Drop();
    } else {
      Release();
    }
  }
  HeldGrpcLog(const HeldGrpcLog&) = delete;
  HeldGrpcLog& operator=(const HeldGrpcLog&) = delete;

  // Forgets the held lines, and any held from now on.
  void Drop() {
    dropped_ = true;
    std::lock_guard<std::mutex> lock(mu());
    held().clear();
  }

 private:
  // Writes the held lines through gRPC's log, then forgets them (called with the default
  // log function back in place).
  void Release() {
    std::vector<Line> lines;
    {
      std::lock_guard<std::mutex> lock(mu());
      lines.swap(held());
    }
    for (const Line& l : lines)
      gpr_log(l.file.c_str(), l.line, l.severity, "%s", l.message.c_str());
  }
  bool dropped_ = false;
  struct Line {
    std::string file;
    int line;
    gpr_log_severity severity;
    std::string message;
  };
  static std::mutex& mu() {
    static std::mutex* m = new std::mutex;
    return *m;
  }
  static std::vector<Line>& held() {
    static auto* lines = new std::vector<Line>;
    return *lines;
  }
  static void Hold(gpr_log_func_args* args) {
    std::lock_guard<std::mutex> lock(mu());
    held().push_back({args->file ? args->file : "", args->line, args->severity,
                      args->message ? args->message : ""});
  }
};

}  // namespace

absl::Status PosencServer::Listen(const ServerOptions& options,
                                  const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  ConfigureTransport(options, builder);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(tracker_->NewInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(creators));
  int bound_port = 0;
  builder.AddListeningPort(options.listen, credentials, &bound_port);
  for (grpc::Service* service : std::initializer_list<grpc::Service*>{
           service_.get(), inference_.get(), health_.get(), reflection_v1_.get()}) {
    builder.RegisterService(service);
  }
  const bool unix_socket = absl::StartsWith(options.listen, "unix:");
  HeldGrpcLog held_log;
  {
    SocketUmask umask_for_bind(unix_socket, options.listen_socket_mode);
    server_ = builder.BuildAndStart();
  }
  const bool abstract_socket = absl::StartsWith(options.listen, "unix-abstract:");
  if (!server_ || (!unix_socket && !abstract_socket && bound_port == 0)) {
    held_log.Drop();
    server_.reset();
    const std::string in_use = PortInUseMessage(options.listen, "--listen");
    if (!in_use.empty()) return absl::UnavailableError(in_use);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen=", options.listen,
                     " (not an address of this host, or a port this user may not bind)"));
  }
  port_ = bound_port;
  if (!unix_socket) {
    if (abstract_socket) {
      address_ = options.listen;
      return absl::OkStatus();
    }
    const size_t colon = options.listen.rfind(':');
    address_ = absl::StrCat(options.listen.substr(0, colon), ":", bound_port);
    return absl::OkStatus();
  }
  address_ = options.listen;
  // The umask can only take bits away; chmod sets exactly the asked mode (e.g. 0666).
  const std::string path = options.listen.substr(5);
  if (chmod(path.c_str(), static_cast<mode_t>(options.listen_socket_mode)) != 0) {
    const int err = errno;
    Shutdown(std::chrono::milliseconds(0));
    return absl::PermissionDeniedError(
        absl::StrCat("--listen_socket_mode: cannot chmod ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

PosencServer::~PosencServer() {
  Shutdown(std::chrono::milliseconds(0));
  Wait();
}

void PosencServer::WatchConnections(StreamFloodGuard& guard, int64_t ticks) {
  const std::vector<ConnectionCounters> connections = ServerConnections();
  const std::map<std::string, int64_t> uploads =
      tracker_->UploadsByPeer(OpenStreamsByPeer(connections));
  const auto now = std::chrono::steady_clock::now();
  const bool pressure = options_.stream_flood_guard &&
                        UploadMemoryPressure(*admission_, options_.admission.max_inflight_bytes /
                                                              kUploadPressureDivisor);
  for (const FloodingConnection& flooding : options_.stream_flood_guard
                                                ? guard.Observe(connections, uploads, now, pressure)
                                                : std::vector<FloodingConnection>{}) {
    const bool ended = EndTcpConnection(flooding.counters.peer, port_);
    Log(LogLevel::kWarning, "connection_ended_stream_flood",
        {{"peer", flooding.counters.peer},
         {"reason", flooding.reason},
         {"streams_started", flooding.counters.streams_started},
         {"messages_received", flooding.counters.messages_received},
         {"uploads_in_progress", flooding.uploads},
         {"ended", ended ? "yes" : "no (not a TCP connection of this server)"}});
    if (metrics_ && ended) metrics_->CountFloodedConnection();
  }
  // Regions of clients whose connection is gone are released (once a second).
  if (shm_->enabled() && ticks % 10 == 0 && shm_->regions() > 0) {
    const auto seen_at = std::chrono::steady_clock::now();
    if (std::optional<std::set<std::string>> peers = ConnectedPeers()) {
      shm_->ReleaseOwnersExcept(LiveShmOwners(*peers), seen_at);
    }
  }
  if (metrics_) {
    metrics_->SetSharedMemory(shm_->regions(), shm_->mapped_bytes());
    // Calls gRPC started that no CallRecord saw, less those still uploading: the
    // transport ended them before any handler.
    const ServerCalls calls = CountServerCalls(connections);
    const int64_t uploading = std::max<int64_t>(0, calls.open_streams - tracker_->running());
    metrics_->SetTransportFailedCalls(calls.started - tracker_->arrivals() - uploading);
    metrics_->SetTransportStartedCalls(calls.started);
  }
}

void PosencServer::Monitor(std::chrono::milliseconds stall_threshold) {
  StreamFloodGuard guard(FloodLimits(options_));
  int64_t ticks = 0;
  int64_t idle_ticks = 0;
  int64_t last_arrivals = tracker_->arrivals();
  std::unique_lock<std::mutex> lock(monitor_mu_);
  while (!monitor_wake_.wait_for(lock, std::chrono::milliseconds(100),
                                 [&] { return monitor_stop_; })) {
    const bool progressing = pool_->OldestWait(Lane::kCheap) < stall_threshold;
    health_->Set("", progressing);
    health_->Set(v1::PositionalEncoding::service_full_name(), progressing);
    ++ticks;
    WatchConnections(guard, ticks);
    health_->Set(inference::GRPCInferenceService::service_full_name(), progressing);
    // glibc keeps freed memory in its arenas for the next call (TuneProcessForServing);
    // hand it back once the server has been idle for a second (no call in progress and none
    // arrived at 10 ticks in a row), and every 10 s while it stays idle (the transport frees
    // memory too, e.g. after a flood of streams or headers that no call saw). Not at the
    // first tick that falls between two calls: a client calling one at a time would then
    // page its next call's buffers in again.
    // Under traffic, once a second, when the arenas' free memory is over kTrimFreeBytes
    // (what a flood of streams leaves behind while calls go on).
    const int64_t arrivals = tracker_->arrivals();
    const bool busy = admission_->inflight_calls() > 0 || arrivals != last_arrivals;
    last_arrivals = arrivals;
    idle_ticks = busy ? 0 : idle_ticks + 1;
    if (idle_ticks == 10 || (idle_ticks > 10 && ticks % 100 == 0) ||
        (busy && ticks % 10 == 0 && mallinfo2().fordblks > kTrimFreeBytes)) {
      malloc_trim(0);
    }
  }
}

void PosencServer::Shutdown(std::chrono::milliseconds grace) {
  std::call_once(shutdown_once_, [&] {
    if (!server_) return;  // Start failed before the server existed
    const auto deadline = std::chrono::steady_clock::now() + grace;
    // The drain's snapshot of open streams first: a health Watch that Shutdown ends must
    // still be counted as the tracked stream it is, not taken for a call still uploading
    // (which would let one new call from that client through).
    const int64_t uploads = tracker_->StartDrain();
    Log(LogLevel::kInfo, "drain_started",
        {{"calls_in_progress", static_cast<int64_t>(tracker_->inflight())},
         {"uploads_accepted", uploads}});
    std::vector<ServerFront*> fronts;
    {
      std::lock_guard<std::mutex> lock(fronts_mu_);
      for (auto& front : fronts_) fronts.push_back(front.get());
    }
    for (ServerFront* front : fronts) front->StartDrain();
    health_->Shutdown();
    tracker_->WaitIdle(deadline);
    for (ServerFront* front : fronts) front->WaitIdle(deadline);
    for (ServerFront* front : fronts) front->Stop();
    // What is left are calls refused with UNAVAILABLE, and their successors still
    // uploading (or work past the grace). Closing every connection first fails those
    // uploads as a transport error (UNAVAILABLE, retryable elsewhere): gRPC's Shutdown
    // would instead cancel each call whose message lands after it began (CANCELLED, which
    // a client cannot tell from an accepted call that was lost).
    grpc_server_cancel_all_calls(server_->c_server());
    // Stops listening; cancels whatever is still running (long work polls for it and stops).
    server_->Shutdown(std::chrono::system_clock::now());
    {
      std::lock_guard<std::mutex> lock(monitor_mu_);
      monitor_stop_ = true;
    }
    monitor_wake_.notify_all();
    if (monitor_.joinable()) monitor_.join();
  });
}

void PosencServer::AddFront(std::unique_ptr<ServerFront> front) {
  std::lock_guard<std::mutex> lock(fronts_mu_);
  fronts_.push_back(std::move(front));
}

void PosencServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace posenc
