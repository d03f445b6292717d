#include "server/service/grpc_service.h"

#include <chrono>
#include <memory>
#include <mutex>

#include "server/service/ordered_stream.h"
#include "server/service/proto_convert.h"

namespace posenc {
namespace {

using Clock = std::chrono::steady_clock;

// Counts one call (or one stream message) in the metrics: in flight while alive, then its
// status and duration.
// A message of a stream passes count_inflight = false: the stream itself is the call in
// flight. Done() leaves the in-flight gauge before the status is sent, so a client that
// has its answer never sees its own call still counted.
class CallRecord {
 public:
  CallRecord(ServiceMetrics* metrics, Method method, bool count_inflight = true)
      : metrics_(metrics), method_(method), start_(Clock::now()),
        inflight_(metrics != nullptr && count_inflight) {
    if (inflight_) metrics_->InflightAdd(1);
  }
  ~CallRecord() { LeaveInflight(); }
  void LeaveInflight() {
    if (inflight_) metrics_->InflightAdd(-1);
    inflight_ = false;
  }
  void Done(SchemeLabel scheme, grpc::StatusCode code) {
    LeaveInflight();
    if (metrics_) {
      metrics_->RecordRequest(method_, scheme, static_cast<int>(code),
                              std::chrono::duration<double>(Clock::now() - start_).count());
    }
  }

 private:
  ServiceMetrics* metrics_;
  Method method_;
  Clock::time_point start_;
  bool inflight_;
};

const grpc::Status kShuttingDown(grpc::StatusCode::UNAVAILABLE,
                                 "server is shutting down; retry on another replica");

// GetTable: computes each chunk only when the previous one has been written, so a table
// of any length streams in bounded memory.
class TableReactor final : public grpc::ServerWriteReactor<v1::TableChunk> {
 public:
  TableReactor(const PositionalEncodingService* service, ServiceMetrics* metrics,
               const v1::TableRequest* request)
      : service_(service), request_(request), call_(metrics, Method::kGetTable) {
    if (service_->refusing()) {
      FinishWith(kShuttingDown);
      return;
    }
    auto rows = service_->handlers().PlanTable(*request_, &scheme_);
    if (!rows.ok()) {
      FinishWith(ToGrpcStatus(rows.status()));
      return;
    }
    rows_per_chunk_ = *rows;
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      FinishWith(grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading"));
      return;
    }
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (next_ >= request_->length()) {
      FinishWith(grpc::Status::OK);
      return;
    }
    const int64_t n = std::min(rows_per_chunk_, request_->length() - next_);
    chunk_.Clear();
    auto status = service_->handlers().TableChunk(*request_, next_, n, chunk_);
    if (!status.ok()) {
      FinishWith(ToGrpcStatus(status));
      return;
    }
    next_ += n;
    StartWrite(&chunk_);
  }

  void FinishWith(const grpc::Status& status) {
    call_.Done(scheme_, status.error_code());
    Finish(status);
  }

  const PositionalEncodingService* service_;
  const v1::TableRequest* request_;
  CallRecord call_;
  SchemeLabel scheme_ = SchemeLabel::kNone;
  int64_t rows_per_chunk_ = 1;
  int64_t next_ = 0;
  v1::TableChunk chunk_;
};

}  // namespace

template <typename Handle>
grpc::ServerUnaryReactor* PositionalEncodingService::ServeUnary(
    grpc::CallbackServerContext* context, Method method, Handle handle) {
  auto* reactor = context->DefaultReactor();
  CallRecord call(handlers_.state().metrics, method);
  SchemeLabel scheme = SchemeLabel::kNone;
  const grpc::Status status = refusing() ? kShuttingDown : handle(&scheme);
  call.Done(scheme, status.error_code());
  reactor->Finish(status);
  return reactor;
}

// The request messages are ours until Finish: the handlers work in place on their tensor
// bytes and move them into the responses, hence the const_casts.
grpc::ServerUnaryReactor* PositionalEncodingService::Encode(grpc::CallbackServerContext* context,
                                                            const v1::EncodeRequest* request,
                                                            v1::EncodeResponse* response) {
  return ServeUnary(context, Method::kEncode, [&](SchemeLabel* scheme) {
    return ToGrpcStatus(
        handlers_.Encode(*const_cast<v1::EncodeRequest*>(request), *response, scheme),
        request->request_id());
  });
}

// Each message is counted with its scheme; the stream itself only when it ends in an error
// no message carried (refused, or broken by the client).
grpc::ServerBidiReactor<v1::EncodeRequest, v1::EncodeResponse>*
PositionalEncodingService::EncodeStream(grpc::CallbackServerContext* context) {
  ServiceMetrics* metrics = handlers_.state().metrics;
  auto call = std::make_shared<CallRecord>(metrics, Method::kEncodeStream);
  auto handle = [this, metrics](v1::EncodeRequest& request, v1::EncodeResponse& response) {
    CallRecord message(metrics, Method::kEncodeStream, /*count_inflight=*/false);
    SchemeLabel scheme = SchemeLabel::kNone;
    grpc::Status status =
        ToGrpcStatus(handlers_.Encode(request, response, &scheme), request.request_id());
    message.Done(scheme, status.error_code());
    return status;
  };
  auto on_finish = [call](const grpc::Status& status, bool from_handler) {
    if (!status.ok() && !from_handler) {
      call->Done(SchemeLabel::kNone, status.error_code());
    } else {
      call->LeaveInflight();
    }
  };
  return new OrderedStreamReactor<v1::EncodeRequest, v1::EncodeResponse>(
      kStreamWindow, handle, on_finish, refusing() ? kShuttingDown : grpc::Status::OK);
}

grpc::ServerUnaryReactor* PositionalEncodingService::AttentionBias(
    grpc::CallbackServerContext* context, const v1::BiasRequest* request,
    v1::BiasResponse* response) {
  return ServeUnary(context, Method::kAttentionBias, [&](SchemeLabel* scheme) {
    return ToGrpcStatus(
        handlers_.AttentionBias(*const_cast<v1::BiasRequest*>(request), *response, scheme),
        request->request_id());
  });
}

grpc::ServerWriteReactor<v1::TableChunk>* PositionalEncodingService::GetTable(
    grpc::CallbackServerContext* context, const v1::TableRequest* request) {
  return new TableReactor(this, handlers_.state().metrics, request);
}

grpc::ServerUnaryReactor* PositionalEncodingService::ListSchemes(
    grpc::CallbackServerContext* context, const v1::ListSchemesRequest* request,
    v1::ListSchemesResponse* response) {
  return ServeUnary(context, Method::kListSchemes, [&](SchemeLabel*) {
    handlers_.ListSchemes(*response);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* PositionalEncodingService::GraphEncode(
    grpc::CallbackServerContext* context, const v1::GraphRequest* request,
    v1::GraphResponse* response) {
  return ServeUnary(context, Method::kGraphEncode, [&](SchemeLabel* scheme) {
    *scheme = SchemeLabel::kGraphLaplacian;
    return ToGrpcStatus(handlers_.GraphEncode(*const_cast<v1::GraphRequest*>(request), *response),
                        request->request_id());
  });
}

namespace {
grpc::ServerUnaryReactor* FinishShmOff(grpc::CallbackServerContext* context) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                               "shared memory is off; start posenc-server with --shm"));
  return reactor;
}
}  // namespace

grpc::ServerUnaryReactor* PositionalEncodingService::RegisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest*,
    v1::RegisterSharedMemoryResponse*) {
  return FinishShmOff(context);
}

grpc::ServerUnaryReactor* PositionalEncodingService::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest*,
    v1::UnregisterSharedMemoryResponse*) {
  return FinishShmOff(context);
}

grpc::ServerUnaryReactor* PositionalEncodingService::SharedMemoryStatus(
    grpc::CallbackServerContext* context, const v1::SharedMemoryStatusRequest*,
    v1::SharedMemoryStatusResponse*) {
  return FinishShmOff(context);
}

}  // namespace posenc
