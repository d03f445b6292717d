#include "server/service/call_tracker.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/server_context.h"
#include "server/common/client_text.h"
#include "server/service/channelz.h"

namespace posenc {
namespace {

using grpc::experimental::InterceptionHookPoints;

// "/posenc.v1.PositionalEncoding/Encode" -> Method::kEncode,
// "/inference.GRPCInferenceService/ModelInfer" -> Method::kModelInfer; nullopt for other
// services and for their untracked rpcs (ServerLive, ServerReady, ModelReady and the shared
// memory ones are probes and set-up, like health).
std::optional<Method> TrackedMethod(const char* full_name) {
  static const std::vector<std::string>* const paths = [] {
    auto* p = new std::vector<std::string>();
    // The gRPC methods only; the HTTP ones (from kHttpInfer) have no rpc path.
    for (int m = 0; m < static_cast<int>(Method::kHttpInfer); ++m) {
      const char* service = m >= static_cast<int>(Method::kModelInfer)
                                ? "/inference.GRPCInferenceService/"
                                : "/posenc.v1.PositionalEncoding/";
      p->push_back(absl::StrCat(service, MethodName(static_cast<Method>(m))));
    }
    return p;
  }();
  if (full_name == nullptr) return std::nullopt;
  for (size_t m = 0; m < paths->size(); ++m) {
    if ((*paths)[m] == full_name) return static_cast<Method>(m);
  }
  return std::nullopt;
}

bool HasOwnRecord(Method method) {
  switch (method) {
    case Method::kEncode:
    case Method::kEncodeStream:
    case Method::kAttentionBias:
    case Method::kModelInfer:
    case Method::kModelStreamInfer: return true;
    default: return false;
  }
}

// A typed unary rpc's (or GetTable's) CallRecord, fed by gRPC's interceptor hooks.
class TrackingInterceptor final : public grpc::experimental::Interceptor {
 public:
  TrackingInterceptor(CallTracker* tracker, grpc::experimental::ServerRpcInfo* info, Method method)
      : context_(info->server_context()), record_(tracker, context_, method) {}

  ~TrackingInterceptor() override {
    if (unparsed_) record_.Count(unparsed_status_.error_code());  // no close was reported
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // gRPC answers a request without a valid message with a bare UNIMPLEMENTED before
      // any handler runs: a message that does not parse, or none at all because the client
      // gave up while uploading. The first deserves to know what was wrong; which of the
      // two it was is known when the call closes (POST_RECV_CLOSE below).
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          status.error_message().empty()) {
        unparsed_status_ = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        absl::StrCat("the request is not a valid message for ",
                                                     MethodName(record_.call()->method)));
        methods->ModifySendStatus(unparsed_status_);
        unparsed_ = true;
      } else {
        const grpc::Status sent = record_.Closing(status);
        if (sent.error_message().size() != status.error_message().size()) {
          methods->ModifySendStatus(sent);
        }
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_CLOSE) && unparsed_) {
      const grpc::Status status =
          context_->IsCancelled()
              ? grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the upload")
              : unparsed_status_;
      record_.Count(status.error_code());
      record_.Log(status);
      unparsed_ = false;
    }
    methods->Proceed();
  }

 private:
  const grpc::ServerContextBase* const context_;
  CallRecord record_;
  bool unparsed_ = false;         // the bare UNIMPLEMENTED: counted when the call closes
  grpc::Status unparsed_status_;  // what the client was sent for it
};

// Other services' calls (health, reflection) are not posenc's to count or wait for, but
// their streams are open too: the drain must not take them for uploads.
class PeerInterceptor final : public grpc::experimental::Interceptor {
 public:
  PeerInterceptor(CallTracker* tracker, grpc::experimental::ServerRpcInfo* info)
      : tracker_(tracker), context_(info->server_context()) {
    tracker_->ArriveOther(context_);
  }
  ~PeerInterceptor() override { tracker_->EndOther(context_); }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_message().size() > kMaxStatusMessageBytes) {  // a region's name
        methods->ModifySendStatus(
            grpc::Status(status.error_code(), Elide(status.error_message(), kMaxStatusMessageBytes),
                         status.error_details()));
      }
    }
    methods->Proceed();
  }

 private:
  CallTracker* const tracker_;
  const grpc::ServerContextBase* const context_;
};

class TrackingFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit TrackingFactory(CallTracker* tracker) : tracker_(tracker) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const std::optional<Method> method = TrackedMethod(info->method());
    if (!method) return new PeerInterceptor(tracker_, info);
    // The rpcs on gRPC's raw path keep their own CallRecord (a bidirectional stream's
    // reactor, WireUnaryCall): no hooks on their batches. They parse their requests
    // themselves, so there is no bare UNIMPLEMENTED to rewrite.
    if (HasOwnRecord(*method)) return nullptr;
    return new TrackingInterceptor(tracker_, info, *method);
  }

 private:
  CallTracker* const tracker_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CallTracker::NewInterceptorFactory() {
  return std::make_unique<TrackingFactory>(this);
}

CallRecord::CallRecord(CallTracker* tracker, const grpc::ServerContextBase* context, Method method)
    : tracker_(tracker), context_(context), call_(tracker->Arrive(context, method)) {
  if (ServiceMetrics* m = tracker_->metrics()) m->InflightAdd(1);
}

CallRecord::~CallRecord() {
  Count(grpc::StatusCode::CANCELLED);  // when it ended without a status
  tracker_->End(context_);
}

grpc::Status CallRecord::Closing(grpc::Status status) {
  if (status.error_message().size() > kMaxStatusMessageBytes) {
    status =
        grpc::Status(status.error_code(), Elide(status.error_message(), kMaxStatusMessageBytes),
                     status.error_details());
  }
  call_->closing.store(true);
  Count(status.error_code());
  Log(status);
  return status;
}

void CallRecord::Count(grpc::StatusCode code) {
  if (counted_) return;
  counted_ = true;
  ServiceMetrics* metrics = tracker_->metrics();
  if (metrics == nullptr) return;
  metrics->InflightAdd(-1);
  if (call_->counted.load()) return;
  metrics->RecordRequest(call_->method, call_->scheme.load(), static_cast<int>(code), Seconds());
}

void CallRecord::Log(const grpc::Status& status) const {
  tracker_->LogEnd(*call_, status, Seconds());
}

double CallRecord::Seconds() const {
  return std::chrono::duration<double>(CallTracker::Clock::now() - call_->arrival).count();
}

std::shared_ptr<TrackedCall> CallTracker::Arrive(const grpc::ServerContextBase* context,
                                                 Method method) {
  auto call = std::make_shared<TrackedCall>();
  call->method = method;
  call->arrival = Clock::now();
  call->peer = context->peer();
  std::lock_guard<std::mutex> lock(mu_);
  if (draining()) {
    auto it = uploading_at_drain_.find(call->peer);
    call->late = it == uploading_at_drain_.end() || it->second == 0;
    if (!call->late) --it->second;
  }
  calls_[context] = call;
  ++arrivals_;
  return call;
}

void CallTracker::LogEnd(const TrackedCall& call, const grpc::Status& status, double seconds) {
  const bool failed = !status.ok();
  if (!failed && !log_requests_) return;
  int64_t suppressed = 0;
  if (failed && !log_requests_ && !failed_calls_log_.Allow(&suppressed)) return;
  static const char* const kCodes[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int code = static_cast<int>(status.error_code());
  Log(failed ? LogLevel::kWarning : LogLevel::kInfo, failed ? "call_failed" : "call",
      {{"method", MethodName(call.method)},
       {"scheme", LabelName(call.scheme.load())},
       {"code", code >= 0 && code < 17 ? kCodes[code] : std::to_string(code)},
       {"duration_ms", seconds * 1e3},
       {"request_id", call.request_id},
       {"peer", call.peer},
       {"message", status.error_message()},
       {"suppressed_before", suppressed}});
}

void CallTracker::ArriveOther(const grpc::ServerContextBase* context) {
  std::string peer = context->peer();
  std::lock_guard<std::mutex> lock(mu_);
  others_[context] = std::move(peer);
  ++arrivals_;
}

int64_t CallTracker::arrivals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return arrivals_;
}

int64_t CallTracker::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(calls_.size() + others_.size());
}

void CallTracker::EndOther(const grpc::ServerContextBase* context) {
  std::lock_guard<std::mutex> lock(mu_);
  others_.erase(context);
}

void CallTracker::SubtractTrackedLocked(std::map<std::string, int64_t>& open) const {
  // Streams the service already sees, and other services' (a health Watch), are not uploads.
  // A call whose status is already on its way may have closed its stream in the transport
  // before its record ends; counting it here would take one real upload's place, and that
  // upload would be refused when it lands. Left in, at worst an upload too many is waited
  // for, until WaitIdle sees the connection has no stream left beyond the tracked calls.
  auto not_an_upload = [&](const std::string& peer) {
    if (auto it = open.find(peer); it != open.end() && it->second > 0) --it->second;
  };
  for (const auto& [context, call] : calls_) {
    if (!call->closing.load()) not_an_upload(call->peer);
  }
  for (const auto& [context, peer] : others_) not_an_upload(peer);
}

std::map<std::string, int64_t> CallTracker::UploadsByPeer(
    std::map<std::string, int64_t> open) const {
  std::lock_guard<std::mutex> lock(mu_);
  SubtractTrackedLocked(open);
  return open;
}

int64_t CallTracker::StartDrain() {
  std::map<std::string, int64_t> open = OpenStreamsByPeer();
  std::lock_guard<std::mutex> lock(mu_);
  SubtractTrackedLocked(open);
  int64_t uploads = 0;
  for (const auto& [peer, streams] : open) uploads += streams;
  uploading_at_drain_ = std::move(open);
  draining_.store(true);
  return uploads;
}

void CallTracker::End(const grpc::ServerContextBase* context) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(context);
  if (calls_.empty()) idle_.notify_all();
}

std::shared_ptr<TrackedCall> CallTracker::Find(const grpc::ServerContextBase* context) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(context);
  return it == calls_.end() ? nullptr : it->second;
}

bool CallTracker::UploadsPendingLocked() {
  bool pending = false;
  for (const auto& [peer, expected] : uploading_at_drain_) pending |= expected > 0;
  return pending;
}

void CallTracker::ForgetAbandonedUploadsLocked(const std::map<std::string, int64_t>& open) {
  // A peer's streams beyond the calls tracked for it are its uploads; when it has none left
  // the client gave them up (or they were probes that ended): stop waiting for that peer.
  // (Fewer than expected is no proof: channelz's counters and the tracker are read at
  // different moments.)
  std::map<std::string, int64_t> tracked;
  for (const auto& [context, call] : calls_) ++tracked[call->peer];
  for (const auto& [context, peer] : others_) ++tracked[peer];
  for (auto& [peer, expected] : uploading_at_drain_) {
    if (expected <= 0) continue;
    auto it = open.find(peer);
    const int64_t uploading = (it == open.end() ? 0 : it->second) - tracked[peer];
    if (uploading <= 0) expected = 0;
  }
}

bool CallTracker::WaitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Idle means no call in progress and none of the uploads accepted at StartDrain still
    // to land: shutting the transport down earlier would cancel them as they arrive.
    if (calls_.empty() && !UploadsPendingLocked()) return true;
    if (Clock::now() >= deadline) return false;
    // Uploads are invisible until they land (no notification); look again every 20 ms.
    idle_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
    if (calls_.empty() && UploadsPendingLocked()) {
      lock.unlock();
      const std::map<std::string, int64_t> open = OpenStreamsByPeer();
      lock.lock();
      ForgetAbandonedUploadsLocked(open);
    }
  }
}

size_t CallTracker::inflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_.size();
}

}  // namespace posenc
