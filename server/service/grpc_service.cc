#include "server/service/grpc_service.h"

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>

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

// EncodeStream: one response per request, in order. Reads run at most kStreamWindow
// responses ahead of the writes. All state changes happen under mu_, since a read and a
// write may complete on different threads at once. Metrics count each message with its
// scheme; the stream itself is counted only when it ends in an error no message carried
// (refused, or broken by the client).
class EncodeStreamReactor final
    : public grpc::ServerBidiReactor<v1::EncodeRequest, v1::EncodeResponse> {
 public:
  EncodeStreamReactor(const PositionalEncodingService* service, ServiceMetrics* metrics)
      : service_(service), metrics_(metrics), call_(metrics, Method::kEncodeStream) {
    if (service_->refusing()) {
      call_.Done(SchemeLabel::kNone, kShuttingDown.error_code());
      Finish(kShuttingDown);
      return;
    }
    reading_ = true;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    std::unique_ptr<v1::EncodeResponse> response;
    grpc::Status status;
    if (ok) {
      CallRecord message(metrics_, Method::kEncodeStream, /*count_inflight=*/false);
      response = std::make_unique<v1::EncodeResponse>();
      SchemeLabel scheme = SchemeLabel::kNone;
      // The handler works in place on request_'s bytes and moves them into the response.
      status = ToGrpcStatus(service_->handlers().Encode(request_, *response, &scheme),
                            request_.request_id());
      message.Done(scheme, status.error_code());
    }
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = false;
    if (!ok) {
      reads_done_ = true;
    } else if (!status.ok()) {
      final_status_ = status;  // stop reading; finish once the queued answers are out
      final_status_counted_ = true;
      reads_done_ = true;
    } else {
      queue_.push_back(std::move(response));
      if (!writing_) {
        writing_ = true;
        StartWrite(queue_.front().get());
      }
      MaybeReadLocked();
    }
    MaybeFinishLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    queue_.pop_front();
    if (!ok) {  // the client is gone: drop what is queued
      queue_.clear();
      broken_ = true;
      if (!reading_) reads_done_ = true;
      final_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
    } else if (!queue_.empty()) {
      writing_ = true;
      StartWrite(queue_.front().get());
    }
    MaybeReadLocked();
    MaybeFinishLocked();
  }

  void OnDone() override { delete this; }

 private:
  // REQUIRES: mu_ held.
  void MaybeReadLocked() {
    if (!reading_ && !reads_done_ && !broken_ && queue_.size() < PositionalEncodingService::kStreamWindow) {
      request_.Clear();
      reading_ = true;
      StartRead(&request_);
    }
  }
  // REQUIRES: mu_ held.
  void MaybeFinishLocked() {
    if (reads_done_ && !reading_ && !writing_ && queue_.empty() && !finished_) {
      finished_ = true;
      if (!final_status_.ok() && !final_status_counted_) {
        call_.Done(SchemeLabel::kNone, final_status_.error_code());
      } else {
        call_.LeaveInflight();
      }
      Finish(final_status_);
    }
  }

  const PositionalEncodingService* service_;
  ServiceMetrics* metrics_;
  CallRecord call_;  // keeps the stream counted in flight while it lives
  v1::EncodeRequest request_;
  std::mutex mu_;
  std::deque<std::unique_ptr<v1::EncodeResponse>> queue_;  // front is being written
  bool reading_ = false;
  bool writing_ = false;
  bool reads_done_ = false;
  bool broken_ = false;
  bool finished_ = false;
  bool final_status_counted_ = false;  // a message's error already counted it
  grpc::Status final_status_;
};

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

grpc::ServerUnaryReactor* PositionalEncodingService::Encode(grpc::CallbackServerContext* context,
                                                            const v1::EncodeRequest* request,
                                                            v1::EncodeResponse* response) {
  auto* reactor = context->DefaultReactor();
  CallRecord call(handlers_.state().metrics, Method::kEncode);
  if (refusing()) {
    call.Done(LabelOf(*request), kShuttingDown.error_code());
    reactor->Finish(kShuttingDown);
    return reactor;
  }
  // The request is ours until Finish; the kernels work in place on its tensor bytes.
  auto* mutable_request = const_cast<v1::EncodeRequest*>(request);
  SchemeLabel scheme = SchemeLabel::kNone;
  const grpc::Status status = ToGrpcStatus(
      handlers_.Encode(*mutable_request, *response, &scheme), request->request_id());
  call.Done(scheme, status.error_code());
  reactor->Finish(status);
  return reactor;
}

grpc::ServerBidiReactor<v1::EncodeRequest, v1::EncodeResponse>*
PositionalEncodingService::EncodeStream(grpc::CallbackServerContext* context) {
  return new EncodeStreamReactor(this, handlers_.state().metrics);
}

grpc::ServerUnaryReactor* PositionalEncodingService::AttentionBias(
    grpc::CallbackServerContext* context, const v1::BiasRequest* request,
    v1::BiasResponse* response) {
  auto* reactor = context->DefaultReactor();
  CallRecord call(handlers_.state().metrics, Method::kAttentionBias);
  if (refusing()) {
    call.Done(SchemeLabel::kNone, kShuttingDown.error_code());
    reactor->Finish(kShuttingDown);
    return reactor;
  }
  SchemeLabel scheme = SchemeLabel::kNone;
  const grpc::Status status =
      ToGrpcStatus(handlers_.AttentionBias(*const_cast<v1::BiasRequest*>(request), *response,
                                           &scheme),
                   request->request_id());
  call.Done(scheme, status.error_code());
  reactor->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<v1::TableChunk>* PositionalEncodingService::GetTable(
    grpc::CallbackServerContext* context, const v1::TableRequest* request) {
  return new TableReactor(this, handlers_.state().metrics, request);
}

grpc::ServerUnaryReactor* PositionalEncodingService::ListSchemes(
    grpc::CallbackServerContext* context, const v1::ListSchemesRequest* request,
    v1::ListSchemesResponse* response) {
  auto* reactor = context->DefaultReactor();
  CallRecord call(handlers_.state().metrics, Method::kListSchemes);
  if (refusing()) {
    call.Done(SchemeLabel::kNone, kShuttingDown.error_code());
    reactor->Finish(kShuttingDown);
    return reactor;
  }
  handlers_.ListSchemes(*response);
  call.Done(SchemeLabel::kNone, grpc::StatusCode::OK);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PositionalEncodingService::GraphEncode(
    grpc::CallbackServerContext* context, const v1::GraphRequest* request,
    v1::GraphResponse* response) {
  auto* reactor = context->DefaultReactor();
  CallRecord call(handlers_.state().metrics, Method::kGraphEncode);
  if (refusing()) {
    call.Done(SchemeLabel::kNone, kShuttingDown.error_code());
    reactor->Finish(kShuttingDown);
    return reactor;
  }
  const grpc::Status status = ToGrpcStatus(
      handlers_.GraphEncode(*const_cast<v1::GraphRequest*>(request), *response),
      request->request_id());
  call.Done(SchemeLabel::kGraphLaplacian, status.error_code());
  reactor->Finish(status);
  return reactor;
}

}  // namespace posenc
