// What every fuzz target shares: a real ServiceState (table cache, named tables, limits)
// behind a real RequestHandlers, built once per process, and the checks that turn a wrong
// answer into a crash the fuzzer reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "posenc/v1/posenc.pb.h"
#include "server/service/admission.h"
#include "server/service/request_cost.h"
#include "server/service/request_handlers.h"

namespace posenc::fuzz {

// Small on purpose: the fuzzer should find bugs, not requests that are slow or big within
// the limits. Learned table "pos" is [64, 16]; T5 table "t5" is [32, 4] (32 buckets, 4 heads).
inline constexpr size_t kMaxOutputBytes = size_t{1} << 20;
inline constexpr size_t kCacheBytes = size_t{8} << 20;

// The handlers over the process-wide state.
const RequestHandlers& Handlers();

// Aborts when `status` is INTERNAL or UNKNOWN: bad input must get a specific code.
// With POSENC_FUZZ_VERBOSE set, prints every status (to check that the seeds are valid).
void CheckStatus(const absl::Status& status, const char* what);

// Aborts unless `t` holds exactly product(shape) * dtype-size bytes of a known dtype.
void CheckTensor(const v1::Tensor& t, const char* what);

// Admission as the server does it: the request's cost (checked arithmetic; aborts on
// INTERNAL) against a budget of 64 MiB. Nullopt: refused, and the handler is not run.
std::optional<Admission::Ticket> Admit(const absl::StatusOr<CallCost>& cost);

// Encode through the handlers, with the checks above. Shared by the Encode and EncodeStream
// targets.
void RunEncode(v1::EncodeRequest& request);

}  // namespace posenc::fuzz
