// Request and response messages the service owns, for callback unary rpcs whose handlers
// work in place on the request (its tensor bytes move into the response): registered with
// the generated SetMessageAllocatorFor_<Method>, gRPC takes each call's messages from
// OwnedMessages and hands them back (Release) once the call is done, and the handler reaches
// the mutable request through the call's context instead of casting away gRPC's const.
// Each call's two messages live on a protobuf arena of their own, whose first block is part
// of the holder: a call's small fields (names, shapes, parameters, sub-messages) cost no
// allocation each and are freed at once; its tensor bytes, std::strings whose buffers are
// not the arena's, still move between messages without a copy.
// Thread-safe (each call's messages are its own); the allocator must outlive the server.
#pragma once

#include <cstddef>

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/message_allocator.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/arena_block.h"
#include "server/service/wire_format.h"

namespace posenc {

template <typename Request, typename Response>
class OwnedMessages final : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override { return new Holder(); }

  // The mutable request of a call whose messages this allocator made. REQUIRES: the rpc's
  // allocator is an OwnedMessages<Request, Response> (else there is no state: null).
  static Request* RequestOf(grpc::CallbackServerContext* context) {
    auto* holder =
        static_cast<grpc::MessageHolder<Request, Response>*>(context->GetRpcAllocatorState());
    return holder ? holder->request() : nullptr;
  }

 private:
  // What a decode step's messages take on the arena, with room to spare; a larger request
  // takes further blocks from the heap.
  static constexpr size_t kFirstBlockBytes = 4096;

  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() : arena_(FirstBlockOptions(first_block_, kFirstBlockBytes)) {
      this->set_request(google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }
    void Release() override { delete this; }

   private:
    alignas(std::max_align_t) char first_block_[kFirstBlockBytes];
    google::protobuf::Arena arena_;  // after the block it starts in; destroyed before it
  };
};

// A unary call served on gRPC's raw callback path (the generated WithRawCallbackMethod_*):
// gRPC hands over the request's bytes and takes the response's, and this reactor holds
// the call's messages in between, on an arena as OwnedMessages does. The service parses
// the request into request() (Parse), its handler works in place
// and fills response(), and Reply writes the response with `write` (a Write* of
// wire_format.h: the tensor bytes are handed to gRPC without a copy) before finishing.
// Deletes itself, messages and all, once gRPC is done with the call; the slices it handed
// gRPC own their bytes and may outlive it.
template <typename Request, typename Response>
class WireUnaryCall final : public grpc::ServerUnaryReactor {
 public:
  using Write = grpc::ByteBuffer (*)(Response&);

  // `wire_response` is gRPC's, for the call's life.
  WireUnaryCall(grpc::ByteBuffer* wire_response, Write write)
      : arena_(FirstBlockOptions(first_block_, kFirstBlockBytes)),
        request_(google::protobuf::Arena::CreateMessage<Request>(&arena_)),
        response_(google::protobuf::Arena::CreateMessage<Response>(&arena_)),
        wire_response_(wire_response), write_(write) {}

  // Parses the request from gRPC's bytes. False when they are not a valid Request: the
  // call is then finished with INVALID_ARGUMENT naming `method`, as a typed rpc's is.
  bool Parse(const grpc::ByteBuffer& wire_request, const char* method) {
    if (ParseWireRequest(wire_request, *request_)) return true;
    Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("the request is not a valid message for ", method)));
    return false;
  }

  Request* request() { return request_; }
  Response* response() { return response_; }

  // Finishes the call with `status`; with OK, after writing the response.
  void Reply(grpc::Status status) {
    if (status.ok()) *wire_response_ = write_(*response_);
    Finish(std::move(status));
  }

  void OnDone() override { delete this; }

 private:
  static constexpr size_t kFirstBlockBytes = 4096;

  alignas(std::max_align_t) char first_block_[kFirstBlockBytes];
  google::protobuf::Arena arena_;  // after the block it starts in; destroyed before it
  Request* const request_;
  Response* const response_;
  grpc::ByteBuffer* const wire_response_;
  const Write write_;
};

}  // namespace posenc
