// The Open Inference Protocol's `positions` parameter: a posenc.v1.Positions message in
// protobuf JSON. Thread-safe (no state).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc {

// Parses `json` into `positions` exactly as protobuf's JsonStringToMessage does (unknown
// fields are errors). The common shape of a decode step, an object of "offsets" and "ids"
// lists of integers (JSON numbers or decimal strings), is read directly: protobuf's JSON
// path costs such a call about 30,000 instructions. Anything else, or anything the direct
// reading is not sure of, goes to JsonStringToMessage. On error `positions` is unspecified;
// the message is protobuf's.
absl::Status ParsePositionsJson(const std::string& json, v1::Positions& positions);

namespace positions_json_internal {
// Whether `json` takes the direct reading (for tests).
bool ReadsDirectly(const std::string& json);
}  // namespace positions_json_internal

}  // namespace posenc
