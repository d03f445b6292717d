// inference.GRPCInferenceService: the Open Inference Protocol (KServe v2, Triton's gRPC
// API) served beside posenc.v1 on the same port, on the same engine. Each model is a
// scheme; ModelInfer converts its request to the native one (inference_convert.h) and runs
// it through the same RequestHandlers and CallRunner (cost, admission, work pool, response
// size) as posenc.v1's Encode, AttentionBias and GraphEncode, on gRPC's raw path
// (WireUnaryCall; ModelStreamInfer too, OrderedStreamReactor's kRawWire) so that the
// answers' tensor bytes reach gRPC without a copy. Metadata
// rpcs answer on gRPC's thread. Thread-safe; owns nothing but its handlers.
#pragma once

#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/service/call_runner.h"
#include "server/service/inference_convert.h"
#include "server/service/request_handlers.h"
#include "server/service/wire_unary_call.h"

namespace posenc {

struct InferenceServiceOptions {
  // --shm: ServerMetadata lists "system_shared_memory", and tensors may name
  // shared_memory_region. The SystemSharedMemory* rpcs use posenc.v1's region registry;
  // without --shm they answer FAILED_PRECONDITION.
  bool shm_enabled = false;
};

// The generated service on the callback API, with ModelInfer and ModelStreamInfer on the
// raw path (CallbackService with those two swapped for their WithRawCallbackMethod_
// versions).
using InferenceApi = inference::GRPCInferenceService;
using InferenceServiceBase =
    InferenceApi::WithCallbackMethod_ServerLive<InferenceApi::WithCallbackMethod_ServerReady<
        InferenceApi::WithCallbackMethod_ModelReady<InferenceApi::WithCallbackMethod_ServerMetadata<
            InferenceApi::WithCallbackMethod_ModelMetadata<
                InferenceApi::WithRawCallbackMethod_ModelInfer<
                    InferenceApi::WithRawCallbackMethod_ModelStreamInfer<
                        InferenceApi::WithCallbackMethod_ModelConfig<
                            InferenceApi::WithCallbackMethod_RepositoryIndex<
                                InferenceApi::WithCallbackMethod_SystemSharedMemoryStatus<
                                    InferenceApi::WithCallbackMethod_SystemSharedMemoryRegister<
                                        InferenceApi::
                                            WithCallbackMethod_SystemSharedMemoryUnregister<
                                                InferenceApi::Service>>>>>>>>>>>>;

class InferenceService final : public InferenceServiceBase {
 public:
  // `runner` must outlive the service.
  InferenceService(const ServiceState& state, const CallRunner& runner,
                   const InferenceServiceOptions& options);

  // The path ModelInfer takes, for a front that is not gRPC (server/http): converts
  // `request` (taking its raw bytes) and runs it through CallRunner::Run (admitted or
  // refused at once, on this thread when its cost says it runs inline, else on the work
  // pool, the response checked against --max_message_bytes), then passes the outcome to
  // done(CallOutcome) on the thread that ran the work, without blocking this one. The
  // outcome's ticket is for the front to hold until the response has been written.
  // `cancelled` is polled by long work; `shm_owner` names the regions it may use.
  // `running_on`: the work pool's lane this thread serves, when the caller runs there; work
  // whose cost places it on that lane then runs right here rather than being handed to the
  // pool a second time.
  // REQUIRES: `request` and `response` outlive done.
  using InferDone = absl::AnyInvocable<void(CallOutcome) &&>;
  void InferAsync(inference::ModelInferRequest& request, ShmOwner shm_owner, CancelCheck cancelled,
                  inference::ModelInferResponse& response, InferDone done,
                  std::optional<Lane> running_on = std::nullopt) const;

  // What the metadata rpcs answer, for every front. NOT_FOUND for an unknown model.
  void FillServerMetadata(inference::ServerMetadataResponse& response) const;
  static absl::Status FillModelMetadata(const std::string& name, const std::string& version,
                                        inference::ModelMetadataResponse& response);
  static absl::Status FillModelConfig(const std::string& name, const std::string& version,
                                      inference::ModelConfigResponse& response);
  static void FillRepositoryIndex(inference::RepositoryIndexResponse& response);
  // Whether the model is served and the server takes new calls (not draining).
  bool ModelIsReady(const std::string& name, const std::string& version) const;
  // Whether the server takes new calls: false once the drain has begun.
  bool Ready() const { return !runner_.runtime().tracker->draining(); }
  const ServiceRuntime& runtime() const { return runner_.runtime(); }

  // Requests a ModelStreamInfer keeps read ahead of its writes (as EncodeStream).
  static constexpr size_t kStreamWindow = 2;

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  using InferenceServiceBase::ModelInfer;
  using InferenceServiceBase::ModelStreamInfer;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* wire_request,
                                       grpc::ByteBuffer* wire_response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;

 private:
  // Runs the converted request through the native handler and fills `out`.
  grpc::Status Run(NativeRequest& native, const CancelCheck& cancelled,
                   inference::ModelInferResponse& out) const;
  // The cost of the native request, as posenc.v1 would compute it.
  static absl::StatusOr<CallCost> CostOfNative(const NativeRequest& native);

  RequestHandlers handlers_;
  const CallRunner& runner_;
  const InferenceServiceOptions options_;
  const ConvertOptions convert_;
};

}  // namespace posenc
