// Conversions between posenc.v1.Tensor messages and host float32/int arrays, with the
// FLOAT16/BFLOAT16 rounding done on the way. Pure functions; thread-safe. Results own their
// data; views borrow the message's bytes.
//
//   ASSIGN_OR_RETURN(v1::Tensor t, MakeTensor(values, {1, 8, 16}, v1::FLOAT16));
//   ASSIGN_OR_RETURN(std::vector<float> out, TensorToFloats(response.output(), "output"));
#pragma once

#include <cstdint>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/dtype_proto.h"
#include "server/tensor/dtype.h"
#include "server/tensor/tensor_view.h"

namespace posenc::client {

namespace v1 = ::posenc::v1;

// The one DType mapping (proto/dtype_proto.h), under the client library's names.
// FromProtoDType: INVALID_ARGUMENT naming `field`.dtype for DTYPE_UNSPECIFIED and unknown values.
inline absl::StatusOr<DType> FromProtoDType(v1::DType dtype, absl::string_view field) {
  return ::posenc::DTypeFromProto(dtype, absl::StrCat(field, ".dtype"));
}
inline v1::DType ToProtoDType(DType dtype) { return ::posenc::DTypeToProto(dtype); }

// "float32", "fp16", "half", "bf16", "bfloat16", "int32", ... (case-insensitive).
absl::StatusOr<v1::DType> ParseDTypeName(absl::string_view name);

// A Tensor of `dtype` (FLOAT32, FLOAT16 or BFLOAT16) holding `values` rounded to it.
// INVALID_ARGUMENT when values.size() != product(shape) or the dtype is not a float type.
absl::StatusOr<v1::Tensor> MakeTensor(absl::Span<const float> values,
                                      absl::Span<const int64_t> shape,
                                      v1::DType dtype = v1::FLOAT32);

// A Tensor from bytes already encoded in `dtype` (little-endian, row-major).
absl::StatusOr<v1::Tensor> MakeTensorFromBytes(DType dtype, absl::Span<const int64_t> shape,
                                               absl::string_view bytes);

// Checks that `tensor` has a known dtype and exactly product(shape) * sizeof(dtype) bytes,
// and returns a view of its bytes. The view borrows `tensor`, which must outlive it.
absl::StatusOr<ConstTensorView> ViewTensor(const v1::Tensor& tensor, absl::string_view field);

// The values of a FLOAT32/FLOAT16/BFLOAT16 tensor as float32.
absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& tensor,
                                                  absl::string_view field);

// The values of an INT32/INT64 tensor.
absl::StatusOr<std::vector<int64_t>> TensorToInts(const v1::Tensor& tensor,
                                                  absl::string_view field);

}  // namespace posenc::client
