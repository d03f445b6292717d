// Conversions between the wire messages (posenc.v1) and the views and positions every
// scheme takes, plus the absl -> gRPC status mapping; each scheme's own message is converted
// by its descriptor (server/schemes/scheme_registry.h). Stateless; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/dtype_proto.h"
#include "server/schemes/positions.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// DTypeFromProto and DTypeToProto: proto/dtype_proto.h.

// A view over a request tensor's bytes, after checking its dtype, shape and that `data`
// holds exactly product(shape) * sizeof(dtype) bytes. Nothing is copied or allocated.
// The view writes into `tensor`'s own buffer (the kernels work in place on it).
absl::StatusOr<TensorView> ViewOfTensor(v1::Tensor* tensor, absl::string_view field);

// Moves `data` into `out` with the given shape and dtype (no byte copy).
void MoveIntoTensor(std::string* data, absl::Span<const int64_t> shape, DType dtype,
                    v1::Tensor* out);

PositionsSpec PositionsFromProto(const v1::Positions& positions);

// The status a client sees: same code, message prefixed with the request id if any.
grpc::Status ToGrpcStatus(const absl::Status& status, const std::string& request_id = "");

}  // namespace posenc
