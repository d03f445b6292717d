// posenc.v1.PositionalEncoding on gRPC's callback API. Handlers stay thin: they time the
// call, refuse new work while shutting down, and hand messages to RequestHandlers.
// Thread-safe; owns nothing but its handlers.
#pragma once

#include <atomic>

#include "posenc/v1/posenc.grpc.pb.h"
#include "server/service/request_handlers.h"

namespace posenc {

class PositionalEncodingService final : public v1::PositionalEncoding::CallbackService {
 public:
  explicit PositionalEncodingService(const ServiceState& state) : handlers_(state) {}

  // After this, new calls get UNAVAILABLE; calls already running finish.
  void RefuseNewCalls() { refusing_.store(true); }

  // Requests an EncodeStream keeps read ahead of its writes; a client that does not read
  // makes the server stop reading, so memory per stream stays bounded.
  static constexpr size_t kStreamWindow = 2;

  grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* context,
                                   const v1::EncodeRequest* request,
                                   v1::EncodeResponse* response) override;
  grpc::ServerBidiReactor<v1::EncodeRequest, v1::EncodeResponse>* EncodeStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* AttentionBias(grpc::CallbackServerContext* context,
                                          const v1::BiasRequest* request,
                                          v1::BiasResponse* response) override;
  grpc::ServerWriteReactor<v1::TableChunk>* GetTable(grpc::CallbackServerContext* context,
                                                     const v1::TableRequest* request) override;
  grpc::ServerUnaryReactor* ListSchemes(grpc::CallbackServerContext* context,
                                        const v1::ListSchemesRequest* request,
                                        v1::ListSchemesResponse* response) override;
  grpc::ServerUnaryReactor* GraphEncode(grpc::CallbackServerContext* context,
                                        const v1::GraphRequest* request,
                                        v1::GraphResponse* response) override;
  // Shared memory: placeholders until the registry (server/shm) is wired in; they answer
  // FAILED_PRECONDITION.
  grpc::ServerUnaryReactor* RegisterSharedMemory(
      grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest* request,
      v1::RegisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(
      grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
      v1::UnregisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* SharedMemoryStatus(
      grpc::CallbackServerContext* context, const v1::SharedMemoryStatusRequest* request,
      v1::SharedMemoryStatusResponse* response) override;

  const RequestHandlers& handlers() const { return handlers_; }
  bool refusing() const { return refusing_.load(); }

 private:
  // Times and counts one unary call, refuses it while shutting down, else runs
  // handle(SchemeLabel*) -> grpc::Status.
  template <typename Handle>
  grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* context, Method method,
                                       Handle handle);

  RequestHandlers handlers_;
  std::atomic<bool> refusing_{false};
};

}  // namespace posenc
