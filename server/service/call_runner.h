// How every front (posenc.v1, the Open Inference Protocol) runs a unary call: on gRPC's
// thread it refuses a call that arrived while draining, admits the call's cost (or refuses
// it at once, before anything is allocated for it), and runs the work: a call whose cost
// says it runs inline (CallCost::run_inline: a few microseconds) right there, any other on
// the WorkPool, so gRPC's threads never wait for a long call; then it checks the response
// fits the message limit and finishes the call.
// Also the small pieces streams share. Thread-safe; owns nothing.
//
//   return runner_.ServeUnary(context, scheme, request->request_id(), CostOf(*request), response,
//                             [=](const CancelCheck&) { return ...; });
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpc/support/time.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"
#include "server/common/cancel.h"
#include "server/common/client_text.h"
#include "server/service/admission.h"
#include "server/service/call_tracker.h"
#include "server/service/proto_convert.h"
#include "server/service/request_cost.h"
#include "server/service/work_pool.h"
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

// Whose shared-memory regions a call may see and use: the client's connection, as gRPC
// names its peer ("ipv4:127.0.0.1:41234"; on a unix socket every client is "unix:", and the
// socket's file mode is the boundary). A region registered on one connection is invisible
// to every other, and is released when its connection closes.
inline std::string SharedMemoryOwner(const grpc::ServerContextBase* context) {
  return context->peer();
}

// A stream holds one --max_concurrent_calls slot for its whole life (in its TrackedCall),
// and each message then only its bytes (Admission::AdmitBytes). The status a new stream is
// refused with: UNAVAILABLE while draining, RESOURCE_EXHAUSTED when no slot is free.
inline grpc::Status OpenStream(const ServiceRuntime& runtime, TrackedCall& call) {
  if (call.late) return kShuttingDown;
  absl::StatusOr<Admission::Ticket> slot = runtime.admission->Admit(0);
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  call.ticket = std::move(*slot);
  return grpc::Status::OK;
}

class CallRunner {
 public:
  // REQUIRES: every runtime member is non-null.
  CallRunner(const ServiceRuntime& runtime, size_t max_message_bytes)
      : runtime_(runtime), max_message_bytes_(max_message_bytes) {}

  // Admits a unary call of `cost` (a non-OK cost finishes the call with it) and runs
  // handle(const CancelCheck&) -> grpc::Status inline or on the pool (cost->run_inline),
  // then checks `response` fits the message limit and finishes the call. `handle` may be
  // move-only. `request_id` labels the call's log line.
  template <typename Response, typename Handle>
  grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* context,
                                       SchemeLabel scheme, const std::string& request_id,
                                       const absl::StatusOr<CallCost>& cost,
                                       Response* response, Handle handle) const;

  const ServiceRuntime& runtime() const { return runtime_; }
  size_t max_message_bytes() const { return max_message_bytes_; }

 private:
  const ServiceRuntime runtime_;
  const size_t max_message_bytes_;
};

template <typename Response, typename Handle>
grpc::ServerUnaryReactor* CallRunner::ServeUnary(grpc::CallbackServerContext* context,
                                                 SchemeLabel scheme,
                                                 const std::string& request_id,
                                                 const absl::StatusOr<CallCost>& cost,
                                                 Response* response, Handle handle) const {
  auto* reactor = context->DefaultReactor();
  std::shared_ptr<TrackedCall> call = CallOf(runtime_, context, scheme);
  call->request_id = Elide(request_id);
  if (call->late) {
    reactor->Finish(kShuttingDown);
    return reactor;
  }
  absl::StatusOr<Admission::Ticket> ticket =
      cost.ok() ? runtime_.admission->Admit(cost->bytes) : cost.status();
  if (!ticket.ok()) {  // refused before anything was allocated for it
    reactor->Finish(ToGrpcStatus(ticket.status()));
    return reactor;
  }
  call->ticket = std::move(*ticket);
  auto run = [context, reactor, response, max = max_message_bytes_,
              handle = std::move(handle)]() mutable {
    grpc::Status status = StoppedStatus(context);
    if (status.ok()) status = handle(CancelCheckOf(context));
    if (status.ok()) status = CheckResponseSize(*response, max);
    // Work cut short by the caller going away reports why, not how it was cut.
    if (!status.ok()) {
      if (grpc::Status stopped = StoppedStatus(context); !stopped.ok()) status = stopped;
    }
    reactor->Finish(status);
  };
  if (cost->run_inline) {
    run();
  } else {
    runtime_.pool->Submit(cost->lane, std::move(run));
  }
  return reactor;
}

}  // namespace posenc
