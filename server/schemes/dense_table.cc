#include "server/schemes/dense_table.h"

#include <algorithm>

#include "server/common/checked_math.h"

namespace posenc {

std::optional<int64_t> DenseTableRows(const DensePolicy& policy, int64_t max_position,
                                      int64_t tokens, int64_t row_bytes, size_t cache_budget) {
  int64_t rows = kMinDenseRows;
  while (rows < max_position + 1) rows *= 2;  // max_position <= 2^40: no overflow
  const std::optional<int64_t> bytes = CheckedProduct({rows, row_bytes});
  if (!bytes || static_cast<uint64_t>(*bytes) > cache_budget / policy.budget_divisor) {
    return std::nullopt;
  }
  if (rows > policy.rows_per_token * tokens + policy.allowance) return std::nullopt;
  return rows;
}

}  // namespace posenc
