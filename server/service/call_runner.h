// The one path every call of every front takes once its cost is known (CallRunner::Run):
// admit the cost (or refuse it at once, before anything is allocated for it), run the work
// where the cost says (CallCost::run_inline: a few microseconds, right there; any other on
// the WorkPool, so gRPC's and HTTP's threads never wait for a long call), stop it when the
// caller has gone, check the response fits --max_message_bytes, and hand back the outcome
// with the admission it holds. posenc.v1's and the Open Inference Protocol's unary rpcs
// (ServeUnary, which adds the drain's late check and finishes the call), their streams'
// messages (RunMessage, whose ticket the stream holds until the answer is written) and the
// HTTP front (InferenceService::Infer) all go through it. Also the small pieces streams
// share. Thread-safe; owns nothing.
//
//   return runner_.ServeUnary(context, scheme, request->request_id(), CostOf(*request), response,
//                             [=](const CancelCheck&) { return ...; });
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpc/support/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"
#include "server/common/cancel.h"
#include "server/common/client_text.h"
#include "server/metrics/metrics.h"
#include "server/service/admission.h"
#include "server/service/call_tracker.h"
#include "server/service/proto_convert.h"
#include "server/service/request_cost.h"
#include "server/service/work_pool.h"
#include "server/shm/peer_identity.h"
#include "server/shm/shared_memory_registry.h"

namespace posenc {

// What runs the calls; not owned, each outlives the services.
struct ServiceRuntime {
  WorkPool* pool = nullptr;
  Admission* admission = nullptr;
  CallTracker* tracker = nullptr;
  SharedMemoryRegistry* shm = nullptr;
};

inline const grpc::Status kShuttingDown(grpc::StatusCode::UNAVAILABLE,
                                        "server is shutting down; retry on another replica");

// Why the work for this call should not start (or go on): its deadline passed, the client
// cancelled, or the server stopped it; OK while it is wanted.
// Reads the deadline in gRPC's own clock (context->deadline() converts it to system_clock on
// every call); a call without a deadline reads no clock.
inline grpc::Status StoppedStatus(grpc::CallbackServerContext* context) {
  const gpr_timespec deadline = context->raw_deadline();
  if (deadline.tv_sec != INT64_MAX && gpr_time_cmp(gpr_now(deadline.clock_type), deadline) >= 0) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the call's deadline passed");
  }
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
  }
  return grpc::Status::OK;
}

inline CancelCheck CancelCheckOf(grpc::CallbackServerContext* context) {
  return [context] { return !StoppedStatus(context).ok(); };
}

// The message limit counts the response's framing too, not only its tensor bytes.
template <typename Response>
grpc::Status CheckResponseSize(Response& response, size_t max_message_bytes) {
  const size_t size = response.ByteSizeLong();
  if (size <= max_message_bytes) return grpc::Status::OK;
  response.Clear();
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("the response would be ", size,
                                   " bytes; --max_message_bytes allows ", max_message_bytes));
}

// The tracked record of a call; a call the tracker does not know (it always does, in a
// server) gets a record of its own so the callers have one shape.
inline std::shared_ptr<TrackedCall> CallOf(const ServiceRuntime& runtime,
                                           grpc::CallbackServerContext* context,
                                           SchemeLabel scheme) {
  std::shared_ptr<TrackedCall> call = runtime.tracker->Find(context);
  if (!call) call = std::make_shared<TrackedCall>();
  call->scheme.store(scheme);
  return call;
}

// Whose shared-memory regions a call may see and use: the client's connection, named by
// the server's own socket of it ("tcp:<inode>", ShmOwner in server/shm/peer_identity.h), so
// that a process binding the same source port later is a stranger; on a unix socket every
// client is "unix:", and the socket's file mode is the boundary. A region registered on one
// connection is invisible to every other, and is released when its connection closes.
inline ShmOwner SharedMemoryOwner(const grpc::ServerContextBase* context) {
  return ShmOwner::OfPeer(context->peer());
}

// What the path reports of one call or stream message.
struct CallOutcome {
  grpc::Status status;
  // The status is admission's refusal (RESOURCE_EXHAUSTED for a full budget, not a size
  // limit).
  bool refused = false;
  // ... and one that may succeed later (IsRetryableRefusal), which HTTP answers 429 with
  // Retry-After; a cost that can never fit is 413 without it.
  bool retryable = false;
  // The admission the work ran under, for its holder to keep until the response has been
  // written, since the cost it was admitted for includes the response.
  Admission::Ticket ticket;
};

// Counts one stream message in posenc_requests_total and its duration from `start`.
inline void RecordMessage(ServiceMetrics* metrics, Method method, SchemeLabel scheme,
                          const grpc::Status& status, std::chrono::steady_clock::time_point start) {
  if (metrics == nullptr) return;
  metrics->RecordRequest(
      method, scheme, static_cast<int>(status.error_code()),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

class CallRunner {
 public:
  // A call holds a --max_concurrent_calls slot of its own; a stream's message only its
  // bytes (its stream holds one slot for its whole life: OpenStream).
  enum class Slot { kCall, kStreamMessage };

  // REQUIRES: every runtime member is non-null. `max_message_bytes` is
  // ServerOptions::max_message_bytes; `metrics` (may be null) counts the streams' messages.
  CallRunner(const ServiceRuntime& runtime, size_t max_message_bytes, ServiceMetrics* metrics)
      : runtime_(runtime), max_message_bytes_(max_message_bytes), metrics_(metrics) {}
  CallRunner(const CallRunner&) = delete;
  CallRunner& operator=(const CallRunner&) = delete;

  // The path: a non-OK `cost` is the outcome at once (its message prefixed with
  // `request_id`, as a stream's errors are); else admits it with `slot` or refuses it at
  // once (refused). Admitted, runs work(const CancelCheck&) -> grpc::Status inline or on
  // the pool (cost->run_inline) unless stopped() -> grpc::Status already says why not (the
  // caller went away), checks `response` fits the message limit, and passes the outcome to
  // done(CallOutcome) on the thread that ran the work. Work cut short by the caller going
  // away reports stopped()'s status. `work` and `done` may be move-only; `response` must
  // outlive done.
  template <typename Response, typename Stopped, typename Work, typename Done>
  void Run(const absl::StatusOr<CallCost>& cost, Slot slot, const std::string& request_id,
           Stopped stopped, Response& response, Work work, Done done) const;

  // Run's first step alone, for an rpc whose work is not one piece (GetTable's chunks):
  // puts the admission of `cost` into outcome.ticket and returns true, or puts the cost's
  // error or admission's refusal (outcome.refused) into outcome.status.
  bool Admit(const absl::StatusOr<CallCost>& cost, Slot slot, const std::string& request_id,
             CallOutcome& outcome) const {
    if (!cost.ok()) {
      outcome.status = ToGrpcStatus(cost.status(), request_id);
      return false;
    }
    absl::StatusOr<Admission::Ticket> ticket = slot == Slot::kCall
                                                   ? runtime_.admission->Admit(cost->bytes)
                                                   : runtime_.admission->AdmitBytes(cost->bytes);
    if (!ticket.ok()) {  // refused before anything was allocated for it
      outcome.status = ToGrpcStatus(ticket.status(), request_id);
      outcome.refused = true;
      outcome.retryable = IsRetryableRefusal(ticket.status());
      return false;
    }
    outcome.ticket = std::move(*ticket);
    return true;
  }

  // A bidirectional stream, as its reactor is made (the stream's own rpc, `method`): its
  // CallRecord (the tracking an interceptor does for the unary rpcs) and its own late
  // check and admission: one --max_concurrent_calls slot for its whole life, kept in its
  // TrackedCall; each message then holds only its bytes (RunMessage).
  struct OpenedStream {
    std::shared_ptr<TrackedCall> call;
    // What a new stream is refused with: UNAVAILABLE while draining, RESOURCE_EXHAUSTED
    // when no slot is free; OK when it is open.
    grpc::Status refusal;
    // The reactor's OnFinish: counts the stream's end (unless its messages were counted
    // one by one: a clean end, or a handler's error that a message carried) and its final
    // status, which it cuts to size. Holds the CallRecord, so the record ends (for the drain)
    // when the reactor is deleted, once gRPC is done with the call.
    std::function<void(grpc::Status& status, bool from_handler)> on_finish;
  };
  OpenedStream OpenStream(grpc::CallbackServerContext* context, Method method) const {
    auto record = std::make_shared<CallRecord>(runtime_.tracker, context, method);
    OpenedStream opened{record->call(), grpc::Status::OK, nullptr};
    opened.on_finish = [record](grpc::Status& status, bool from_handler) {
      if (status.ok() || from_handler) record->call()->counted.store(true);
      status = record->Closing(std::move(status));
    };
    CallOutcome admitted;
    if (opened.call->late) {
      opened.refusal = kShuttingDown;
    } else if (Admit(CallCost{}, Slot::kCall, /*request_id=*/"", admitted)) {
      opened.call->ticket = std::move(admitted.ticket);
    } else {
      opened.refusal = admitted.status;
    }
    return opened;
  }

  // A unary rpc: the drain's late check, then Run (its own slot) with the call's deadline
  // and cancellation as stopped(); the admission is kept by the call's TrackedCall until
  // the call has ended, and the call finished with the outcome. `request_id` labels the
  // call's log line.
  template <typename Response, typename Handle>
  grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* context, SchemeLabel scheme,
                                       const std::string& request_id,
                                       const absl::StatusOr<CallCost>& cost, Response* response,
                                       Handle handle) const {
    auto* reactor = context->DefaultReactor();
    ServeUnaryWith(context, scheme, request_id, cost, response, std::move(handle),
                   [reactor](grpc::Status status) { reactor->Finish(std::move(status)); });
    return reactor;
  }
  // ServeUnary for a call with a reactor of its own (WireUnaryCall): the call is finished
  // by reply(grpc::Status), once.
  template <typename Response, typename Handle, typename Reply>
  void ServeUnaryWith(grpc::CallbackServerContext* context, SchemeLabel scheme,
                      const std::string& request_id, const absl::StatusOr<CallCost>& cost,
                      Response* response, Handle handle, Reply reply) const;

  // One message of a stream: Run with the message's bytes alone, and the message counted
  // under `method` and `scheme` from `start` before done(CallOutcome) gets it. A message is
  // not checked against its stream's deadline or cancellation (the stream itself ends on
  // them): work that polls, a graph solve, takes CancelCheckOf(context) itself.
  template <typename Response, typename Work, typename Done>
  void RunMessage(Method method, SchemeLabel scheme, std::chrono::steady_clock::time_point start,
                  const std::string& request_id, const absl::StatusOr<CallCost>& cost,
                  Response& response, Work work, Done done) const;

  const ServiceRuntime& runtime() const { return runtime_; }
  size_t max_message_bytes() const { return max_message_bytes_; }

 private:
  const ServiceRuntime runtime_;
  const size_t max_message_bytes_;
  ServiceMetrics* const metrics_;
};

template <typename Response, typename Stopped, typename Work, typename Done>
void CallRunner::Run(const absl::StatusOr<CallCost>& cost, Slot slot, const std::string& request_id,
                     Stopped stopped, Response& response, Work work, Done done) const {
  CallOutcome outcome;
  if (!Admit(cost, slot, request_id, outcome)) {
    std::move(done)(std::move(outcome));
    return;
  }
  auto run = [&response, max = max_message_bytes_, stopped = std::move(stopped),
              work = std::move(work), done = std::move(done),
              outcome = std::move(outcome)]() mutable {
    grpc::Status status = stopped();
    if (status.ok()) status = work(CancelCheck([&stopped] { return !stopped().ok(); }));
    if (status.ok()) status = CheckResponseSize(response, max);
    if (!status.ok()) {
      if (grpc::Status why = stopped(); !why.ok()) status = why;
    }
    outcome.status = std::move(status);
    std::move(done)(std::move(outcome));
  };
  if (cost->run_inline) {
    run();
  } else {
    runtime_.pool->Submit(cost->lane, std::move(run));
  }
}

template <typename Response, typename Handle, typename Reply>
void CallRunner::ServeUnaryWith(grpc::CallbackServerContext* context, SchemeLabel scheme,
                                const std::string& request_id, const absl::StatusOr<CallCost>& cost,
                                Response* response, Handle handle, Reply reply) const {
  std::shared_ptr<TrackedCall> call = CallOf(runtime_, context, scheme);
  call->request_id = Elide(request_id);
  if (call->late) {
    reply(kShuttingDown);
    return;
  }
  Run(
      cost, Slot::kCall, /*request_id=*/"", [context] { return StoppedStatus(context); }, *response,
      std::move(handle),
      [reply = std::move(reply), call = std::move(call)](CallOutcome outcome) mutable {
        call->ticket = std::move(outcome.ticket);
        reply(std::move(outcome.status));
      });
}

template <typename Response, typename Work, typename Done>
void CallRunner::RunMessage(Method method, SchemeLabel scheme,
                            std::chrono::steady_clock::time_point start,
                            const std::string& request_id, const absl::StatusOr<CallCost>& cost,
                            Response& response, Work work, Done done) const {
  Run(
      cost, Slot::kStreamMessage, request_id, [] { return grpc::Status::OK; }, response,
      std::move(work),
      [metrics = metrics_, method, scheme, start,
       done = std::move(done)](CallOutcome outcome) mutable {
        RecordMessage(metrics, method, scheme, outcome.status, start);
        std::move(done)(std::move(outcome));
      });
}

}  // namespace posenc
