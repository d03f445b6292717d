#include "server/service/health_service.h"

#include <utility>

namespace posenc {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One open Watch: writes the current status, then each change; at most one write is in
// flight, and a change during a write is sent after it (only the latest value matters).
class HealthService::WatchReactor final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  WatchReactor(HealthService* owner, std::string service)
      : owner_(owner), service_(std::move(service)) {}

  // REQUIRES: owner_->mu_ held.
  // Nothing once finished: the reactor may still be registered until OnDone, and a write
  // after Finish is not allowed.
  void NotifyLocked(ServingStatus status, bool last) {
    if (finished_) return;
    pending_ = status;
    has_pending_ = true;
    last_ = last_ || last;
    if (!writing_) WriteLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status::OK);
    } else if (has_pending_) {
      WriteLocked();
    } else if (last_) {
      FinishLocked(grpc::Status::OK);
    }
  }

  void OnCancel() override {
    std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
    if (!writing_) FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    owner_->Forget(this);
    delete this;
  }

 private:
  void WriteLocked() {
    has_pending_ = false;
    writing_ = true;
    response_.set_status(pending_);
    StartWrite(&response_);
  }
  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService* const owner_;
  const std::string service_;
  HealthCheckResponse response_;
  ServingStatus pending_ = HealthCheckResponse::UNKNOWN;
  bool has_pending_ = false;
  bool writing_ = false;
  bool last_ = false;
  bool finished_ = false;

  friend class HealthService;
};

HealthService::HealthService() {
  statuses_[""] = HealthCheckResponse::SERVING;
  statuses_[kLivenessService] = HealthCheckResponse::SERVING;
}

HealthService::~HealthService() = default;

HealthService::ServingStatus HealthService::StatusLocked(const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::Set(const std::string& service, bool serving) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (shut_down_) return;
  const ServingStatus status =
      serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  if (auto it = statuses_.find(service); it != statuses_.end() && it->second == status) return;
  statuses_[service] = status;
  const std::set<WatchReactor*> watches = watches_;  // a Finish may erase from watches_
  for (WatchReactor* w : watches) {
    if (w->service_ == service) w->NotifyLocked(status, /*last=*/false);
  }
}

void HealthService::Shutdown() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  shut_down_ = true;
  // Readiness goes; "liveness" stays SERVING while the accepted calls finish.
  for (auto& [name, status] : statuses_) {
    if (name != kLivenessService) status = HealthCheckResponse::NOT_SERVING;
  }
  const std::set<WatchReactor*> watches = watches_;  // a Finish may erase from watches_
  for (WatchReactor* w : watches) w->NotifyLocked(StatusLocked(w->service_), /*last=*/true);
}

void HealthService::Forget(WatchReactor* watch) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  watches_.erase(watch);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  auto* reactor = context->DefaultReactor();
  ServingStatus status;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    status = StatusLocked(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown health service name"));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  auto* watch = new WatchReactor(this, request->service());
  std::lock_guard<std::recursive_mutex> lock(mu_);
  watches_.insert(watch);
  watch->NotifyLocked(StatusLocked(request->service()), /*last=*/shut_down_);
  return watch;
}

}  // namespace posenc
