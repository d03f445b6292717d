#include "tests/integration/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <thread>

#include "gtest/gtest.h"

namespace posenc::testing {

std::string BinaryPath(const std::string& relative) {
  const char* dir = std::getenv("POSENC_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/" + relative;
}

ServerProcess::ServerProcess(const std::vector<std::string>& extra_flags) {
  int out[2];
  if (pipe(out) != 0) {
    ADD_FAILURE() << "pipe failed";
    return;
  }
  std::vector<std::string> args = {BinaryPath("server/posenc-server"),
                                   "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                   "--threads=1"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  // Read the start line: "... grpc=HOST:PORT metrics=HOST:PORT ...".
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char buf[512];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, n);
  }
  close(out[0]);
  std::smatch m;
  if (std::regex_search(line, m, std::regex(R"(grpc=(\S+) metrics=\S*:(\d+))"))) {
    grpc_address_ = m[1];
    metrics_port_ = std::stoi(m[2]);
    // A loopback TCP address is dialled as 127.0.0.1:PORT; a unix socket as printed.
    std::smatch port;
    const std::string address = grpc_address_;
    if (std::regex_search(address, port, std::regex(R"(^[0-9.]+:(\d+)$)"))) {
      grpc_address_ = "127.0.0.1:" + port[1].str();
    }
  } else {
    ADD_FAILURE() << "posenc-server did not print its start line; got '" << line << "'";
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ <= 0 || waited_) return;
  // Every test ends with a graceful stop: exit status 0 (and, in a sanitizer build, no leak
  // reports, which would make it non-zero).
  kill(pid_, SIGTERM);
  for (int i = 0; i < 300; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      waited_ = true;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      EXPECT_EQ(exit_status_, 0) << "posenc-server did not stop cleanly on SIGTERM";
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "posenc-server did not stop within 30 s of SIGTERM";
  kill(pid_, SIGKILL);
  Wait();
}

std::shared_ptr<grpc::Channel> ServerProcess::Channel() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  return grpc::CreateCustomChannel(grpc_address(), grpc::InsecureChannelCredentials(), args);
}

void ServerProcess::Signal(int signal) { kill(pid_, signal); }

int ServerProcess::Wait() {
  if (waited_) return exit_status_;
  int status = 0;
  waitpid(pid_, &status, 0);
  waited_ = true;
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return exit_status_;
}

long ServerProcess::RssKib() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      long kib = 0;
      in >> kib;
      return kib;
    }
  }
  return -1;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

}  // namespace posenc::testing
