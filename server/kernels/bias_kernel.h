// Attention-score biases: ALiBi (Press et al.; BLOOM's slopes), T5 relative-position
// buckets (HF transformers' _relative_position_bucket), Shaw et al. 2018 relative positions
// (tensor2tensor's _generate_relative_positions_matrix: indices, embeddings and the query
// term) and DeBERTa-v2's log buckets (HF build_relative_position), built into a caller-owned
// buffer or added in place to attention scores. Pure functions; thread-safe; nothing is retained.
// Outputs are owned by the caller, who sizes them after Validate*() succeeds.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/kernels/kernel_impl.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

struct AlibiSpec {
  int32_t num_heads = 0;
  // false: SYMMETRIC, bias = -slope*|q-k|; true: CAUSAL, -slope*(q-k) for k <= q, -inf above.
  bool causal = false;
  // The 8 of the paper; llama.cpp's generalisation (slope base 2^(-max_bias/n)).
  double max_bias = 8.0;
};

struct T5Spec {
  int32_t num_buckets = 32;
  int32_t max_distance = 128;
  bool bidirectional = true;
};

// Shaw et al.: index[i][j] = clamp(key_pos - query_pos, -k, k) + k, k = max_relative_position.
struct ShawSpec {
  int32_t max_relative_position = 0;
};

// DeBERTa-v2: rel = query_pos - key_pos, log-bucketed when both fields are > 0.
struct DebertaSpec {
  int32_t position_buckets = 256;
  int32_t max_relative_positions = 512;
  bool Bucketed() const { return position_buckets > 0 && max_relative_positions > 0; }
};

// Largest shaw.max_relative_position: the index 2k stays inside int32.
inline constexpr int32_t kMaxShawRelativePosition = (int32_t{1} << 30) - 1;

// Query i has position query_offset + i, key j has position j.
struct BiasGeometry {
  int64_t query_length = 0;
  int64_t key_length = 0;
  int64_t query_offset = 0;
};

// The API default: a query block at the end of the keys (decoding with a cache). Negative
// lengths are refused by ValidateBiasGeometry; they get offset 0 here, as key_length - (-2^63)
// would overflow first.
inline BiasGeometry MakeBiasGeometry(int64_t query_length, int64_t key_length) {
  const bool lengths_signed_ok = query_length >= 0 && key_length >= 0;
  return BiasGeometry{query_length, key_length, lengths_signed_ok ? key_length - query_length : 0};
}

// Largest position (query_offset + query_length, key_length) accepted: keeps every
// position and distance exact in int64 and double.
inline constexpr int64_t kMaxBiasPosition = int64_t{1} << 40;

// --- Validation: INVALID_ARGUMENT naming the field, OK otherwise. -------------------------

// alibi.num_heads >= 1; alibi.max_bias finite and > 0, which is all finite biases need:
// every slope is then in [0, 1].
absl::Status ValidateAlibiSpec(const AlibiSpec& spec);
// t5.num_buckets >= 2 (>= 4 when bidirectional) so that max_exact >= 1; t5.max_distance >
// max_exact (num_buckets/2, or num_buckets/4 when bidirectional), as HF's log needs.
absl::Status ValidateT5Spec(const T5Spec& spec);
// query_length, key_length >= 1; query_offset >= 0; all positions <= kMaxBiasPosition.
absl::Status ValidateBiasGeometry(const BiasGeometry& geom);
// table shape [t5.num_buckets, heads] with heads >= 1. `field` names the table in messages.
absl::Status ValidateT5TableShape(const T5Spec& spec, absl::Span<const int64_t> table_shape,
                                  std::string_view field = "t5.table");
// scores: FLOAT32/FLOAT16/BFLOAT16 [batch >= 1, heads, query_length, key_length], data set.
// `heads_field` names where `heads` came from (e.g. "alibi.num_heads").
absl::Status ValidateScores(const BiasGeometry& geom, int64_t heads, std::string_view heads_field,
                            const TensorView& scores);

// shaw.max_relative_position in [1, kMaxShawRelativePosition].
absl::Status ValidateShawSpec(const ShawSpec& spec);
// When bucketed: deberta.position_buckets >= 2 (HF divides by mid = buckets / 2); a
// max_relative_positions whose buckets are not finite INT32 values (max <= mid + 1 can give
// them) is refused by BuildDebertaPositions at the first such position. Unbucketed, the raw
// distances must fit INT32: every position < 2^31.
absl::Status ValidateDebertaSpec(const DebertaSpec& spec, const BiasGeometry& geom);
// A Shaw table [2k + 1, d], d >= 1. `field` names the table in messages.
absl::Status ValidateShawTableShape(const ShawSpec& spec, absl::Span<const int64_t> table_shape,
                                    std::string_view field = "shaw.table");

// --- Scalars. -----------------------------------------------------------------------------

// Slope of head h (0-based): 2^(-max_bias/n * (h+1)) for h < n, the largest power of two
// <= num_heads; the extra heads take every other slope of 2n: 2^(-max_bias/(2n) * (2(h-n)+1)).
// REQUIRES: 0 <= h < num_heads.
double AlibiSlope(int32_t h, int32_t num_heads, double max_bias = 8.0);
// All num_heads slopes. REQUIRES: ValidateAlibiSpec OK for (num_heads, max_bias).
std::vector<double> AlibiSlopes(int32_t num_heads, double max_bias = 8.0);

// HF's bucket for relative_position = key - query, reproducing its float32 arithmetic:
// float32 log (correctly rounded), float32 divide and multiply, truncation toward zero,
// then min with num_buckets-1. REQUIRES: ValidateT5Spec OK.
int32_t T5RelativeBucket(int64_t relative_position, bool bidirectional, int32_t num_buckets,
                         int32_t max_distance);

// HF DeBERTa-v2's make_log_bucket_position for one relative position, reproducing torch's
// float32 arithmetic: sign; mid = bucket_size / 2; abs_pos = mid - 1 inside (-mid, mid), else
// |rel|; log_pos = ceil(log(float(abs_pos) / mid) / log(float((max_position - 1) / mid)) *
// (mid - 1)) + mid, every step rounded to float32 (the logs correctly rounded); the bucket is
// rel where abs_pos <= mid, else log_pos * sign, truncated to an integer. Not clamped (HF
// does not clamp either). nullopt where that float value is not finite or past INT32.
// REQUIRES: ValidateDebertaSpec OK with both fields > 0.
std::optional<int32_t> DebertaLogBucket(int64_t relative_position, int32_t bucket_size,
                                        int32_t max_position);

// --- Kernels. Each validates its arguments again (cheaply) and returns INVALID_ARGUMENT on
// misuse; beyond the outputs they allocate O(query_length + key_length), never O(q*k). ----
// The adds take an `implementation` (kernel_impl.h; no oneDNN code, so kOneDnn is kAuto's
// choice): AVX-512 rows for 16-bit scores, AVX2 rows for float32 (memory-bound) and for the
// Shaw dot products, scalar at a scalar ISA. Every ISA's adds round score + bias once, as
// the scalar rows do; the Shaw dot products sum in an order of their ISA only where the
// table is too large to transpose (see ShawQueryTerm).

// out: [num_heads, query_length, key_length] float32; each value is the float64 bias
// rounded once.
absl::Status BuildAlibiBias(const AlibiSpec& spec, const BiasGeometry& geom, float* out);
// scores [batch, num_heads, q, k] += bias, in the scores' dtype (float32 add, one rounding).
absl::Status AddAlibiBias(const AlibiSpec& spec, const BiasGeometry& geom, const TensorView& scores,
                          KernelImpl implementation = KernelImpl::kAuto);

// out: [query_length, key_length] int32 bucket ids.
absl::Status BuildT5Buckets(const T5Spec& spec, const BiasGeometry& geom, int32_t* out);
// table: [num_buckets, heads] float32 row-major; out: [heads, q, k], out[h,i,j] =
// table[bucket(i,j), h].
absl::Status BuildT5Bias(const T5Spec& spec, const BiasGeometry& geom, const float* table,
                         int32_t heads, float* out);
// scores [batch, heads, q, k] += table[bucket, h], in the scores' dtype.
absl::Status AddT5Bias(const T5Spec& spec, const BiasGeometry& geom, const float* table,
                       int32_t heads, const TensorView& scores,
                       KernelImpl implementation = KernelImpl::kAuto);

// out: [query_length, key_length] int32 Shaw indices in [0, 2k].
absl::Status BuildShawIndex(const ShawSpec& spec, const BiasGeometry& geom, int32_t* out);
// table: [2k + 1, dim] float32; out: [q, k, dim] float32, out[i, j] = table[index[i][j]].
absl::Status BuildShawEmbeddings(const ShawSpec& spec, const BiasGeometry& geom, const float* table,
                                 int64_t dim, float* out);
// The query term sum_d query[b, h, i, d] * table[index[i][j], d] for query [batch, heads,
// q, dim] (any float dtype) and table [2k + 1, dim] float32. For each query row it takes the
// dot products with the table rows that row's keys reach (at most min(2k + 1, key_length)),
// once each, in float32 with FMA, then gathers them along the keys. `out` is [batch, heads,
// q, k] in any float dtype: add_to_out false writes the term rounded once to out's dtype;
// true adds it to out's values (scores) in float32 and rounds once. Beyond the output it
// allocates O(min(2k + 1, k) + k + dim) per thread and, at a vector ISA, a transposed copy
// of the table rows the request reaches (at most 4 MiB; past that the rows are read as
// they lie). Through that copy each dot product sums over d in order with FMA, as the
// scalar rows do, so the vector ISAs give the scalar result bit for bit.
absl::Status ShawQueryTerm(const ShawSpec& spec, const BiasGeometry& geom, const float* table,
                           int64_t dim, const ConstTensorView& query, const TensorView& out,
                           bool add_to_out, KernelImpl implementation = KernelImpl::kAuto);
// out: [query_length, key_length] int32, the relative position query_pos - key_pos, or its
// log bucket when spec.Bucketed(). The bucketed rows of recent (spec, geometry) pairs are
// kept (at most 8 rows of at most 65,536 entries), so repeat calls only copy them.
absl::Status BuildDebertaPositions(const DebertaSpec& spec, const BiasGeometry& geom, int32_t* out);

// --- Plain per-element versions of the formulas, for tests. ------------------------------

// The ALiBi bias of (head h, query i, key j), float64, straight from the definition.
double AlibiBiasReference(const AlibiSpec& spec, const BiasGeometry& geom, int32_t h, int64_t i,
                          int64_t j);
// The T5 bucket of (query i, key j).
int32_t T5BucketReference(const T5Spec& spec, const BiasGeometry& geom, int64_t i, int64_t j);

}  // namespace posenc
