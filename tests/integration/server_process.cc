#include "tests/integration/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

namespace posenc::testing {

std::string BinaryPath(const std::string& relative) {
  const char* dir = std::getenv("POSENC_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/" + relative;
}

namespace {

std::vector<std::string> ServerArgv(const std::vector<std::string>& extra_flags) {
  std::vector<std::string> argv = {BinaryPath("server/posenc-server"), "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0", "--http_listen=", "--threads=1"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  return argv;
}

}  // namespace

ServerProcess::ServerProcess(const std::vector<std::string>& extra_flags)
    : child_(ServerArgv(extra_flags), std::chrono::seconds(30)) {
  if (!child_.started() || child_.metrics_port() == 0) {
    ADD_FAILURE() << "posenc-server did not print its start line; got '" << child_.start_line()
                  << "'";
  }
}

ServerProcess::~ServerProcess() {
  if (child_.pid() <= 0 || waited_) return;  // a test that waited checked the status itself
  // Every test ends with a graceful stop: exit status 0 (and, in a sanitizer build, no leak
  // reports, which would make it non-zero).
  child_.Signal(SIGTERM);
  const std::optional<int> status = child_.WaitFor(std::chrono::seconds(30));
  if (!status.has_value()) {
    ADD_FAILURE() << "posenc-server did not stop within 30 s of SIGTERM";
    return;  // ServerChild kills and reaps it
  }
  EXPECT_EQ(*status, 0) << "posenc-server did not stop cleanly on SIGTERM";
}

std::shared_ptr<grpc::Channel> ServerProcess::Channel() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  return grpc::CreateCustomChannel(grpc_address(), grpc::InsecureChannelCredentials(), args);
}

void ServerProcess::Signal(int signal) { child_.Signal(signal); }

int ServerProcess::Wait() {
  waited_ = true;
  return child_.Wait();
}

long ServerProcess::RssKib() const {
  std::ifstream in("/proc/" + std::to_string(child_.pid()) + "/status");
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

double MetricSum(const std::string& text, const std::string& name,
                 const std::vector<std::string>& fragments) {
  double sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    // The name itself, not a longer one it prefixes (posenc_x vs posenc_x_total).
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    bool all = true;
    for (const std::string& f : fragments) all = all && line.find(f) != std::string::npos;
    if (all) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

double ScrapeMetric(const ServerProcess& server, const std::string& name,
                    const std::vector<std::string>& fragments) {
  return MetricSum(HttpGet(server.metrics_port(), "/metrics"), name, fragments);
}

}  // namespace posenc::testing
