// Overflow-checked int64 arithmetic for sizes computed from request fields, the range
// check of a float parameter and the finite check of computed rows. Every product of
// request-controlled numbers (rows x dim, batch x seq x width, heads x q x k, levels x rows x dim)
// goes through these, so a hostile request is a refusal, never signed overflow. Header-only; no
// state; thread-safe.
//
//   ASSIGN_OR_RETURN(int64_t bytes, SizeWithin({heads, q, k, 4}, limit, "the bias",
//                                              "--max_message_bytes"));
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace posenc {

// a * b, or nullopt when the result does not fit in int64.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or nullopt when the result does not fit in int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of `factors` (1 when empty), or nullopt when it does not fit in int64. A zero
// factor makes it 0 whatever the others: the order of the factors never matters.
inline std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors) {
  for (int64_t f : factors) {
    if (f == 0) return 0;
  }
  int64_t r = 1;
  for (int64_t f : factors) {
    std::optional<int64_t> next = CheckedMul(r, f);
    if (!next) return std::nullopt;
    r = *next;
  }
  return r;
}

// The product of `factors` (a size, e.g. elements x bytes per element) when it is at most
// `limit`; else RESOURCE_EXHAUSTED "<what> would be N bytes; <limit_name> allows L" (or
// "more than 2^63 bytes" when the product overflows). A negative factor is INTERNAL: sizes
// reaching here were validated >= 0.
inline absl::StatusOr<int64_t> SizeWithin(std::initializer_list<int64_t> factors, int64_t limit,
                                          absl::string_view what, absl::string_view limit_name) {
  for (int64_t f : factors) {
    if (f < 0) {
      return absl::InternalError(absl::StrCat(what, ": a size factor is negative (", f, ")"));
    }
  }
  const std::optional<int64_t> size = CheckedProduct(factors);
  if (!size) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " would be more than 2^63 bytes; ", limit_name, " allows ", limit));
  }
  if (*size > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " would be ", *size, " bytes; ", limit_name, " allows ", limit));
  }
  return *size;
}

// OK when lo <= v <= hi; else INVALID_ARGUMENT "<field> is <v>; it must be in [lo, hi]"
// (NaN is never in range). The schemes bound their parameters with it where the math
// would leave float range outside.
inline absl::Status CheckInRange(absl::string_view field, double v, double lo, double hi) {
  if (v >= lo && v <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", v, "; it must be in [", lo, ", ", hi, "]"));
}

// The backstop of "results are finite or refused": OK when every value of rows computed for
// a request (encoding rows, cos/sin tables) is finite; else INVALID_ARGUMENT "<field>: these
// parameters give a non-finite encoding value". Parameter validation is meant to make this
// never fire; it is cheap next to the sin/cos that made the rows.
inline absl::Status CheckRowsFinite(absl::Span<const float> rows, absl::string_view field) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!std::isfinite(rows[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": these parameters give a non-finite encoding value (element ", i, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc
