#include "server/tensor/tensor_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace posenc {

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape,
                                           absl::string_view field) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "] is ", d, "; dimensions must be >= 0"));
    }
    if (d != 0 && n > kMaxElements / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".shape ", ShapeString(shape), " has more than 2^40 elements"));
    }
    n *= d;
  }
  return n;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace posenc
