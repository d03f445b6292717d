// A unary call served on gRPC's raw callback path (the generated WithRawCallbackMethod_*):
// gRPC hands over the request's bytes and takes the response's, and this reactor holds
// the call's messages in between, on an arena of their own (as OwnedMessages does), and
// the call's CallRecord. The service parses the request into request() (Parse), its
// handler works in place and fills response(), and Reply writes the response with
// `write` (a Write* of wire_format.h: the tensor bytes are handed to gRPC without a copy)
// before finishing.
//
// The record is the tracking the CallTracker's interceptor does for the other unary rpcs,
// without an interceptor's hooks on every batch of the call: the call is counted, logged,
// seen by the drain and holds its admission from the handler's start (gRPC starts a unary
// handler once the request has arrived; an upload still arriving is the drain's to see
// through channelz, as for every rpc) until gRPC is done with it.
//
// Deletes itself, messages and record, once gRPC is done with the call; the slices it
// handed gRPC own their bytes and may outlive it.
#pragma once

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/arena_block.h"
#include "server/service/call_tracker.h"
#include "server/service/wire_format.h"

namespace posenc {

template <typename Request, typename Response>
class WireUnaryCall final : public grpc::ServerUnaryReactor {
 public:
  using Write = grpc::ByteBuffer (*)(Response&);

  // `wire_response` is gRPC's, for the call's life; `tracker` outlives the call.
  WireUnaryCall(grpc::CallbackServerContext* context, CallTracker* tracker, Method method,
                grpc::ByteBuffer* wire_response, Write write)
      : arena_(FirstBlockOptions(first_block_, kFirstBlockBytes)),
        request_(google::protobuf::Arena::CreateMessage<Request>(&arena_)),
        response_(google::protobuf::Arena::CreateMessage<Response>(&arena_)),
        record_(tracker, context, method), wire_response_(wire_response), write_(write) {}

  // Parses the request from gRPC's bytes. False when they are not a valid Request: the
  // call is then finished with INVALID_ARGUMENT naming the rpc, as a typed rpc's is.
  bool Parse(const grpc::ByteBuffer& wire_request) {
    if (ParseWireRequest(wire_request, *request_)) return true;
    Reply(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("the request is not a valid message for ",
                                    MethodName(record_.call()->method))));
    return false;
  }

  Request* request() { return request_; }
  Response* response() { return response_; }

  // Finishes the call with `status` as the record sends it (counted, logged, its message
  // cut to size); with OK, after writing the response.
  void Reply(grpc::Status status) {
    if (status.ok()) *wire_response_ = write_(*response_);
    Finish(record_.Closing(std::move(status)));
  }

  void OnDone() override { delete this; }
  // Its reactions are trivial (OnCancel does nothing; OnDone frees the messages, whose
  // tensor bytes have moved on, and ends the record), so gRPC may run them on the thread
  // that completes the call instead of scheduling them on its executor, as it does for the
  // default reactor: the hop cost a unary call two context switches and about 30 us of
  // p50 (16 KiB x1).
  bool InternalInlineable() override { return true; }

 private:
  static constexpr size_t kFirstBlockBytes = 4096;

  alignas(std::max_align_t) char first_block_[kFirstBlockBytes];
  google::protobuf::Arena arena_;  // after the block it starts in; destroyed before it
  Request* const request_;
  Response* const response_;
  CallRecord record_;
  grpc::ByteBuffer* const wire_response_;
  const Write write_;
};

}  // namespace posenc
