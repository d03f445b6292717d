#include "client/tensor_io.h"

#include <algorithm>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/status_macros.h"
#include "server/tensor/npy.h"
#include "server/tensor/tensor_view.h"

namespace posenc::client {

absl::StatusOr<v1::Tensor> TensorFromNpy(const std::string& path, std::optional<v1::DType> dtype) {
  ASSIGN_OR_RETURN(NpyArray array, ReadNpyFile(path));
  if (!IsFloat(array.dtype) && array.dtype != DType::kFloat64) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds ", DTypeName(array.dtype),
                     "; a float32, float64 or float16 array is needed"));
  }
  // float64 goes as float32 unless a dtype is asked for (the wire has no float64).
  const v1::DType want =
      dtype.value_or(array.dtype == DType::kFloat64 ? v1::FLOAT32 : ToProtoDType(array.dtype));
  if (want == ToProtoDType(array.dtype))
    return MakeTensorFromBytes(array.dtype, array.shape, array.data);
  std::vector<float> values(array.data.size() / DTypeSize(array.dtype));
  ToFloat32(array.dtype, array.data.data(), values.data(), values.size());
  return MakeTensor(values, array.shape, want);
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = uniform(rng);
  return values;
}

absl::StatusOr<v1::Tensor> FilledTensor(const std::vector<int64_t>& shape, const std::string& fill,
                                        uint64_t seed, v1::DType dtype) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape, "--shape"));
  if (fill == "random") return MakeTensor(RandomFloats(static_cast<size_t>(n), seed), shape, dtype);
  if (fill != "zeros") {
    return absl::InvalidArgumentError(absl::StrCat("--fill '", fill, "' is not random or zeros"));
  }
  return MakeTensor(std::vector<float>(static_cast<size_t>(n), 0.0f), shape, dtype);
}

absl::Status WriteNpyWidened(const std::string& path, DType dtype, absl::Span<const int64_t> shape,
                             absl::string_view bytes) {
  if (dtype != DType::kBFloat16) return WriteNpyFile(path, dtype, shape, bytes);
  std::vector<float> values(bytes.size() / DTypeSize(DType::kBFloat16));
  ToFloat32(DType::kBFloat16, bytes.data(), values.data(), values.size());
  return WriteNpyFile(path, DType::kFloat32, shape,
                      absl::string_view(reinterpret_cast<const char*>(values.data()),
                                        values.size() * sizeof(float)));
}

absl::Status WriteTensorNpy(const std::string& path, const v1::Tensor& tensor) {
  ASSIGN_OR_RETURN(const ConstTensorView view, ViewTensor(tensor, "output"));
  if (view.dtype == DType::kBFloat16) {
    std::cerr << "note: " << path << ": bfloat16 written as float32 (.npy has no bfloat16)\n";
  }
  return WriteNpyWidened(path, view.dtype, view.shape, absl::string_view(tensor.data()));
}

namespace {

// The first `count` of `values` joined by spaces, then " ..." if there are more.
template <typename T>
std::string FirstValues(const std::vector<T>& values, int64_t count) {
  const size_t k =
      std::min<size_t>(values.size(), static_cast<size_t>(std::max<int64_t>(count, 0)));
  std::string first;
  for (size_t i = 0; i < k; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      absl::StrAppendFormat(&first, "%s%.6g", i ? " " : "", values[i]);
    } else {
      absl::StrAppend(&first, i ? " " : "", values[i]);
    }
  }
  if (k < values.size()) first += " ...";
  return first;
}

}  // namespace

void PrintTensorSummary(absl::string_view label, const v1::Tensor& tensor, int64_t count) {
  auto view = ViewTensor(tensor, label);
  if (!view.ok()) {
    std::cout << label << ": " << view.status().message() << "\n";
    return;
  }
  const std::string first = IsFloat(view->dtype)
                                ? FirstValues(*TensorToFloats(tensor, label), count)
                                : FirstValues(*TensorToInts(tensor, label), count);
  std::cout << label << ": shape " << ShapeString(view->shape) << " " << DTypeName(view->dtype)
            << "  first: " << first << "\n";
}

}  // namespace posenc::client
