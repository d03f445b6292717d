// The one mapping between the wire's posenc.v1.DType and the host DType, shared by the
// server (service/proto_convert) and the client library (client/tensor_proto). Stateless.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "posenc/v1/posenc.pb.h"
#include "server/tensor/dtype.h"

namespace posenc {

// INVALID_ARGUMENT naming `field`: "input.dtype is DTYPE_UNSPECIFIED; set it", or
// "input.dtype is 99, not a known DType".
absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field);
// DTYPE_UNSPECIFIED for kFloat64, which has no wire dtype.
v1::DType DTypeToProto(DType dtype);

}  // namespace posenc
