// What a call will cost before anything is allocated for it: the bytes it holds while it
// runs (its request tensors, new output buffers, the serialized response, scratch tables
// and solver memory), computed from the request message alone with overflow-checked
// arithmetic, the lane it runs in, and whether it is small enough to run on gRPC's own
// thread instead. An upper bound, not a measurement: each scheme's cost model is its
// descriptor's (schemes/scheme_registry.h); validation of the fields happens later, in the
// schemes; a request whose sizes overflow is refused here (RESOURCE_EXHAUSTED).
// Stateless; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "inference/grpc_service.pb.h"
#include "posenc/v1/posenc.pb.h"
#include "server/schemes/scheme_cost.h"
#include "server/service/work_pool.h"

namespace posenc {

struct CallCost {
  uint64_t bytes = 0;
  Lane lane = Lane::kCheap;
  // The call's work is a few microseconds at most (an Encode or bias of at most
  // kInlineCallBytes, shared-memory tensors included): it runs where it arrives, on gRPC's
  // callback thread, without the hand-off to the work pool and back. Never a graph solve.
  bool run_inline = false;
};

// Calls up to this many bytes run in the cheap lane, unless their scheme calls the work slow
// (graphs: see kCheapGraphNodes in schemes/scheme_cost.h).
inline constexpr uint64_t kCheapCallBytes = uint64_t{2} << 20;
// Encodes and biases up to this many bytes of cost run inline: about 330 KiB of sinusoidal
// ADD (3 bytes of cost per input byte) or a RoPE decode step of batch 8, tens of
// microseconds of kernel at most, against the tens of microseconds the hand-off to a pool
// thread and back costs in wake-ups.
inline constexpr uint64_t kInlineCallBytes = uint64_t{1} << 20;

absl::StatusOr<CallCost> CostOf(const v1::EncodeRequest& request);
absl::StatusOr<CallCost> CostOf(const v1::BiasRequest& request);
absl::StatusOr<CallCost> CostOf(const v1::GraphRequest& request);
// GetTable holds one chunk of `rows_per_chunk` rows at a time.
absl::StatusOr<CallCost> CostOf(const v1::TableRequest& request, int64_t rows_per_chunk);

// Where a ModelStreamInfer message runs, judged from the message before it is converted
// (the conversion is work too, done where the message runs): the bulk lane for a message
// over kCheapCallBytes or a graph of more than kCheapGraphNodes nodes (num_nodes as
// int64_param or uint64_param); inline only for a message of at most kInlineCallBytes / 3
// that is no graph and names no shared memory (whose size the message does not show).
// `bytes` is 0: the message's cost is computed and admitted once it is converted.
CallCost PlacementOf(const inference::ModelInferRequest& request);

}  // namespace posenc
