// posenc-bench-http-echo: the no-op baseline for posenc-bench's HTTP rows. It serves POST
// /v2/models/{name}/infer on the same library (civetweb) with the same options as
// posenc-server's HTTP binding, reads the body whole as posenc-server does, and answers
// the binary tensor data extension's shape of reply: a short JSON header naming one output
// and, as its binary data, the request's bytes after its JSON header, untouched. What
// posenc-server adds over it is the JSON parse, the conversion and the scheme itself.
// Runs as its own process; prints "listening grpc=off metrics=off http=HOST:PORT".
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "civetweb.h"

namespace {

int Echo(mg_connection* conn, void*) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const long long length = ri->content_length;
  const char* header = mg_get_header(conn, "Inference-Header-Content-Length");
  if (length < 0 || header == nullptr) {
    mg_send_http_error(conn, 400, "%s", "needs Content-Length and Inference-Header-Content-Length");
    return 400;
  }
  std::string body(static_cast<size_t>(length), '\0');
  size_t have = 0;
  while (have < body.size()) {
    const int n = mg_read(conn, body.data() + have, body.size() - have);
    if (n <= 0) return 400;
    have += static_cast<size_t>(n);
  }
  const size_t json_bytes = std::strtoull(header, nullptr, 10);
  const size_t binary = json_bytes <= body.size() ? body.size() - json_bytes : 0;
  const std::string json =
      "{\"model_name\":\"echo\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"output\","
      "\"datatype\":\"FP32\",\"shape\":[" + std::to_string(binary / 4) +
      "],\"parameters\":{\"binary_data_size\":" + std::to_string(binary) + "}}]}";
  const std::string total = std::to_string(json.size() + binary);
  const std::string json_length = std::to_string(json.size());
  mg_response_header_start(conn, 200);
  mg_response_header_add(conn, "Content-Type", "application/octet-stream", -1);
  mg_response_header_add(conn, "Content-Length", total.c_str(), -1);
  mg_response_header_add(conn, "Inference-Header-Content-Length", json_length.c_str(), -1);
  mg_response_header_send(conn);
  mg_write(conn, json.data(), json.size());
  mg_write(conn, body.data() + json_bytes, binary);
  return 200;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--http_listen=", 0) == 0) listen = arg.substr(14);
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // posenc-server's HttpOptions defaults (server/http/http_server.cc).
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads", "32",
                           "request_timeout_ms", "30000", "keep_alive_timeout_ms", "30000",
                           "enable_keep_alive", "yes", "tcp_nodelay", "1",
                           "max_request_size", "65536", nullptr};
  mg_callbacks callbacks{};
  mg_context* ctx = mg_start(&callbacks, nullptr, options);
  if (ctx == nullptr) {
    std::fprintf(stderr, "posenc-bench-http-echo: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  mg_set_request_handler(ctx, "/v2", &Echo, nullptr);
  mg_server_port port{};
  mg_get_server_ports(ctx, 1, &port);
  std::printf("posenc-bench-http-echo listening grpc=off metrics=off http=127.0.0.1:%d\n",
              port.port);
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  mg_stop(ctx);
  return 0;
}
