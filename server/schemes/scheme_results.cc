#include "server/schemes/scheme_results.h"

#include "absl/strings/str_cat.h"
#include "server/kernels/convert_kernel.h"
#include "server/kernels/finite_kernel.h"

namespace posenc {

absl::Status ResultError(const ConstTensorView& result, int64_t at, const char* source,
                         Allowed allowed) {
  if (at < 0) return absl::OkStatus();
  const bool finite_only = allowed == Allowed::kFiniteOnly;
  const std::string cause =
      finite_only ? absl::StrCat("holds inf or NaN, or the scales and values overflow ",
                                 DTypeName(result.dtype))
                  : std::string("holds NaN, or +inf that meets the causal mask's -inf");
  return absl::InvalidArgumentError(
      absl::StrCat(source, " gives a result that is ", finite_only ? "not finite" : "NaN",
                   " (element ", at, " of the ", DTypeName(result.dtype), " result ",
                   ShapeString(result.shape), "): ", source, " ", cause));
}

absl::Status CheckResult(const ConstTensorView& result, const char* source, Allowed allowed) {
  const int64_t n = result.NumElements();
  return ResultError(result,
                     allowed == Allowed::kFiniteOnly ? FirstNonFinite(result.dtype, result.data, n)
                                                     : FirstNan(result.dtype, result.data, n),
                     source, allowed);
}

absl::Status WriteTableRows(const TableRows& rows, DType dtype, std::string& out) {
  out.resize(rows.rows.data.size() * DTypeSize(dtype));
  return ConvertFromFloat32(rows.rows.data.data(), dtype, out.data(),
                            static_cast<int64_t>(rows.rows.data.size()));
}

}  // namespace posenc
