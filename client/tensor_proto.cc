#include "client/tensor_proto.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

namespace posenc::client {

absl::StatusOr<v1::DType> ParseDTypeName(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "float32" || n == "fp32" || n == "f32" || n == "float") return v1::FLOAT32;
  if (n == "float16" || n == "fp16" || n == "f16" || n == "half") return v1::FLOAT16;
  if (n == "bfloat16" || n == "bf16") return v1::BFLOAT16;
  if (n == "int32" || n == "i32") return v1::INT32;
  if (n == "int64" || n == "i64") return v1::INT64;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype '", name, "' is not one of float32, float16, bfloat16, int32, int64"));
}

absl::StatusOr<v1::Tensor> MakeTensor(absl::Span<const float> values,
                                      absl::Span<const int64_t> shape, v1::DType dtype) {
  ASSIGN_OR_RETURN(const DType host_dtype, DTypeFromProto(dtype, "tensor.dtype"));
  if (!IsFloat(host_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MakeTensor converts float32 values to FLOAT32, FLOAT16 or BFLOAT16, not ",
                     v1::DType_Name(dtype)));
  }
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape, "tensor"));
  if (static_cast<int64_t>(values.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("tensor shape ", ShapeString(shape), " has ", n,
                                                   " elements but ", values.size(),
                                                   " values were given"));
  }
  v1::Tensor tensor;
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  tensor.set_dtype(dtype);
  std::string* data = tensor.mutable_data();
  data->resize(values.size() * DTypeSize(host_dtype));
  FromFloat32(values.data(), host_dtype, data->data(), values.size());
  return tensor;
}

absl::StatusOr<v1::Tensor> MakeTensorFromBytes(DType dtype, absl::Span<const int64_t> shape,
                                               absl::string_view bytes) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape, "tensor"));
  const size_t expected = static_cast<size_t>(n) * DTypeSize(dtype);
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("tensor shape ", ShapeString(shape), " of ",
                                                   DTypeName(dtype), " needs ", expected,
                                                   " bytes, got ", bytes.size()));
  }
  v1::Tensor tensor;
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  tensor.set_dtype(DTypeToProto(dtype));
  tensor.set_data(std::string(bytes));
  return tensor;
}

absl::StatusOr<ConstTensorView> ViewTensor(const v1::Tensor& tensor, absl::string_view field) {
  ASSIGN_OR_RETURN(const DType dtype,
                   DTypeFromProto(tensor.dtype(), absl::StrCat(field, ".dtype")));
  Shape shape(tensor.shape().begin(), tensor.shape().end());
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape, field));
  const size_t expected = static_cast<size_t>(n) * DTypeSize(dtype);
  if (tensor.data().size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".data has ", tensor.data().size(),
                                                   " bytes; shape ", ShapeString(shape), " of ",
                                                   DTypeName(dtype), " needs ", expected));
  }
  return ConstTensorView(dtype, std::move(shape), tensor.data().data());
}

absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& tensor,
                                                  absl::string_view field) {
  ASSIGN_OR_RETURN(const ConstTensorView view, ViewTensor(tensor, field));
  if (!IsFloat(view.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".dtype is ", DTypeName(view.dtype), "; expected a float dtype"));
  }
  std::vector<float> out(static_cast<size_t>(view.NumElements()));
  ToFloat32(view.dtype, view.data, out.data(), out.size());
  return out;
}

absl::StatusOr<std::vector<int64_t>> TensorToInts(const v1::Tensor& tensor,
                                                  absl::string_view field) {
  ASSIGN_OR_RETURN(const ConstTensorView view, ViewTensor(tensor, field));
  std::vector<int64_t> out(static_cast<size_t>(view.NumElements()));
  if (view.dtype == DType::kInt64) {
    std::memcpy(out.data(), view.data, out.size() * sizeof(int64_t));
  } else if (view.dtype == DType::kInt32) {
    const auto* src = static_cast<const unsigned char*>(view.data);
    for (size_t i = 0; i < out.size(); ++i) {
      int32_t v;
      std::memcpy(&v, src + i * 4, 4);  // the message's bytes need not be aligned
      out[i] = v;
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".dtype is ", DTypeName(view.dtype), "; expected INT32 or INT64"));
  }
  return out;
}

}  // namespace posenc::client
