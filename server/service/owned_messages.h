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

#include "google/protobuf/arena.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/message_allocator.h"
#include "server/service/arena_block.h"

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

}  // namespace posenc
