// Non-owning views of dense row-major tensors. A view never owns or frees its bytes; the
// caller keeps them alive for the view's lifetime. Not synchronised.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tensor/dtype.h"

namespace posenc {

// Up to six dimensions inline: a view is copied by value on the request path, and its shape
// then costs no heap allocation.
using Shape = absl::InlinedVector<int64_t, 6>;

// Largest element count any tensor may claim; keeps size arithmetic far from overflow.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

// product(shape), or an INVALID_ARGUMENT naming `field` when a dimension is negative or the
// product of the non-zero dimensions exceeds kMaxElements (so every dimension, and every
// product of dimensions, is at most 2^40 even in an empty tensor). Nothing is allocated.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape,
                                           absl::string_view field);

// "[2,3,4]"
std::string ShapeString(absl::Span<const int64_t> shape);

// product(shape), unchecked: for shapes already checked (CheckedNumElements).
inline int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct TensorView {
  DType dtype = DType::kFloat32;
  Shape shape;
  void* data = nullptr;

  int64_t NumElements() const { return posenc::NumElements(shape); }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
  template <typename T>
  T* As() const {
    return static_cast<T*>(data);
  }
};

struct ConstTensorView {
  DType dtype = DType::kFloat32;
  Shape shape;
  const void* data = nullptr;

  ConstTensorView() = default;
  ConstTensorView(DType t, Shape s, const void* d) : dtype(t), shape(std::move(s)), data(d) {}
  ConstTensorView(const TensorView& v) : dtype(v.dtype), shape(v.shape), data(v.data) {}  // NOLINT

  int64_t NumElements() const { return posenc::NumElements(shape); }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
  template <typename T>
  const T* As() const {
    return static_cast<const T*>(data);
  }
};

}  // namespace posenc
