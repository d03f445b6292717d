// Request and response messages the service owns, for callback unary rpcs whose handlers
// work in place on the request (its tensor bytes move into the response): registered with
// the generated SetMessageAllocatorFor_<Method>, gRPC takes each call's messages from
// OwnedMessages and hands them back (Release) once the call is done, and the handler reaches
// the mutable request through the call's context instead of casting away gRPC's const.
// Thread-safe (each call's messages are its own); the allocator must outlive the server.
#pragma once

#include "grpcpp/server_context.h"
#include "grpcpp/support/message_allocator.h"

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
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() {
      this->set_request(&request_);
      this->set_response(&response_);
    }
    void Release() override { delete this; }

   private:
    Request request_;
    Response response_;
  };
};

}  // namespace posenc
