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

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/common/log.h"
#include "server/kernels/threads.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"

namespace {

constexpr char kUsage[] = R"(posenc-server: transformer positional encodings over gRPC

flags (--name=value or --name value):
  --listen ADDR            gRPC address, host:port or unix:/path (default 0.0.0.0:50051;
                           port 0 picks a free port and prints it; a busy port is an error)
  --listen_socket_mode M   permission bits of a unix: socket (default 0660: the group may
                           connect)
  --metrics_listen ADDR    Prometheus /metrics address (default 0.0.0.0:9464; empty = off)
  --table NAME=PATH.npy | NAME=PATH.safetensors:TENSOR   a named table (repeatable)
  --cache_bytes N          budget of the precomputed-table cache (default 268435456)
  --max_message_bytes N    largest request or response message (default 67108864; at most
                           2147418112)
  --threads N              kernel threads, and workers per lane of the work pool (default:
                           the number of cores)
  --max_inflight_bytes N   admission budget: summed cost (output + scratch bytes) of the
                           calls in progress (default: a quarter of the memory limit)
  --max_concurrent_calls N calls in progress at once (default: 16 per core, at least 32)
  --stall_threshold DUR    health turns NOT_SERVING while a cheap call waits this long for
                           a worker (default 2s)
  --tls_cert PEM --tls_key PEM [--tls_client_ca PEM]   TLS; with a client CA, mutual TLS
  --shutdown_grace DUR     on SIGTERM/SIGINT: health NOT_SERVING, refuse new calls, finish
                           accepted ones within this, then exit 0 (default 8s)
  --shm[=true|false]       serve tensors by shared-memory reference (default off)
  --shm_key_prefix P       shm_open keys must start with this (default posenc_)
  --shm_max_bytes N        bytes all regions may map (default 17179869184)
  --shm_max_regions N      regions at once (default 256)
  --log_format text|json   log lines on stderr (default text)
  --log_requests           log every call with its duration, not only failed ones
  --version                print the version and exit
)";

struct Flags {
  posenc::ServerOptions server;
  std::string metrics_listen = "0.0.0.0:9464";
  int threads = 0;
  absl::Duration shutdown_grace = absl::Seconds(8);
  posenc::LogFormat log_format = posenc::LogFormat::kText;
};

// Configuration errors are one line naming the flag, and exit status 2.
[[noreturn]] void UsageError(const std::string& message) {
  std::cerr << "posenc-server: " << message << " (see --help)\n";
  std::exit(2);
}

uint64_t ParseCount(const std::string& name, const std::string& value) {
  uint64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n == 0) {
    UsageError(absl::StrCat("--", name, "=", value, " is not a positive whole number"));
  }
  return n;
}

bool ParseBool(const std::string& name, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  UsageError(absl::StrCat("--", name, "=", value, " is not true or false"));
}

// "10s", "500ms", or a bare number of seconds.
absl::Duration ParseDurationFlag(const std::string& name, const std::string& value) {
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(value, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(value, &d)) {
    UsageError(absl::StrCat("--", name, "=", value, " is not a duration (10s, 500ms)"));
  }
  if (d < absl::ZeroDuration()) UsageError(absl::StrCat("--", name, "=", value, " is negative"));
  return d;
}

// Applies one --name=value; false when the name is not a flag.
bool SetFlag(Flags& flags, const std::string& name, const std::string& value) {
  posenc::ServerOptions& s = flags.server;
  if (name == "listen") {
    s.listen = value;
  } else if (name == "metrics_listen") {
    flags.metrics_listen = value;
  } else if (name == "table") {
    s.tables.push_back(value);
  } else if (name == "cache_bytes") {
    s.cache_bytes = ParseCount(name, value);
  } else if (name == "max_message_bytes") {
    s.max_message_bytes = ParseCount(name, value);
  } else if (name == "max_inflight_bytes") {
    s.admission.max_inflight_bytes = ParseCount(name, value);
  } else if (name == "max_concurrent_calls") {
    s.admission.max_concurrent_calls = static_cast<int64_t>(
        std::min<uint64_t>(ParseCount(name, value), uint64_t{1} << 30));
  } else if (name == "threads") {
    if (!absl::SimpleAtoi(value, &flags.threads) || flags.threads < 0 || flags.threads > 1024) {
      UsageError(absl::StrCat("--threads=", value, " is not a thread count (0-1024)"));
    }
  } else if (name == "stall_threshold") {
    s.stall_threshold = absl::ToChronoMilliseconds(ParseDurationFlag(name, value));
  } else if (name == "tls_cert") {
    s.tls_cert = value;
  } else if (name == "tls_key") {
    s.tls_key = value;
  } else if (name == "tls_client_ca") {
    s.tls_client_ca = value;
  } else if (name == "shm") {
    s.shm.enabled = ParseBool(name, value);
  } else if (name == "shm_key_prefix") {
    s.shm.key_prefix = value;
  } else if (name == "shm_max_bytes") {
    s.shm.max_bytes = ParseCount(name, value);
  } else if (name == "shm_max_regions") {
    s.shm.max_regions = static_cast<int>(std::min<uint64_t>(ParseCount(name, value), 1 << 20));
  } else if (name == "listen_socket_mode") {
    char* end = nullptr;
    const unsigned long mode = std::strtoul(value.c_str(), &end, 8);
    if (value.empty() || *end != '\0' || mode > 0777) {
      UsageError(absl::StrCat("--listen_socket_mode=", value, " is not an octal mode (0660)"));
    }
    s.listen_socket_mode = static_cast<uint32_t>(mode);
  } else if (name == "log_format") {
    if (!posenc::ParseLogFormat(value, &flags.log_format)) {
      UsageError(absl::StrCat("--log_format=", value, " is not text or json"));
    }
  } else if (name == "log_requests") {
    s.log_requests = ParseBool(name, value);
  } else if (name == "shutdown_grace") {
    flags.shutdown_grace = ParseDurationFlag(name, value);
  } else {
    return false;
  }
  return true;
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  flags.server.admission.max_inflight_bytes = posenc::DefaultMaxInflightBytes();
  flags.server.admission.max_concurrent_calls = posenc::DefaultMaxConcurrentCalls();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (arg == "--version") {
      std::cout << "posenc-server " << posenc::kVersion << "\n";
      std::exit(0);
    }
    if (!absl::StartsWith(arg, "--")) UsageError(absl::StrCat("unexpected argument '", arg, "'"));
    std::string name = arg.substr(2), value;
    if (name == "shm" || name == "log_requests") {  // booleans: the flag alone turns it on
      name += "=true";
    }
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      UsageError(absl::StrCat("--", name, " needs a value"));
    }
    if (!SetFlag(flags, name, value)) UsageError(absl::StrCat("unknown flag --", name));
  }
  return flags;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  posenc::SetLogFormat(flags.log_format);

  // Block the shutdown signals in every thread; one thread waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  posenc::SetKernelThreads(flags.threads);
  posenc::ServerOptions options = flags.server;
  options.threads = posenc::KernelThreads();
  auto metrics = posenc::ServiceMetrics::Create(posenc::kVersion);
  std::string metrics_address = "off";
  if (!flags.metrics_listen.empty()) {
    auto port = metrics->StartExposer(flags.metrics_listen);
    if (!port.ok()) {
      std::cerr << "posenc-server: " << port.status().message() << "\n";
      return 1;
    }
    metrics_address = absl::StrCat(
        flags.metrics_listen.substr(0, flags.metrics_listen.rfind(':')), ":", *port);
  }
  auto server = posenc::PosencServer::Start(options, metrics.get());
  if (!server.ok()) {
    std::cerr << "posenc-server: " << server.status().message() << "\n";
    return 1;
  }
  std::printf("posenc-server %s listening grpc=%s metrics=%s threads=%d\n", posenc::kVersion,
              (*server)->address().c_str(), metrics_address.c_str(),
              posenc::KernelThreads());
  std::fflush(stdout);
  const posenc::ServerOptions& o = options;
  posenc::Log(posenc::LogLevel::kInfo, "start",
              {{"version", posenc::kVersion},
               {"grpc", (*server)->address()},
               {"metrics", metrics_address},
               {"threads", std::to_string(o.threads)},
               {"tables", std::to_string(o.tables.size())},
               {"max_message_bytes", std::to_string(o.max_message_bytes)},
               {"max_inflight_bytes", std::to_string(o.admission.max_inflight_bytes)},
               {"max_concurrent_calls", std::to_string(o.admission.max_concurrent_calls)},
               {"shm", o.shm.enabled ? "on" : "off"},
               {"tls", o.tls_cert.empty() ? "off" : o.tls_client_ca.empty() ? "on" : "mutual"},
               {"shutdown_grace", absl::FormatDuration(flags.shutdown_grace)}});

  std::thread signal_watcher([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    posenc::Log(posenc::LogLevel::kInfo, "drain",
                {{"signal", std::to_string(signal)},
                 {"grace", absl::FormatDuration(flags.shutdown_grace)}});
    (*server)->Shutdown(absl::ToChronoMilliseconds(flags.shutdown_grace));
  });
  (*server)->Wait();
  signal_watcher.join();
  posenc::Log(posenc::LogLevel::kInfo, "stopped", {});
  return 0;
}
