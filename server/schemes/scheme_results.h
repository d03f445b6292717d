#ifndef POSENC_SERVER_SCHEMES_SCHEME_RESULTS_H_
#define POSENC_SERVER_SCHEMES_SCHEME_RESULTS_H_

// What every scheme's result must satisfy before it is answered, and table rows in the
// dtype a caller asked for.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/schemes/scheme_registry.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// A result that is not finite is an error, not an answer. Encode and graph results must be
// finite: an inf or NaN comes from `source` (the input or the key) or from scales or values
// that overflow its dtype. A bias may hold -inf (ALiBi's causal mask), so there only NaN is
// refused (from a NaN in `source`, or +inf scores meeting the mask).
enum class Allowed { kFiniteOnly, kInfinities };

// The error for element `at` of `result` (OK when `at` is -1).
absl::Status ResultError(const ConstTensorView& result, int64_t at, const char* source,
                         Allowed allowed);

// Scans `result` and returns ResultError for its first offending element.
absl::Status CheckResult(const ConstTensorView& result, const char* source, Allowed allowed);

// `rows` (float32) written into `out` as `dtype`, resizing it.
absl::Status WriteTableRows(const TableRows& rows, DType dtype, std::string& out);

}  // namespace posenc

#endif  // POSENC_SERVER_SCHEMES_SCHEME_RESULTS_H_
