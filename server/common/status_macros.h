// Tiny status helpers: Debian 12's abseil (20220623) ships no status macros.
// Header-only; no state.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define POSENC_CONCAT_INNER_(a, b) a##b
#define POSENC_CONCAT_(a, b) POSENC_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status posenc_status_ = (expr);          \
    if (!posenc_status_.ok()) return posenc_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Compute());` declares x from an absl::StatusOr or returns
// its error from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(POSENC_CONCAT_(posenc_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
