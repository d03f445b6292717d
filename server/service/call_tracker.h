// Every posenc call from its arrival to its end: the typed unary rpcs (and GetTable)
// through a gRPC server interceptor, the rpcs on gRPC's raw path (Encode, AttentionBias,
// ModelInfer: WireUnaryCall; the two bidirectional streams: their reactor) through a
// CallRecord of their own, since an interceptor costs every completed batch of a call an
// extra round trip through gRPC's core. gRPC starts a unary call once its request has
// arrived; a stream, once its headers have. It is the one place that:
//   - counts calls in flight (posenc_inflight_requests) and every call's final code in
//     posenc_requests_total, including typed calls no handler saw (an unparseable message,
//     which it answers INVALID_ARGUMENT instead of gRPC's bare UNIMPLEMENTED; the raw
//     path parses and answers its own);
//   - tells a handler whether its call arrived after the drain began (refused) or before
//     (accepted: it runs to completion, even if it was still uploading at SIGTERM);
//   - lets the drain wait until every accepted call has ended.
// Health and reflection calls are not tracked. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grpcpp/support/server_interceptor.h"
#include "server/common/log.h"
#include "server/metrics/metrics.h"
#include "server/schemes/scheme_registry.h"
#include "server/service/admission.h"

namespace posenc {

struct TrackedCall {
  using Clock = std::chrono::steady_clock;
  Method method = Method::kEncode;
  Clock::time_point arrival;
  std::string peer;
  std::string request_id;  // set by the handler when the request carries one
  bool late = false;       // arrived after StartDrain and was not uploading then: UNAVAILABLE
  // Set by the handler once it knows the scheme; labels the call's final count.
  std::atomic<SchemeLabel> scheme{kNoScheme};
  // Set by a stream whose messages were counted one by one: the end is not counted again.
  std::atomic<bool> counted{false};
  // Set once the call's final status is decided (CallRecord::Closing). From then on its
  // stream may close in the transport before the record ends: the drain does not count
  // such a call against its connection's open streams (StartDrain).
  std::atomic<bool> closing{false};
  // The call's admission, held until the call has fully ended (its response serialized and
  // sent), since the cost it was admitted for includes that.
  Admission::Ticket ticket;
};

class CallTracker;

// One tracked call's accounting, from its arrival (construction) to its end (destruction):
// posenc_inflight_requests, the call's final count in posenc_requests_total (unless a
// stream counted its messages one by one: TrackedCall::counted), its log line, and the
// tracker's record that the drain waits on. Used by one thread at a time.
class CallRecord {
 public:
  CallRecord(CallTracker* tracker, const grpc::ServerContextBase* context, Method method);
  // A call that ended without a status is counted CANCELLED.
  ~CallRecord();
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;

  const std::shared_ptr<TrackedCall>& call() const { return call_; }
  // The status about to be sent, as it is to be sent: its message cut to
  // kMaxStatusMessageBytes (messages repeat client strings, and a huge grpc-message header
  // would be refused by the client as oversized metadata, hiding the real code). Counted
  // and logged here, before it leaves, so a client that has its answer sees its call
  // counted and no longer in flight.
  grpc::Status Closing(grpc::Status status);
  // Counts the call's end with `code` (once; later calls do nothing).
  void Count(grpc::StatusCode code);
  void Log(const grpc::Status& status) const;
  double Seconds() const;

 private:
  CallTracker* const tracker_;
  const grpc::ServerContextBase* const context_;
  const std::shared_ptr<TrackedCall> call_;
  bool counted_ = false;
};

class CallTracker {
 public:
  using Clock = TrackedCall::Clock;

  // `log_requests`: log every call with its duration, not only the failed ones.
  explicit CallTracker(ServiceMetrics* metrics, bool log_requests = false)
      : metrics_(metrics), log_requests_(log_requests) {}
  CallTracker(const CallTracker&) = delete;
  CallTracker& operator=(const CallTracker&) = delete;

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators. The tracker must
  // outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewInterceptorFactory();

  // The record of the call `context` serves; null when the call is not tracked.
  std::shared_ptr<TrackedCall> Find(const grpc::ServerContextBase* context) const;

  // Calls arriving from now on are marked late, except as many per client connection as
  // it had streams open (uploading) at this moment beyond the calls already tracked.
  // Returns how many uploads that accepts in all.
  int64_t StartDrain();
  // Of `open` (streams open per peer, OpenStreamsByPeer), those beyond the calls tracked for
  // the peer: uploads still arriving, which the service cannot see yet.
  std::map<std::string, int64_t> UploadsByPeer(std::map<std::string, int64_t> open) const;
  bool draining() const { return draining_.load(); }

  // Blocks until no tracked call is in progress and every upload StartDrain accepted has
  // landed (or its stream is gone), or until `deadline`. True when idle.
  bool WaitIdle(Clock::time_point deadline);
  size_t inflight() const;

  // Interceptor side.
  std::shared_ptr<TrackedCall> Arrive(const grpc::ServerContextBase* context, Method method);
  void End(const grpc::ServerContextBase* context);
  void ArriveOther(const grpc::ServerContextBase* context);
  // Calls of every service the interceptors have seen arrive, and those still running.
  int64_t arrivals() const;
  int64_t running() const;
  void EndOther(const grpc::ServerContextBase* context);
  ServiceMetrics* metrics() const { return metrics_; }
  // Logs a call's end: every failed call (at most 20 lines a second), and with log_requests
  // every call.
  void LogEnd(const TrackedCall& call, const grpc::Status& status, double seconds);

 private:
  bool UploadsPendingLocked();
  void SubtractTrackedLocked(std::map<std::string, int64_t>& open) const;
  void ForgetAbandonedUploadsLocked(const std::map<std::string, int64_t>& open);

  ServiceMetrics* const metrics_;
  const bool log_requests_;
  LogRateLimiter failed_calls_log_{20};
  std::atomic<bool> draining_{false};
  int64_t arrivals_ = 0;  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::unordered_map<const grpc::ServerContextBase*, std::shared_ptr<TrackedCall>> calls_;
  std::unordered_map<const grpc::ServerContextBase*, std::string> others_;  // peer of each
  // Per peer: calls still uploading when the drain began, which are accepted when they land.
  std::map<std::string, int64_t> uploading_at_drain_;
};

}  // namespace posenc
