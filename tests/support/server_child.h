// A posenc server binary (posenc-server, posenc-bench-echo) run as a child process: fork,
// exec, read the start line it prints ("... grpc=HOST:PORT metrics=HOST:PORT ..."), and
// stop it with a signal. Shared by the integration tests (tests/integration) and
// posenc-bench, which add their own reporting on top. Not thread-safe; one owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace posenc::testing {

class ServerChild {
 public:
  // Starts argv[0] with `argv` and waits up to `timeout` for its start line. started()
  // says whether one came; start_line() holds whatever it printed.
  ServerChild(std::vector<std::string> argv, std::chrono::milliseconds timeout);
  // Kills a child nobody waited for (SIGKILL) and reaps it.
  ~ServerChild();
  ServerChild(const ServerChild&) = delete;
  ServerChild& operator=(const ServerChild&) = delete;

  bool started() const { return !grpc_address_.empty(); }
  const std::string& start_line() const { return start_line_; }
  // "127.0.0.1:PORT" for a loopback TCP listener, "unix:/path" as printed.
  const std::string& grpc_address() const { return grpc_address_; }
  // The metrics port, or 0 when the server printed none (metrics=off).
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }

  void Signal(int signal);
  // Waits up to `timeout` for the child to exit: its exit status, -1 if a signal killed
  // it, or nullopt if it is still running.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout);
  // Waits for the child to exit, however long it takes; the same statuses.
  int Wait();

 private:
  pid_t pid_ = -1;
  std::string start_line_;
  std::string grpc_address_;
  int metrics_port_ = 0;
  std::optional<int> exit_status_;
};

}  // namespace posenc::testing
