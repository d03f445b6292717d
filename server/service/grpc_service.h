// posenc.v1.PositionalEncoding on gRPC's callback API. Handlers stay thin: each computes the
// call's (or stream message's) cost from the request once and hands it to the CallRunner
// (refuse while draining, admit or refuse at once, run RequestHandlers inline or on the
// WorkPool, check the response size, finish); the shared-memory rpcs are answered on
// gRPC's thread. Encode, EncodeStream, AttentionBias and GetTable take gRPC's raw path
// (WireUnaryCall, OrderedStreamReactor's kRawWire, TableReactor): their answers' tensor
// bytes reach gRPC without a copy (wire_format.h). Thread-safe; owns
// nothing but its handlers.
#pragma once

#include "posenc/v1/posenc.grpc.pb.h"
#include "server/service/call_runner.h"
#include "server/service/owned_messages.h"
#include "server/service/request_handlers.h"
#include "server/service/wire_unary_call.h"

namespace posenc {

// The generated service on the callback API, with the tensor rpcs but GraphEncode on the
// raw path (CallbackService with those methods swapped for their WithRawCallbackMethod_
// versions).
using PositionalEncodingApi = v1::PositionalEncoding;
using PositionalEncodingBase = PositionalEncodingApi::WithRawCallbackMethod_Encode<
    PositionalEncodingApi::WithRawCallbackMethod_EncodeStream<
        PositionalEncodingApi::WithRawCallbackMethod_AttentionBias<
            PositionalEncodingApi::WithRawCallbackMethod_GetTable<
                PositionalEncodingApi::WithCallbackMethod_ListSchemes<
                    PositionalEncodingApi::WithCallbackMethod_GraphEncode<
                        PositionalEncodingApi::WithCallbackMethod_RegisterSharedMemory<
                            PositionalEncodingApi::WithCallbackMethod_UnregisterSharedMemory<
                                PositionalEncodingApi::WithCallbackMethod_SharedMemoryStatus<
                                    PositionalEncodingApi::Service>>>>>>>>>;

class PositionalEncodingService final : public PositionalEncodingBase {
 public:
  // `runner` must outlive the service.
  PositionalEncodingService(const ServiceState& state, const CallRunner& runner)
      : handlers_(state), runner_(runner) {
    SetMessageAllocatorFor_GraphEncode(&graph_messages_);
  }

  // Requests an EncodeStream keeps read ahead of its writes; a client that does not read
  // makes the server stop reading, so memory per stream stays bounded.
  static constexpr size_t kStreamWindow = 2;

  using PositionalEncodingBase::AttentionBias;
  using PositionalEncodingBase::Encode;
  using PositionalEncodingBase::EncodeStream;
  grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* wire_request,
                                   grpc::ByteBuffer* wire_response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* EncodeStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* AttentionBias(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* wire_request,
                                          grpc::ByteBuffer* wire_response) override;
  using PositionalEncodingBase::GetTable;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GetTable(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* wire_request) override;
  grpc::ServerUnaryReactor* ListSchemes(grpc::CallbackServerContext* context,
                                        const v1::ListSchemesRequest* request,
                                        v1::ListSchemesResponse* response) override;
  grpc::ServerUnaryReactor* GraphEncode(grpc::CallbackServerContext* context,
                                        const v1::GraphRequest* request,
                                        v1::GraphResponse* response) override;
  // Shared memory: the region registry (server/shm); FAILED_PRECONDITION without --shm.
  grpc::ServerUnaryReactor* RegisterSharedMemory(
      grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest* request,
      v1::RegisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(
      grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
      v1::UnregisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* SharedMemoryStatus(grpc::CallbackServerContext* context,
                                               const v1::SharedMemoryStatusRequest* request,
                                               v1::SharedMemoryStatusResponse* response) override;

  const RequestHandlers& handlers() const { return handlers_; }
  const CallRunner& runner() const { return runner_; }
  const ServiceRuntime& runtime() const { return runner_.runtime(); }

 private:
  template <typename Request, typename Response, typename Handle>
  grpc::ServerUnaryReactor* ServeWire(grpc::CallbackServerContext* context, Method method,
                                      const grpc::ByteBuffer& wire_request,
                                      grpc::ByteBuffer* wire_response,
                                      grpc::ByteBuffer (*write)(Response&), Handle handle) const;

  RequestHandlers handlers_;
  const CallRunner& runner_;
  // GraphEncode works in place too, so it owns its messages (owned_messages.h).
  OwnedMessages<v1::GraphRequest, v1::GraphResponse> graph_messages_;
};

}  // namespace posenc
