#include "server/service/grpc_service.h"

#include <chrono>
#include <memory>
#include <utility>

#include "server/service/ordered_stream.h"
#include "server/service/proto_convert.h"
#include "server/service/wire_format.h"

namespace posenc {
namespace {

// GetTable: each chunk is computed on the pool only when the previous one has been written,
// so a table of any length streams in bounded memory, and a client that goes away stops it.
// On gRPC's raw path: the request is parsed here, and each chunk's rows are handed to gRPC
// without a copy (WriteTableChunk).
class TableReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  TableReactor(const PositionalEncodingService* service, grpc::CallbackServerContext* context,
               const grpc::ByteBuffer& wire_request)
      : service_(service), context_(context),
        call_(CallOf(service->runtime(), context, kNoScheme)) {
    if (!ParseWireRequest(wire_request, request_)) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the request is not a valid message for GetTable"));
      return;
    }
    call_->scheme.store(LabelOf(request_));
    if (call_->late) {
      Finish(kShuttingDown);
      return;
    }
    SchemeLabel scheme = kNoScheme;
    absl::StatusOr<int64_t> rows = service_->handlers().PlanTable(request_, &scheme);
    absl::StatusOr<CallCost> cost = rows.ok() ? CostOf(request_, *rows) : rows.status();
    CallOutcome admitted;
    if (!service_->runner().Admit(cost, CallRunner::Slot::kCall, /*request_id=*/"", admitted)) {
      Finish(admitted.status);
      return;
    }
    call_->ticket = std::move(admitted.ticket);
    rows_per_chunk_ = *rows;
    lane_ = cost->lane;
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading"));
      return;
    }
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (next_ >= request_.length()) {
      Finish(grpc::Status::OK);
      return;
    }
    service_->runtime().pool->Submit(lane_, [this] {
      if (grpc::Status stopped = StoppedStatus(context_); !stopped.ok()) {
        Finish(stopped);
        return;
      }
      const int64_t n = std::min(rows_per_chunk_, request_.length() - next_);
      chunk_.Clear();
      absl::Status status = service_->handlers().TableChunk(request_, next_, n, chunk_);
      if (!status.ok()) {
        Finish(ToGrpcStatus(status));
        return;
      }
      next_ += n;
      wire_chunk_ = WriteTableChunk(chunk_);
      StartWrite(&wire_chunk_);
    });
  }

  const PositionalEncodingService* service_;
  grpc::CallbackServerContext* const context_;
  v1::TableRequest request_;
  const std::shared_ptr<TrackedCall> call_;
  int64_t rows_per_chunk_ = 1;
  int64_t next_ = 0;
  Lane lane_ = Lane::kCheap;
  v1::TableChunk chunk_;
  grpc::ByteBuffer wire_chunk_;  // chunk_ on the wire, until its write is done
};

}  // namespace

// A unary tensor rpc on gRPC's raw path: the request parsed into the call's own messages,
// handle(Request&, Response&, const ShmOwner&) -> absl::Status run through the CallRunner
// (it works in place on the request's tensor bytes and moves them into the response), and
// the answer written by `write` with its tensor handed to gRPC without a copy.
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* PositionalEncodingService::ServeWire(
    grpc::CallbackServerContext* context, Method method, const grpc::ByteBuffer& wire_request,
    grpc::ByteBuffer* wire_response, grpc::ByteBuffer (*write)(Response&), Handle handle) const {
  auto* call = new WireUnaryCall<Request, Response>(context, runtime().tracker, method,
                                                    wire_response, write);
  if (!call->Parse(wire_request)) return call;
  Request* request = call->request();
  Response* response = call->response();
  runner_.ServeUnaryWith(
      context, LabelOf(*request), request->request_id(), CostOf(*request), response,
      [context, request, response, handle = std::move(handle)](const CancelCheck&) {
        return ToGrpcStatus(handle(*request, *response, SharedMemoryOwner(context)),
                            request->request_id());
      },
      [call](grpc::Status status) { call->Reply(std::move(status)); });
  return call;
}

grpc::ServerUnaryReactor* PositionalEncodingService::Encode(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* wire_request,
                                                            grpc::ByteBuffer* wire_response) {
  return ServeWire<v1::EncodeRequest, v1::EncodeResponse>(
      context, Method::kEncode, *wire_request, wire_response, &WriteEncodeResponse,
      [this](v1::EncodeRequest& request, v1::EncodeResponse& response, const ShmOwner& owner) {
        SchemeLabel scheme;
        return handlers_.Encode(request, response, &scheme, owner);
      });
}

// Each message's cost is computed once; the message is admitted, run (inline or on the
// pool, as its cost says) and counted with its scheme by the CallRunner. A message that
// fails is answered with EncodeResponse.error and the stream goes on (as ModelStreamInfer
// does). The stream itself is counted (by the CallTracker) only when it ends in an error
// no message carried.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
PositionalEncodingService::EncodeStream(grpc::CallbackServerContext* context) {
  using Reactor = OrderedStreamReactor<v1::EncodeRequest, v1::EncodeResponse, kRawWire>;
  CallRunner::OpenedStream stream = runner_.OpenStream(context, Method::kEncodeStream);
  auto handle = [this, owner = SharedMemoryOwner(context)](v1::EncodeRequest& request,
                                                           v1::EncodeResponse& response,
                                                           Reactor::Reply reply) {
    const auto start = std::chrono::steady_clock::now();
    runner_.RunMessage(
        Method::kEncodeStream, LabelOf(request), start, request.request_id(), CostOf(request),
        response,
        [this, &request, &response, &owner](const CancelCheck&) {
          SchemeLabel scheme;
          return ToGrpcStatus(handlers_.Encode(request, response, &scheme, owner),
                              request.request_id());
        },
        [&request, &response, reply = std::move(reply)](CallOutcome outcome) mutable {
          if (!outcome.status.ok()) {  // answered, and the stream goes on
            response.Clear();
            response.set_request_id(request.request_id());
            response.mutable_error()->set_code(outcome.status.error_code());
            response.mutable_error()->set_message(outcome.status.error_message());
          }
          std::move(reply)(grpc::Status::OK, std::move(outcome.ticket));
        });
  };
  return new Reactor({&WriteEncodeResponse, MethodName(Method::kEncodeStream)}, kStreamWindow,
                     handle, std::move(stream.on_finish), stream.refusal);
}

grpc::ServerUnaryReactor* PositionalEncodingService::AttentionBias(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* wire_request,
    grpc::ByteBuffer* wire_response) {
  return ServeWire<v1::BiasRequest, v1::BiasResponse>(
      context, Method::kAttentionBias, *wire_request, wire_response, &WriteBiasResponse,
      [this](v1::BiasRequest& request, v1::BiasResponse& response, const ShmOwner& owner) {
        SchemeLabel scheme;
        return handlers_.AttentionBias(request, response, &scheme, owner);
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* PositionalEncodingService::GetTable(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* wire_request) {
  return new TableReactor(this, context, *wire_request);
}

// Answered on gRPC's thread: it touches no tensor and allocates next to nothing.
grpc::ServerUnaryReactor* PositionalEncodingService::ListSchemes(
    grpc::CallbackServerContext* context, const v1::ListSchemesRequest* request,
    v1::ListSchemesResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (CallOf(runtime(), context, kNoScheme)->late) {
    reactor->Finish(kShuttingDown);
    return reactor;
  }
  handlers_.ListSchemes(*response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PositionalEncodingService::GraphEncode(
    grpc::CallbackServerContext* context, const v1::GraphRequest*, v1::GraphResponse* response) {
  v1::GraphRequest* request = decltype(graph_messages_)::RequestOf(context);
  return runner_.ServeUnary(context, LabelOf(*request), request->request_id(), CostOf(*request),
                            response, [this, request, response](const CancelCheck& cancelled) {
                              return ToGrpcStatus(handlers_.GraphEncode(*request, *response,
                                                                        cancelled),
                                                  request->request_id());
                            });
}

// Region bookkeeping is answered on gRPC's thread: an mmap or a map lookup, no tensor work.
template <typename Answer>
grpc::ServerUnaryReactor* ServeInline(const ServiceRuntime& runtime,
                                      grpc::CallbackServerContext* context, Answer answer) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(CallOf(runtime, context, kNoScheme)->late ? kShuttingDown
                                                            : ToGrpcStatus(answer()));
  return reactor;
}

grpc::ServerUnaryReactor* PositionalEncodingService::RegisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest* request,
    v1::RegisterSharedMemoryResponse*) {
  return ServeInline(runtime(), context, [&] {
    return runtime().shm->Register(request->name(), request->key(), request->offset(),
                                   request->byte_size(), SharedMemoryOwner(context).name());
  });
}

grpc::ServerUnaryReactor* PositionalEncodingService::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
    v1::UnregisterSharedMemoryResponse*) {
  return ServeInline(runtime(), context, [&] {
    return runtime().shm->Unregister(request->name(), SharedMemoryOwner(context).name());
  });
}

grpc::ServerUnaryReactor* PositionalEncodingService::SharedMemoryStatus(
    grpc::CallbackServerContext* context, const v1::SharedMemoryStatusRequest* request,
    v1::SharedMemoryStatusResponse* response) {
  return ServeInline(runtime(), context, [&]() -> absl::Status {
    absl::StatusOr<std::vector<ShmRegionStatus>> regions =
        runtime().shm->Status(request->name(), SharedMemoryOwner(context).name());
    if (!regions.ok()) return regions.status();
    for (const ShmRegionStatus& r : *regions) {
      v1::SharedMemoryRegion* out = response->add_regions();
      out->set_name(r.name);
      out->set_offset(r.offset);
      out->set_byte_size(r.byte_size);
      out->set_in_use(r.in_use);
    }
    return absl::OkStatus();
  });
}

}  // namespace posenc
