// A bidirectional gRPC stream that answers one response per request, in request order,
// reading at most `window` responses ahead of its writes: a client that sends faster than
// it reads is slowed down by flow control instead of growing the server's memory.
// The reactor owns itself and is deleted when gRPC is done with it. Thread-safe: reads and
// writes may complete on different threads; all state changes happen under one mutex.
//
// The handler answers where it chooses (on the reactor's thread, or on a worker pool) by
// calling its Reply. One request of a stream is handled at a time, so order is kept.
//
// On gRPC's typed path the reactor is a ServerBidiReactor<Request, Response>. On the raw
// path (the generated WithRawCallbackMethod_*: OrderedStreamReactor<Req, Resp, kRawWire>)
// it reads and writes grpc::ByteBuffers: each request is parsed here (ParseWireRequest),
// and each answer is written by the RawWire's `write` (wire_format.h: the tensor bytes
// handed to gRPC without a copy) as soon as it is made.
//
//   return new OrderedStreamReactor<Req, Resp>(
//       2, OrderedStreamReactor<Req, Resp>::Inline([](Req& in, Resp& out) { ...; return OK; }));
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"
#include "server/service/admission.h"
#include "server/service/wire_format.h"

namespace posenc {

inline constexpr bool kRawWire = true;

template <typename Request, typename Response, bool kRaw = false>
class OrderedStreamReactor final
    : public grpc::ServerBidiReactor<std::conditional_t<kRaw, grpc::ByteBuffer, Request>,
                                     std::conditional_t<kRaw, grpc::ByteBuffer, Response>> {
 public:
  // The raw path's two ends: how an answer is written, and the rpc's name for the error a
  // request that does not parse ends the stream with (INVALID_ARGUMENT).
  struct RawWire {
    grpc::ByteBuffer (*write)(Response&) = nullptr;
    const char* method = "";
  };

  // Delivers one answer, exactly once, from any thread: its status (a non-OK status ends
  // the stream with it once the earlier answers are out) and the admission the answer was
  // computed under, which the stream holds until that answer has been written (or
  // dropped), so a client that does not read keeps its buffered answers charged to the
  // budget.
  using Reply = absl::AnyInvocable<void(grpc::Status, Admission::Ticket) &&>;
  // Answers one request into the response, now or later on another thread, by calling the
  // Reply. It may take the request's bytes; the request and the response stay untouched
  // by the reactor until the Reply (the request is cleared before the next read).
  using Handler = std::function<void(Request&, Response&, Reply)>;
  // Runs once, just before Finish, with the final status (which it may rewrite: what it
  // leaves is sent) and whether a Handler returned it.
  using OnFinish = std::function<void(grpc::Status& status, bool from_handler)>;

  // A Handler that answers on the reactor's thread with answer(Request&, Response&) ->
  // grpc::Status, holding no admission.
  template <typename Answer>
  static Handler Inline(Answer answer) {
    return [answer = std::move(answer)](Request& request, Response& response, Reply reply) {
      std::move(reply)(answer(request, response), Admission::Ticket());
    };
  }

  // With a non-OK `refuse`, the stream finishes at once with it and reads nothing.
  OrderedStreamReactor(size_t window, Handler handler, OnFinish on_finish = nullptr,
                       grpc::Status refuse = grpc::Status::OK)
      : OrderedStreamReactor(RawWire(), window, std::move(handler), std::move(on_finish),
                             std::move(refuse)) {}
  // The raw path's constructor (kRaw); `wire.write` is required.
  OrderedStreamReactor(RawWire wire, size_t window, Handler handler, OnFinish on_finish = nullptr,
                       grpc::Status refuse = grpc::Status::OK)
      : wire_(wire), window_(window), handler_(std::move(handler)),
        on_finish_(std::move(on_finish)) {
    if (!refuse.ok()) {
      Finishing finishing;
      {
        std::lock_guard<std::mutex> lock(mu_);
        final_status_ = refuse;
        reads_done_ = true;
        finishing = TakeFinishLocked();
      }
      if (finishing.finish) FinishWith(finishing);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = true;
    this->StartRead(ReadTarget());
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Handled(ok, Pending(), grpc::Status::OK);
      return;
    }
    if constexpr (kRaw) {
      const bool parsed = ParseWireRequest(wire_request_, request_);
      wire_request_.Clear();
      if (!parsed) {
        Refused(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("the request is not a valid message for ", wire_.method)));
        return;
      }
    }
    // Handled outside the lock: nothing touches request_ until the Reply calls Handled.
    auto response = std::make_unique<Response>();
    Response& out = *response;
    handler_(request_, out,
             [this, response = std::move(response)](grpc::Status status,
                                                    Admission::Ticket ticket) mutable {
               Pending pending{std::move(response), {}, std::move(ticket)};
               if constexpr (kRaw) {
                 if (status.ok()) pending.wire = wire_.write(*pending.response);
                 pending.response.reset();
               }
               Handled(true, std::move(pending), status);
             });
  }

  void OnWriteDone(bool ok) override {
    Finishing finishing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      WriteDoneLocked(ok);
      finishing = TakeFinishLocked();
    }
    if (finishing.finish) FinishWith(finishing);
  }

  void OnDone() override { delete this; }

 private:
  // An answer waiting to be written (the response, or on the raw path its bytes), with
  // the admission it holds until then.
  struct Pending {
    std::unique_ptr<Response> response;
    grpc::ByteBuffer wire;
    Admission::Ticket ticket;
  };

  auto* ReadTarget() {
    if constexpr (kRaw) {
      return &wire_request_;
    } else {
      return &request_;
    }
  }
  auto* WriteSource(Pending& pending) {
    if constexpr (kRaw) {
      return &pending.wire;
    } else {
      return pending.response.get();
    }
  }

  // A request that cannot be answered at all ends the stream with `status`, once the
  // queued answers are out; it was no handler's (the stream counts it).
  void Refused(const grpc::Status& status) {
    Finishing finishing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      reads_done_ = true;
      final_status_ = status;
      from_handler_ = false;
      finishing = TakeFinishLocked();
    }
    if (finishing.finish) FinishWith(finishing);
  }

  // REQUIRES: mu_ held.
  void WriteDoneLocked(bool ok) {
    writing_ = false;
    queue_.pop_front();
    if (!ok) {  // the client is gone: drop what is queued
      queue_.clear();
      broken_ = true;
      if (!reading_) reads_done_ = true;
      final_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream broken by the client");
      from_handler_ = false;
    } else if (!queue_.empty()) {
      writing_ = true;
      this->StartWrite(WriteSource(queue_.front()));
    }
    MaybeReadLocked();
  }

  // A read has completed (ok) and been handled, or the reads are over (!ok). It may run on
  // a thread of the handler's, outside any reaction of gRPC's: once the lock is released,
  // a write completing on a gRPC thread may finish the stream and delete this, so whether
  // to finish is decided under the same lock as the state change.
  void Handled(bool ok, Pending pending, const grpc::Status& status) {
    Finishing finishing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      HandledLocked(ok, std::move(pending), status);
      finishing = TakeFinishLocked();
    }
    if (finishing.finish) FinishWith(finishing);
  }

  // REQUIRES: mu_ held.
  void HandledLocked(bool ok, Pending pending, const grpc::Status& status) {
    reading_ = false;
    if (!ok || broken_) {  // a broken stream drops the answer
      reads_done_ = true;
    } else if (!status.ok()) {
      final_status_ = status;  // stop reading; finish once the queued answers are out
      from_handler_ = true;
      reads_done_ = true;
    } else {
      queue_.push_back(std::move(pending));
      if (!writing_) {
        writing_ = true;
        this->StartWrite(WriteSource(queue_.front()));
      }
      MaybeReadLocked();
    }
  }

  // REQUIRES: mu_ held.
  void MaybeReadLocked() {
    if (!reading_ && !reads_done_ && !broken_ && queue_.size() < window_) {
      request_.Clear();
      reading_ = true;
      this->StartRead(ReadTarget());
    }
  }
  // Whether the caller is the one to finish the stream, and with what.
  struct Finishing {
    bool finish = false;
    grpc::Status status;
    bool from_handler = false;
  };
  // Claims the finish once nothing is read, queued or written; exactly one caller gets
  // finish == true. REQUIRES: mu_ held, in the same critical section as the state change
  // that made the stream finishable (a caller that released the lock in between could
  // find this already deleted).
  Finishing TakeFinishLocked() {
    Finishing finishing;
    if (!reads_done_ || reading_ || writing_ || !queue_.empty() || finished_) return finishing;
    finished_ = true;
    finishing.finish = true;
    finishing.status = final_status_;
    finishing.from_handler = from_handler_;
    return finishing;
  }
  // Called only by the caller whose TakeFinishLocked returned finish == true; the others
  // must not touch this at all once they release the lock, not even to call a member
  // function. REQUIRES: mu_ not held. Finish lets gRPC run OnDone, which deletes this,
  // possibly on another thread before this call returns, so nothing of this object is
  // touched after it.
  void FinishWith(Finishing& finishing) {
    if (on_finish_) on_finish_(finishing.status, finishing.from_handler);
    this->Finish(finishing.status);
  }

  const RawWire wire_;
  const size_t window_;
  const Handler handler_;
  const OnFinish on_finish_;
  Request request_;
  // The raw path's read buffer (unused on the typed path).
  std::conditional_t<kRaw, grpc::ByteBuffer, char> wire_request_{};
  std::mutex mu_;
  std::deque<Pending> queue_;  // front is being written
  bool reading_ = false;
  bool writing_ = false;
  bool reads_done_ = false;
  bool broken_ = false;
  bool finished_ = false;
  bool from_handler_ = false;
  grpc::Status final_status_;
};

}  // namespace posenc
