// Helpers for the descriptors' cost models (SchemeDescriptor::encode_cost, graph_cost):
// sizes read from request tensors that are not yet validated (absent or negative
// dimensions count as 0), and byte counts whose sums and products refuse, rather than wrap,
// past 2^62. Header-only; stateless, thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "posenc/v1/posenc.pb.h"
#include "server/schemes/scheme_registry.h"

namespace posenc {

// Graphs up to this many nodes solve in well under a millisecond; larger ones are slow work
// (the bulk lane) whatever their size in bytes.
inline constexpr int64_t kCheapGraphNodes = 64;

class CostBytes {
 public:
  explicit CostBytes(uint64_t v = 0) : v_(v) {}
  static CostBytes Product(std::initializer_list<int64_t> factors) {
    CostBytes b(1);
    for (int64_t f : factors) b = b * CostBytes(static_cast<uint64_t>(std::max<int64_t>(f, 0)));
    return b;
  }
  CostBytes operator*(CostBytes o) const {
    CostBytes r;
    r.overflow_ =
        overflow_ || o.overflow_ || __builtin_mul_overflow(v_, o.v_, &r.v_) || r.v_ > kMax;
    return r;
  }
  CostBytes operator+(CostBytes o) const {
    CostBytes r;
    r.overflow_ =
        overflow_ || o.overflow_ || __builtin_add_overflow(v_, o.v_, &r.v_) || r.v_ > kMax;
    return r;
  }
  // RESOURCE_EXHAUSTED when the sizes overflowed; `what` names the sizes that multiplied.
  absl::StatusOr<SchemeCost> Cost(absl::string_view what, bool slow = false) const {
    if (overflow_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " multiply past 2^62 bytes; no server can hold that"));
    }
    return SchemeCost{v_, slow};
  }

 private:
  static constexpr uint64_t kMax = uint64_t{1} << 62;
  uint64_t v_ = 0;
  bool overflow_ = false;
};

// Bytes per element of a wire dtype (4 for an unknown one, which validation refuses later).
inline int64_t CostElementBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT16:
    case v1::BFLOAT16: return 2;
    case v1::INT64: return 8;
    default: return 4;
  }
}

// a + b for non-negative sizes, pinned at INT64_MAX (which CostBytes::Product then refuses).
inline int64_t CostSizeSum(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(std::max<int64_t>(a, 0), std::max<int64_t>(b, 0), &sum)
             ? std::numeric_limits<int64_t>::max()
             : sum;
}

// Dimension i of a tensor (i < 0 counts from the end); 0 when absent.
inline int64_t CostDim(const v1::Tensor& t, int i) {
  const int n = t.shape_size();
  const int at = i < 0 ? n + i : i;
  return at >= 0 && at < n ? t.shape(at) : 0;
}

// Tokens (everything but the last axis) of a tensor; 0 when absent or overflowing.
inline int64_t CostRows(const v1::Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.shape_size(); ++i) {
    if (t.shape(i) <= 0 || __builtin_mul_overflow(rows, t.shape(i), &rows)) return 0;
  }
  return t.shape_size() > 0 ? rows : 0;
}

// The request's inline tensor bytes (input and key): they arrived with the request.
inline CostBytes EncodeInBytes(const v1::EncodeRequest& r) {
  return CostBytes(r.input().data().size() + r.key().data().size());
}

}  // namespace posenc
