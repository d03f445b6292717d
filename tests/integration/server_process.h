// Starts the real posenc-server binary on port 0 for integration tests, reads the line it
// prints on start, and stops it with a signal (tests/support/server_child, with gtest
// failures on top). Not thread-safe; one per test.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "tests/support/server_child.h"

namespace posenc::testing {

class ServerProcess {
 public:
  // Starts `posenc-server --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen=
  // <extra_flags>` and waits for its start line. Fails the test (ADD_FAILURE) if it does not start.
  explicit ServerProcess(const std::vector<std::string>& extra_flags = {});
  ~ServerProcess();

  bool started() const { return child_.started(); }
  // "127.0.0.1:PORT" or "unix:/path".
  const std::string& grpc_address() const { return child_.grpc_address(); }
  int metrics_port() const { return child_.metrics_port(); }
  pid_t pid() const { return child_.pid(); }
  std::shared_ptr<grpc::Channel> Channel() const;

  // Sends `signal`; Wait() then returns the exit status (or -1 if killed by a signal).
  void Signal(int signal);
  int Wait();

  // Resident memory of the server process in KiB (from /proc).
  long RssKib() const;

 private:
  ServerChild child_;
  bool waited_ = false;
};

// GET http://127.0.0.1:port/path over a plain socket; returns the body ("" on failure).
std::string HttpGet(int port, const std::string& path);

// The sum of the samples of metric `name` in Prometheus text `text` whose line contains
// every fragment (e.g. `method="Encode"`); 0 when none does.
double MetricSum(const std::string& text, const std::string& name,
                 const std::vector<std::string>& fragments);
// MetricSum over one scrape of the server's /metrics.
double ScrapeMetric(const ServerProcess& server, const std::string& name,
                    const std::vector<std::string>& fragments);

// Path of a built binary, e.g. BinaryPath("server/posenc-server").
std::string BinaryPath(const std::string& relative);

}  // namespace posenc::testing
