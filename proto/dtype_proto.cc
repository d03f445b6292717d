#include "proto/dtype_proto.h"

#include "absl/strings/str_cat.h"

namespace posenc {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::FLOAT32: return DType::kFloat32;
    case v1::FLOAT16: return DType::kFloat16;
    case v1::BFLOAT16: return DType::kBFloat16;
    case v1::INT32: return DType::kInt32;
    case v1::INT64: return DType::kInt64;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(absl::StrCat(field, " is DTYPE_UNSPECIFIED; set it"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is ", static_cast<int>(dtype), ", not a known DType"));
  }
}

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return v1::FLOAT32;
    case DType::kFloat16: return v1::FLOAT16;
    case DType::kBFloat16: return v1::BFLOAT16;
    case DType::kInt32: return v1::INT32;
    case DType::kInt64: return v1::INT64;
    case DType::kFloat64: break;  // a file type only; the wire has no float64
  }
  return v1::DTYPE_UNSPECIFIED;
}

}  // namespace posenc
