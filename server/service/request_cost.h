// What a call will cost before anything is allocated for it: the bytes it holds while it
// runs (its request tensors, new output buffers, the serialized response, scratch tables
// and solver memory), computed from the request message alone with overflow-checked
// arithmetic, and the lane it runs in. An upper bound, not a measurement: validation of the
// fields happens later, in the schemes; a request whose sizes overflow is refused here
// (RESOURCE_EXHAUSTED). Stateless; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "posenc/v1/posenc.pb.h"
#include "server/service/work_pool.h"

namespace posenc {

struct CallCost {
  uint64_t bytes = 0;
  Lane lane = Lane::kCheap;
};

// Calls up to this many bytes run in the cheap lane (graphs: see kCheapGraphNodes).
inline constexpr uint64_t kCheapCallBytes = uint64_t{2} << 20;
// Graphs up to this many nodes solve in well under a millisecond.
inline constexpr int64_t kCheapGraphNodes = 64;

absl::StatusOr<CallCost> CostOf(const v1::EncodeRequest& request);
absl::StatusOr<CallCost> CostOf(const v1::BiasRequest& request);
absl::StatusOr<CallCost> CostOf(const v1::GraphRequest& request);
// GetTable holds one chunk of `rows_per_chunk` rows at a time.
absl::StatusOr<CallCost> CostOf(const v1::TableRequest& request, int64_t rows_per_chunk);

}  // namespace posenc
