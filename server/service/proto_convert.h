// Conversions between the wire messages (posenc.v1) and the plain specs and views the
// schemes take, plus the absl -> gRPC status mapping. Stateless; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/dtype_proto.h"
#include "server/graph/laplacian.h"
#include "server/schemes/absolute_scheme.h"
#include "server/schemes/bias_scheme.h"
#include "server/schemes/positions.h"
#include "server/tables/rope_frequencies.h"
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

// The scheme converters. Proto3 enums are open: a value the proto does not name (e.g.
// `rope.style = 99`) arrives as that number, and each converter answers INVALID_ARGUMENT
// naming the field and listing the known names, never a silent default. Parameter ranges
// are the schemes' to check (Validate*, Apply*), next to their math.
absl::StatusOr<SinusoidalSpec> SinusoidalFromProto(const v1::Sinusoidal& s);
absl::StatusOr<CombineSpec> CombineFromSinusoidal(const v1::Sinusoidal& s);
absl::StatusOr<CombineSpec> CombineFromLearned(const v1::Learned& l);
absl::StatusOr<Overflow> OverflowFromProto(v1::Overflow o);
absl::StatusOr<ContinuousSpec> ContinuousFromProto(const v1::Continuous& c);
absl::StatusOr<RopeSpec> RopeFromProto(const v1::Rope& r);
absl::StatusOr<AlibiSpec> AlibiFromProto(const v1::Alibi& a);
T5Spec T5FromProto(const v1::T5Bias& t);
// The bias, its geometry (query_offset defaulting to key_length - query_length) and whether
// scores are given; neither scheme set leaves both alibi and t5 empty.
absl::StatusOr<BiasSpec> BiasFromProto(const v1::BiasRequest& request);
// Spans point into `h`.
std::vector<HierarchicalLevel> HierarchicalFromProto(const v1::Hierarchical& h);
// Spans point into `request`.
GraphSpec GraphFromProto(const v1::GraphRequest& request);

// The status a client sees: same code, message prefixed with the request id if any.
grpc::Status ToGrpcStatus(const absl::Status& status, const std::string& request_id = "");

}  // namespace posenc
