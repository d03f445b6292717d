// posenc-server: flags, the gRPC server, the metrics exporter and signal handling.
// The only code the tests do not link.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "server/common/flags.h"
#include "server/common/log.h"
#include "server/common/port_in_use.h"
#include "server/common/process_tuning.h"
#include "server/http/http_server.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/threads.h"
#include "server/metrics/metrics.h"
#include "server/service/request_handlers.h"
#include "server/service/server.h"

namespace {

// Every flag of posenc-server, declared once: --help prints these lines, the parser knows
// these names, and each can also come from the environment as POSENC_ + NAME.
struct FlagSpec {
  const char* name;
  const char* value;  // the value's form in --help ("" for a boolean)
  const char* help;   // what it does, and its default
  bool boolean = false;
};

constexpr FlagSpec kFlagSpecs[] = {
    {"listen", "ADDR",
     "gRPC address, host:port or unix:/path (default 0.0.0.0:50051; port 0 picks a free "
     "port and prints it; a busy port is an error)"},
    {"listen_socket_mode", "MODE",
     "permission bits of a unix: socket, in place before it accepts (default 0660: the "
     "group may connect)"},
    {"listen_allow_abstract", "",
     "allow --listen=unix-abstract:NAME (default off: an abstract socket has no file mode, "
     "so any local user may connect)",
     true},
    {"metrics_listen", "ADDR", "Prometheus /metrics address (default 0.0.0.0:9464; empty = off)"},
    {"http_listen", "ADDR",
     "the Open Inference Protocol's HTTP/REST binding, host:port (default 0.0.0.0:8000; "
     "empty = off; port 0 picks one); TLS with the --tls_* flags"},
    {"http_read_timeout", "DUR",
     "an HTTP request's headers, and then its body, must arrive within this; an idle "
     "keep-alive connection closes after it (default 30s)"},
    {"http_threads", "N",
     "HTTP I/O threads, each an event loop serving any number of connections; inference "
     "runs on the work pool (default 2)"},
    {"http_max_upload_bytes", "N",
     "bytes all HTTP request bodies still arriving may hold together, also counted in "
     "--max_inflight_bytes (default: half of --max_inflight_bytes)"},
    {"table", "NAME=PATH.npy|NAME=PATH.safetensors:TENSOR", "a named table (repeatable)"},
    {"cache_bytes", "N", "budget of the precomputed-table cache (default 268435456)"},
    {"max_message_bytes", "N",
     "largest request or response message (default 67108864; at most 2147418112)"},
    {"accept_compressed", "",
     "accept gzip/deflate-compressed requests (default off: gRPC would inflate them whole "
     "before checking their size)",
     true},
    {"stream_flood_guard", "true|false",
     "end client connections that reset streams without messages (rapid reset) or hold many "
     "stalled uploads (default true; false when every connection comes from a trusted proxy "
     "that carries many clients)"},
    {"threads", "N",
     "kernel threads, and workers per lane of the work pool (default: the number of cores)"},
    {"kernel", "auto|scalar|avx2|avx512|onednn",
     "the code every kernel runs: auto (default) each kernel's choice for this CPU; scalar, "
     "avx2 or avx512 as on a CPU whose widest instruction set that is; onednn oneDNN's "
     "primitives where a kernel has them. An instruction set this CPU lacks is refused"},
    {"max_inflight_bytes", "N",
     "admission budget: summed cost (output + scratch bytes) of the calls in progress; half "
     "of it is gRPC's transport memory quota (default: a quarter of the memory limit)"},
    {"max_concurrent_calls", "N",
     "calls and streams in progress at once (default: 32 per core, at least 64)"},
    {"stall_threshold", "DUR",
     "health turns NOT_SERVING while a cheap call waits this long for a worker (default 2s)"},
    {"tls_cert", "PEM", "the server's certificate: TLS"},
    {"tls_key", "PEM", "its private key"},
    {"tls_client_ca", "PEM", "mutual TLS: clients must present a certificate this CA signed"},
    {"shutdown_grace", "DUR",
     "on SIGTERM/SIGINT: health NOT_SERVING, refuse new calls, finish accepted ones within "
     "this, then exit 0 (default 8s)"},
    {"shm", "", "serve tensors by shared-memory reference (default off)", true},
    {"shm_key_prefix", "P", "shm_open keys must start with this (default posenc_)"},
    {"shm_max_bytes", "N", "bytes all regions may map (default 17179869184)"},
    {"shm_max_regions", "N", "regions at once (default 256)"},
    {"log_format", "text|json", "log lines on stderr (default text)"},
    {"log_requests", "", "log every call with its duration, not only failed ones", true},
};

// "  --name VALUE" on one line, the help wrapped under it.
std::string Usage() {
  std::string out =
      "posenc-server: transformer positional encodings over gRPC\n\n"
      "Flags: --name=value or --name value (a boolean: --name or --name=false), or the\n"
      "environment variable POSENC_ + NAME in upper case (POSENC_CACHE_BYTES=1073741824);\n"
      "the command line wins.\n";
  auto add = [&out](const std::string& head, const std::string& help) {
    absl::StrAppend(&out, "  ", head, "\n");
    std::string line = "     ";
    for (absl::string_view word : absl::StrSplit(help, ' ', absl::SkipEmpty())) {
      if (line.size() + 1 + word.size() > 90) {
        absl::StrAppend(&out, line, "\n");
        line = "     ";
      }
      absl::StrAppend(&line, " ", word);
    }
    absl::StrAppend(&out, line, "\n");
  };
  for (const FlagSpec& spec : kFlagSpecs) {
    add(absl::StrCat("--", spec.name, spec.boolean ? "[=true|false]" : " ", spec.value), spec.help);
  }
  add("--version", "print the version and exit");
  return out;
}

struct Flags {
  posenc::ServerOptions server;  // threads 0 there: as many as cores
  posenc::HttpOptions http;      // its TLS files and body limit are the server's
  posenc::LogFormat log_format = posenc::LogFormat::kText;
  posenc::KernelImpl kernel = posenc::KernelImpl::kAuto;
};

// Configuration errors are one line naming the flag, and exit status 2.
[[noreturn]] void UsageError(const std::string& message) {
  std::cerr << "posenc-server: " << message << " (see --help)\n";
  std::exit(2);
}

template <typename T>
T OrExit(absl::StatusOr<T> value) {
  if (!value.ok()) UsageError(std::string(value.status().message()));
  return *std::move(value);
}

const posenc::CommandFlags::Options& FlagOptions() {
  static const auto* options = [] {
    auto* o = new posenc::CommandFlags::Options();
    for (const FlagSpec& spec : kFlagSpecs) {
      o->known.insert(spec.name);
      if (spec.boolean) o->booleans.insert(spec.name);
    }
    return o;
  }();
  return *options;
}

// --help and --version answer wherever they stand, before any other flag is checked.
void AnswerHelpOrVersion(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << Usage();
      std::exit(0);
    }
    if (arg == "--version") {
      std::cout << "posenc-server " << posenc::kVersion << "\n";
      std::exit(0);
    }
  }
}

// Where the server listens: --listen, its unix-socket flags, --metrics_listen.
void ParseListenFlags(const posenc::CommandFlags& f, posenc::ServerOptions& s) {
  s.listen = f.Str("listen", s.listen);
  s.listen_allow_abstract = OrExit(f.Bool("listen_allow_abstract"));
  s.metrics_listen = f.Str("metrics_listen", s.metrics_listen);
  if (f.Has("listen_socket_mode")) {
    const std::string mode = f.Str("listen_socket_mode");
    char* end = nullptr;
    const unsigned long bits = std::strtoul(mode.c_str(), &end, 8);
    if (mode.empty() || *end != '\0' || bits > 0777) {
      UsageError(std::string(f.Bad("listen_socket_mode", "an octal mode such as 0660").message()));
    }
    s.listen_socket_mode = static_cast<uint32_t>(bits);
  }
}

// Sizes, budgets, threads and timings of the gRPC server.
void ParseLimitFlags(const posenc::CommandFlags& f, posenc::ServerOptions& s) {
  s.tables = f.All("table");
  s.cache_bytes = OrExit(f.Count("cache_bytes", s.cache_bytes));
  s.max_message_bytes = OrExit(f.Count("max_message_bytes", s.max_message_bytes));
  s.accept_compressed = OrExit(f.Bool("accept_compressed"));
  s.stream_flood_guard = !f.Has("stream_flood_guard") || OrExit(f.Bool("stream_flood_guard"));
  s.admission.max_inflight_bytes =
      OrExit(f.Count("max_inflight_bytes", posenc::DefaultMaxInflightBytes()));
  s.admission.max_concurrent_calls = std::min<int64_t>(
      OrExit(f.Count("max_concurrent_calls", posenc::DefaultMaxConcurrentCalls())),
      int64_t{1} << 30);
  s.threads = static_cast<int>(OrExit(f.IntIn("threads", 0, 1024, 0)));
  s.stall_threshold = absl::ToChronoMilliseconds(
      OrExit(f.Duration("stall_threshold", absl::FromChrono(s.stall_threshold))));
  s.shutdown_grace = absl::ToChronoMilliseconds(
      OrExit(f.Duration("shutdown_grace", absl::FromChrono(s.shutdown_grace))));
  s.log_requests = OrExit(f.Bool("log_requests"));
}

// TLS files and shared memory.
void ParseTlsAndShmFlags(const posenc::CommandFlags& f, posenc::ServerOptions& s) {
  s.tls_cert = f.Str("tls_cert");
  s.tls_key = f.Str("tls_key");
  s.tls_client_ca = f.Str("tls_client_ca");
  s.shm.enabled = OrExit(f.Bool("shm"));
  s.shm.key_prefix = f.Str("shm_key_prefix", s.shm.key_prefix);
  s.shm.max_bytes = OrExit(f.Count("shm_max_bytes", s.shm.max_bytes));
  s.shm.max_regions = static_cast<int>(
      std::min<int64_t>(OrExit(f.Count("shm_max_regions", s.shm.max_regions)), 1 << 20));
}

// The HTTP front's flags; its TLS files and body limit are the gRPC server's.
posenc::HttpOptions ParseHttpFlags(const posenc::CommandFlags& f, const posenc::ServerOptions& s) {
  posenc::HttpOptions h;
  h.listen = f.Str("http_listen", h.listen);
  h.read_timeout = absl::ToChronoMilliseconds(
      OrExit(f.Duration("http_read_timeout", absl::FromChrono(h.read_timeout))));
  if (h.read_timeout.count() < 1) UsageError("--http_read_timeout must be at least 1ms");
  h.threads = static_cast<int>(OrExit(f.IntIn("http_threads", 1, 64, 2)));
  h.max_upload_bytes = OrExit(f.Count("http_max_upload_bytes", 0));
  h.tls_cert = s.tls_cert;
  h.tls_key = s.tls_key;
  h.tls_client_ca = s.tls_client_ca;
  h.max_body_bytes = s.max_message_bytes;
  return h;
}

// Every flag, checked; a bad one ends the process (exit 2) before anything is bound.
Flags ParseFlags(int argc, char** argv) {
  AnswerHelpOrVersion(argc, argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  const posenc::CommandFlags f =
      OrExit(posenc::CommandFlags::Parse(args, FlagOptions(), /*env_prefix=*/"POSENC_"));
  Flags flags;
  ParseListenFlags(f, flags.server);
  ParseLimitFlags(f, flags.server);
  ParseTlsAndShmFlags(f, flags.server);
  const absl::StatusOr<posenc::KernelImpl> kernel = posenc::ParseKernelOverride(f.Str("kernel"));
  if (!kernel.ok()) UsageError(std::string(f.Bad("kernel", kernel.status().message()).message()));
  flags.kernel = *kernel;
  if (f.Has("log_format") && !posenc::ParseLogFormat(f.Str("log_format"), &flags.log_format)) {
    UsageError(std::string(f.Bad("log_format", "text or json").message()));
  }
  flags.http = ParseHttpFlags(f, flags.server);
  return flags;
}

// One log line with the configuration a reader needs to explain the server's behaviour.
void LogStart(const posenc::ServerOptions& o, const posenc::PosencServer& server,
              const std::string& metrics_address) {
  posenc::Log(posenc::LogLevel::kInfo, "start",
              {{"version", posenc::kVersion},
               {"grpc", server.address()},
               {"metrics", metrics_address},
               {"threads", o.threads},
               {"kernel", posenc::KernelImplName(posenc::KernelOverride())},
               {"tables", o.tables.size()},
               {"max_message_bytes", o.max_message_bytes},
               {"max_inflight_bytes", o.admission.max_inflight_bytes},
               {"max_concurrent_calls", o.admission.max_concurrent_calls},
               {"shm", o.shm.enabled ? "on" : "off"},
               {"tls", o.tls_cert.empty()        ? "off"
                       : o.tls_client_ca.empty() ? "on"
                                                 : "mutual"},
               {"shutdown_grace", absl::FormatDuration(absl::FromChrono(o.shutdown_grace))}});
}

// Starts /metrics if asked; returns the bound address for the logs ("off" if not asked).
std::string StartMetrics(posenc::ServiceMetrics& metrics, const std::string& listen) {
  if (listen.empty()) return "off";
  auto port = metrics.StartExposer(listen);
  if (!port.ok()) {
    const std::string in_use = posenc::PortInUseMessage(listen, "--metrics_listen");
    std::cerr << "posenc-server: " << (in_use.empty() ? port.status().message() : in_use) << "\n";
    std::exit(1);
  }
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", *port);
}

// A failed start: one line, exit status 1.
void ExitIfError(const absl::Status& status) {
  if (status.ok()) return;
  std::cerr << "posenc-server: " << status.message() << "\n";
  std::exit(1);
}

// Binds the HTTP front if asked and hands it to the server; returns its address ("off").
std::string StartHttp(const posenc::HttpOptions& options, posenc::PosencServer& server,
                      posenc::ServiceMetrics* metrics) {
  if (options.listen.empty()) return "off";
  auto http = posenc::HttpServer::Start(options, server.inference(), server.tracker(), metrics);
  ExitIfError(http.status());
  std::string address = (*http)->address();
  server.AddFront(std::move(*http));
  return address;
}

// Drains the server on the first SIGTERM or SIGINT (blocked in every thread by main).
std::thread WatchSignals(const sigset_t& signals, posenc::PosencServer& server,
                         std::chrono::milliseconds grace) {
  return std::thread([&server, signals, grace] {
    int signal = 0;
    sigwait(&signals, &signal);
    posenc::Log(posenc::LogLevel::kInfo, "drain",
                {{"signal", signal}, {"grace", absl::FormatDuration(absl::FromChrono(grace))}});
    server.Shutdown(grace);
  });
}

}  // namespace

// Every flag is parsed and checked, and the tables and TLS files read, before any port is
// bound; then /metrics, gRPC and HTTP bind in that order.
int main(int argc, char** argv) {
  posenc::TuneProcessForServing();
  const Flags flags = ParseFlags(argc, argv);
  posenc::SetLogFormat(flags.log_format);

  // Block the shutdown signals in every thread; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  posenc::ServerOptions options = flags.server;
  posenc::SetKernelThreads(options.threads);
  posenc::SetKernelOverride(flags.kernel);
  options.threads = posenc::KernelThreads();
  auto metrics = posenc::ServiceMetrics::Create(posenc::kVersion, posenc::MetricsSchemes());
  auto server = posenc::PosencServer::Create(options, metrics.get());
  ExitIfError(server.status());
  const std::string metrics_address = StartMetrics(*metrics, options.metrics_listen);
  ExitIfError((*server)->Serve());
  const std::string http_address = StartHttp(flags.http, **server, metrics.get());
  std::printf("posenc-server %s listening grpc=%s metrics=%s http=%s threads=%d\n",
              posenc::kVersion, (*server)->address().c_str(), metrics_address.c_str(),
              http_address.c_str(), posenc::KernelThreads());
  std::fflush(stdout);
  LogStart(options, **server, metrics_address);

  std::thread signal_watcher = WatchSignals(signals, **server, options.shutdown_grace);
  (*server)->Wait();
  signal_watcher.join();
  posenc::Log(posenc::LogLevel::kInfo, "stopped", {});
  return 0;
}
