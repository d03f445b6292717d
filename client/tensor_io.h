// posenc-client's tensors on the local side: read from .npy files, filled for a --shape,
// written back as .npy (which has no bfloat16, so those widen to float32), and the one-line
// summary each command prints of a response tensor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/tensor_proto.h"
#include "server/tensor/dtype.h"

namespace posenc::client {

// Reads an .npy of float32/float16 into a Tensor of `dtype` (or the file's dtype if unset).
absl::StatusOr<v1::Tensor> TensorFromNpy(const std::string& path, std::optional<v1::DType> dtype);

// n values uniform in [-1, 1) from a 64-bit Mersenne Twister seeded with `seed`: what
// --fill random (and infer's --shape) send, the same for the same seed.
std::vector<float> RandomFloats(size_t n, uint64_t seed);

// A tensor of `shape` (checked as --shape): random (RandomFloats) or zeros, per `fill`.
absl::StatusOr<v1::Tensor> FilledTensor(const std::vector<int64_t>& shape, const std::string& fill,
                                        uint64_t seed, v1::DType dtype);

// Writes raw elements as .npy; bfloat16 elements are written as float32.
absl::Status WriteNpyWidened(const std::string& path, DType dtype, absl::Span<const int64_t> shape,
                             absl::string_view bytes);

// Writes a response tensor (WriteNpyWidened), with a note on stderr when it widens bfloat16.
absl::Status WriteTensorNpy(const std::string& path, const v1::Tensor& tensor);

// "<label>: shape [..] <dtype>  first: v0 v1 ..." with `count` values, on stdout.
void PrintTensorSummary(absl::string_view label, const v1::Tensor& tensor, int64_t count);

}  // namespace posenc::client
