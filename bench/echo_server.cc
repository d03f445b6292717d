// posenc-bench-echo: the no-op baseline posenc-bench compares posenc-server against. It
// serves posenc.v1.PositionalEncoding's Encode and EncodeStream and the Open Inference
// Protocol's ModelInfer and ModelStreamInfer with the same messages, method names, gRPC
// build, message limit and callback API as posenc-server, but each handler only moves the
// request's tensor bytes into the response (no kernel, no metrics).
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
#include "inference/grpc_service.grpc.pb.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/common/process_tuning.h"
#include "server/service/grpc_service.h"
#include "server/service/inference_service.h"
#include "server/service/ordered_stream.h"

namespace {

// The tensor moves, bytes untouched: what posenc-server's zero-copy path does minus the
// kernel.
void EchoTensor(posenc::v1::Tensor& in, posenc::v1::Tensor* out) {
  out->mutable_shape()->Swap(in.mutable_shape());
  out->set_dtype(in.dtype());
  out->mutable_data()->swap(*in.mutable_data());
}

void Echo(posenc::v1::EncodeRequest& request, posenc::v1::EncodeResponse& response) {
  response.set_request_id(request.request_id());
  EchoTensor(*request.mutable_input(), response.mutable_output());
  if (request.has_key()) EchoTensor(*request.mutable_key(), response.mutable_key_output());
}

// Input "x" answers as output "x_output" ("input" as "output"), as posenc-server names them.
void Echo(inference::ModelInferRequest& request, inference::ModelInferResponse& response) {
  response.set_model_name(request.model_name());
  response.set_model_version("1");
  response.set_id(request.id());
  for (int i = 0; i < request.inputs_size(); ++i) {
    auto& in = *request.mutable_inputs(i);
    auto* out = response.add_outputs();
    out->set_name(in.name() == "input" ? "output" : in.name() + "_output");
    out->set_datatype(in.datatype());
    out->mutable_shape()->Swap(in.mutable_shape());
  }
  response.mutable_raw_output_contents()->Swap(request.mutable_raw_input_contents());
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
    using Reactor =
        posenc::OrderedStreamReactor<posenc::v1::EncodeRequest, posenc::v1::EncodeResponse>;
    return new Reactor(posenc::PositionalEncodingService::kStreamWindow,
                       Reactor::Inline([](posenc::v1::EncodeRequest& request,
                                          posenc::v1::EncodeResponse& response) {
                         Echo(request, response);
                         return grpc::Status::OK;
                       }));
  }
};

class InferenceEchoService final : public inference::GRPCInferenceService::CallbackService {
 public:
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    Echo(*const_cast<inference::ModelInferRequest*>(request), *response);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override {
    using Reactor = posenc::OrderedStreamReactor<inference::ModelInferRequest,
                                                 inference::ModelStreamInferResponse>;
    return new Reactor(posenc::InferenceService::kStreamWindow,
                       Reactor::Inline([](inference::ModelInferRequest& request,
                                          inference::ModelStreamInferResponse& response) {
                         Echo(request, *response.mutable_infer_response());
                         return grpc::Status::OK;
                       }));
  }
};

}  // namespace

int main(int argc, char** argv) {
  posenc::TuneProcessForServing();
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
  InferenceEchoService inference_service;
  grpc::ServerBuilder builder;
  constexpr int kMaxMessage = 64 << 20;  // posenc-server's --max_message_bytes default
  builder.SetMaxReceiveMessageSize(kMaxMessage);
  builder.SetMaxSendMessageSize(kMaxMessage);
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.RegisterService(&inference_service);
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
