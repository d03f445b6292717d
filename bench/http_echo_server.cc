// posenc-bench-http-echo: the no-op baseline for posenc-bench's HTTP rows. It serves POST
// /v2/models/{name}/infer on the same transport (server/http's HttpCore, Boost.Beast) with
// the same options as posenc-server's HTTP binding, reads the body whole as posenc-server
// does, and answers the binary tensor data extension's shape of reply: a short JSON header
// naming one output and, as its binary data, the request's bytes after its JSON header,
// untouched. What posenc-server adds over it is the JSON parse, the conversion and the
// scheme itself (and the hand-off to its work pool).
// Runs as its own process; prints "listening grpc=off metrics=off http=HOST:PORT".
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/http/http_core.h"

namespace {

class Echo final : public posenc::HttpHandler {
 public:
  std::optional<posenc::HttpResponse> Screen(posenc::HttpRequest&) override { return std::nullopt; }

  void Handle(posenc::HttpRequest request, posenc::HttpRespond respond) override {
    const std::string* header = request.Header("inference-header-content-length");
    if (header == nullptr) {
      posenc::HttpResponse r;
      r.status = 400;
      r.body = "needs Inference-Header-Content-Length";
      std::move(respond)(std::move(r));
      return;
    }
    auto body = std::make_shared<std::string>(std::move(request.body));
    const size_t json_bytes = std::strtoull(header->c_str(), nullptr, 10);
    const size_t binary = json_bytes <= body->size() ? body->size() - json_bytes : 0;
    posenc::HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body =
        "{\"model_name\":\"echo\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"output\","
        "\"datatype\":\"FP32\",\"shape\":[" +
        std::to_string(binary / 4) +
        "],\"parameters\":{\"binary_data_size\":" + std::to_string(binary) + "}}]}";
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.body.size()));
    r.more.emplace_back(body->data() + (body->size() - binary), binary);
    r.keep = body;
    std::move(respond)(std::move(r));
  }
};

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
  // posenc-server's HttpOptions defaults (server/http/http_server.h).
  posenc::HttpCoreOptions options;
  options.listen = listen;
  Echo echo;
  auto core = posenc::HttpCore::Start(options, echo);
  if (!core.ok()) {
    std::fprintf(stderr, "posenc-bench-http-echo: %s\n",
                 std::string(core.status().message()).c_str());
    return 1;
  }
  std::printf("posenc-bench-http-echo listening grpc=off metrics=off http=127.0.0.1:%d\n",
              (*core)->port());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  (*core)->Stop();
  return 0;
}
