#include "tests/support/server_child.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <thread>

namespace posenc::testing {
namespace {

int StatusOf(int wait_status) { return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1; }

}  // namespace

ServerChild::ServerChild(std::vector<std::string> argv, std::chrono::milliseconds timeout) {
  int out[2];
  if (argv.empty() || pipe(out) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {  // child: stdout into the pipe, then the binary
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (start_line_.find('\n') == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char buf[512];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    start_line_.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  std::smatch m;
  if (!std::regex_search(start_line_, m, std::regex(R"(grpc=(\S+) metrics=(\S+))"))) return;
  grpc_address_ = m[1];
  const std::string metrics = m[2];
  std::smatch port;
  // A TCP listener is dialled on loopback whatever host it bound; a unix socket as printed.
  if (std::regex_search(grpc_address_, port, std::regex(R"(^[0-9.]+:(\d+)$)"))) {
    grpc_address_ = "127.0.0.1:" + port[1].str();
  }
  if (std::regex_search(metrics, port, std::regex(R"(:(\d+)$)"))) {
    metrics_port_ = std::stoi(port[1]);
  }
}

ServerChild::~ServerChild() {
  if (pid_ <= 0 || exit_status_.has_value()) return;
  kill(pid_, SIGKILL);
  Wait();
}

void ServerChild::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

std::optional<int> ServerChild::WaitFor(std::chrono::milliseconds timeout) {
  if (exit_status_.has_value() || pid_ <= 0) return exit_status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = StatusOf(status);
      return exit_status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int ServerChild::Wait() {
  if (exit_status_.has_value()) return *exit_status_;
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  exit_status_ = StatusOf(status);
  return *exit_status_;
}

}  // namespace posenc::testing
