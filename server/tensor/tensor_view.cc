#include "server/tensor/tensor_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace posenc {

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape,
                                           absl::string_view field) {
  // The non-zero dimensions are bounded too: an empty tensor [0, 2^62, 2^62] must not carry
  // dimensions whose products (row widths, byte counts) overflow further on.
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  int64_t nonzero = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "] is ", d, "; dimensions must be >= 0"));
    }
    if (d == 0) continue;
    if (nonzero > kMaxElements / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape ", ShapeString(shape),
                       empty ? " has non-zero dimensions whose product is more than 2^40"
                             : " has more than 2^40 elements"));
    }
    nonzero *= d;
  }
  return empty ? 0 : nonzero;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace posenc
