// posenc-bench-echo: the no-op baseline posenc-bench compares posenc-server against. It
// serves posenc.v1.PositionalEncoding's Encode and EncodeStream with the same messages,
// method names, gRPC build, message limit and callback API as posenc-server, but each
// handler only moves the request's tensor bytes into the response (no kernel, no metrics).
// It runs as its own process, as posenc-server does, so both pay the same costs.
//
//   posenc-bench-echo [--listen=127.0.0.1:0]
//   prints: posenc-bench-echo VERSION listening grpc=HOST:PORT metrics=off threads=0
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/service/grpc_service.h"
#include "server/service/ordered_stream.h"

namespace {

// The tensor moves, bytes untouched: what posenc-server's zero-copy path does minus the
// kernel.
void Echo(posenc::v1::EncodeRequest& request, posenc::v1::EncodeResponse& response) {
  response.set_request_id(request.request_id());
  posenc::v1::Tensor* out = response.mutable_output();
  out->mutable_shape()->Swap(request.mutable_input()->mutable_shape());
  out->set_dtype(request.input().dtype());
  out->mutable_data()->swap(*request.mutable_input()->mutable_data());
}

class EchoService final : public posenc::v1::PositionalEncoding::CallbackService {
 public:
  grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* context,
                                   const posenc::v1::EncodeRequest* request,
                                   posenc::v1::EncodeResponse* response) override {
    // The request is ours until Finish, as in posenc-server.
    Echo(*const_cast<posenc::v1::EncodeRequest*>(request), *response);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerBidiReactor<posenc::v1::EncodeRequest, posenc::v1::EncodeResponse>* EncodeStream(
      grpc::CallbackServerContext* context) override {
    // The same stream machinery as posenc-server's EncodeStream, so the two streaming paths
    // differ only by the kernel.
    return new posenc::OrderedStreamReactor<posenc::v1::EncodeRequest, posenc::v1::EncodeResponse>(
        posenc::PositionalEncodingService::kStreamWindow,
        [](posenc::v1::EncodeRequest& request, posenc::v1::EncodeResponse& response) {
          Echo(request, response);
          return grpc::Status::OK;
        });
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--listen=", 9) == 0) {
      listen = argv[i] + 9;
    } else {
      std::fprintf(stderr, "usage: posenc-bench-echo [--listen=HOST:PORT]\n");
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  EchoService service;
  grpc::ServerBuilder builder;
  constexpr int kMaxMessage = 64 << 20;  // posenc-server's --max_message_bytes default
  builder.SetMaxReceiveMessageSize(kMaxMessage);
  builder.SetMaxSendMessageSize(kMaxMessage);
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "posenc-bench-echo: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::printf("posenc-bench-echo 0 listening grpc=%s:%d metrics=off threads=0\n", host.c_str(),
              port);
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  return 0;
}
