#include "bench/http_load.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/server_child.h"

namespace posenc::bench {
namespace {

// The HTTP port a child printed ("... http=HOST:PORT ..."); exits the bench without one.
int HttpPort(const testing::ServerChild& child, const std::string& name) {
  std::smatch m;
  const std::string& line = child.start_line();
  if (!child.started() || !std::regex_search(line, m, std::regex(R"(http=\S*:(\d+))"))) {
    std::fprintf(stderr, "posenc-bench: %s did not start HTTP: '%s'\n", name.c_str(), line.c_str());
    std::exit(1);
  }
  return std::stoi(m[1]);
}

// One keep-alive HTTP/1.1 connection to 127.0.0.1:port, blocking.
class Connection {
 public:
  explicit Connection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("posenc-bench: connect");
      std::exit(1);
    }
  }
  ~Connection() { close(fd_); }

  // Sends `request` whole and reads one response; its body into `body`. The HTTP status.
  int RoundTrip(const std::string& request, std::string& body) {
    for (size_t sent = 0; sent < request.size();) {
      const ssize_t n = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return -1;
      sent += static_cast<size_t>(n);
    }
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return -1;
    }
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    const int status = std::atoi(head.c_str() + 9);
    const size_t at = head.find("Content-Length: ");
    const size_t length =
        at == std::string::npos ? 0 : std::strtoull(head.c_str() + at + 16, nullptr, 10);
    body.resize(length);  // the same size every call: no zero-fill after the first
    size_t have = std::min(length, buffer_.size());
    std::memcpy(body.data(), buffer_.data(), have);
    buffer_.erase(0, have);
    while (have < length) {
      const ssize_t n = recv(fd_, body.data() + have, length - have, 0);
      if (n <= 0) return -1;
      have += static_cast<size_t>(n);
    }
    return status;
  }

 private:
  bool Fill() {
    char chunk[65536];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string buffer_;
};

// A binary infer of `payload` bytes of fp32 0.25 shaped [1, payload/1024, 256].
std::string InferRequest(size_t payload) {
  const size_t seq = payload / (256 * sizeof(float));
  const std::string header =
      absl::StrCat(R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,)", seq,
                   R"(,256],"parameters":{"binary_data_size":)", payload,
                   R"(}}],"parameters":{"binary_data_output":true}})");
  std::string data(payload, '\0');
  FillFloats(data.data(), DType::kFloat32, payload / sizeof(float), 0.25f);
  return absl::StrCat(
      "POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: bench\r\n"
      "Content-Type: application/octet-stream\r\n"
      "Inference-Header-Content-Length: ",
      header.size(), "\r\nContent-Length: ", header.size() + payload, "\r\n\r\n", header, data);
}

// posenc answers x[1] = 0.25 + cos(0) = 1.25 at position 0; the echo returns 0.25.
void Verify(const std::string& name, int port, const std::string& request, size_t payload,
            bool echo) {
  Connection conn(port);
  std::string body;
  const int status = conn.RoundTrip(request, body);
  float value = 0;
  const bool ok = status == 200 && body.size() >= payload;
  if (ok) std::memcpy(&value, body.data() + (body.size() - payload) + sizeof(float), sizeof(float));
  const float expected = echo ? 0.25f : 1.25f;
  if (!ok || std::fabs(value - expected) > 1e-6f) {
    std::fprintf(stderr, "posenc-bench: %s answered HTTP %d wrongly (x[1] = %g, expected %g): %s\n",
                 name.c_str(), status, value, expected, body.substr(0, 200).c_str());
    std::exit(1);
  }
}

struct Cell {
  int64_t requests = 0;
  double seconds = 0, mbps = 0, p50_ms = 0, p99_ms = 0;
};

Cell RunCell(int port, const std::string& request, size_t payload, int concurrency,
             double seconds) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(concurrency));
  std::atomic<int> errors{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&, w] {
      Connection conn(port);
      std::string body;
      while (Clock::now() < deadline) {
        const Clock::time_point t = Clock::now();
        if (conn.RoundTrip(request, body) != 200) {
          errors++;
          return;
        }
        latencies[static_cast<size_t>(w)].push_back(SecondsSince(t) * 1e3);
      }
    });
  }
  for (auto& t : workers) t.join();
  if (errors > 0) {
    std::fprintf(stderr, "posenc-bench: %d HTTP workers saw an error\n", errors.load());
    std::exit(1);
  }
  Cell c;
  c.seconds = SecondsSince(start);
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  c.requests = static_cast<int64_t>(all.size());
  c.mbps = static_cast<double>(payload) * static_cast<double>(c.requests) / c.seconds / 1e6;
  auto pct = [&](double p) {
    if (all.empty()) return 0.0;
    return all[std::min(all.size() - 1, static_cast<size_t>(std::ceil(p * all.size()) - 1))];
  };
  c.p50_ms = pct(0.5);
  c.p99_ms = pct(0.99);
  return c;
}

}  // namespace

json RunHttp(const Options& o) {
  std::vector<std::string> args = {o.server_binary, "--listen=127.0.0.1:0",
                                   "--metrics_listen=", "--http_listen=127.0.0.1:0"};
  if (o.threads > 0) args.push_back(absl::StrCat("--threads=", o.threads));
  testing::ServerChild posenc(args, std::chrono::seconds(30));
  testing::ServerChild echo({o.http_echo_binary, "--http_listen=127.0.0.1:0"},
                            std::chrono::seconds(30));
  const int posenc_port = HttpPort(posenc, "posenc-server");
  const int echo_port = HttpPort(echo, "posenc-bench-http-echo");
  json rows = json::array();
  std::vector<size_t> payloads = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 48 << 20};
  if (o.quick) payloads = {64 << 10, 1 << 20};
  for (size_t payload : payloads) {
    const std::string request = InferRequest(payload);
    Verify("posenc-server", posenc_port, request, payload, false);
    Verify("posenc-bench-http-echo", echo_port, request, payload, true);
    for (int concurrency : {1, 8}) {
      if (!o.filter.empty() &&
          absl::StrCat("HttpInfer ", PayloadLabel(payload), " x", concurrency).find(o.filter) ==
              std::string::npos) {
        continue;
      }
      const double seconds = o.cell_seconds * (payload >= (size_t{16} << 20) ? 2.5 : 1.0);
      Cell best_posenc, best_echo;
      for (int round = 0; round < o.rounds; ++round) {
        RunCell(echo_port, request, payload, concurrency, std::min(0.1, seconds / 4));
        const Cell e = RunCell(echo_port, request, payload, concurrency, seconds);
        RunCell(posenc_port, request, payload, concurrency, std::min(0.1, seconds / 4));
        const Cell p = RunCell(posenc_port, request, payload, concurrency, seconds);
        if (e.mbps > best_echo.mbps) best_echo = e;
        if (p.mbps > best_posenc.mbps) best_posenc = p;
      }
      if (!o.json) {
        std::fprintf(stderr, "  http HttpInfer %9zu B x%d: posenc %8.1f MB/s echo %8.1f MB/s\n",
                     payload, concurrency, best_posenc.mbps, best_echo.mbps);
      }
      rows.push_back({{"rpc", "HttpInfer"},
                      {"scheme", "sinusoidal_add_fp32"},
                      {"payload_bytes", payload},
                      {"concurrency", concurrency},
                      {"posenc_mbps", best_posenc.mbps},
                      {"echo_mbps", best_echo.mbps},
                      {"ratio", best_posenc.mbps / best_echo.mbps},
                      {"posenc_p50_ms", best_posenc.p50_ms},
                      {"echo_p50_ms", best_echo.p50_ms},
                      {"posenc_p99_ms", best_posenc.p99_ms},
                      {"echo_p99_ms", best_echo.p99_ms},
                      {"posenc_requests", best_posenc.requests},
                      {"echo_requests", best_echo.requests}});
    }
  }
  posenc.Signal(SIGTERM);
  posenc.Wait();
  echo.Signal(SIGTERM);
  echo.Wait();
  return rows;
}

}  // namespace posenc::bench
