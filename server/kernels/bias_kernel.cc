#include "server/kernels/bias_kernel.h"

// GCC 12 reports the _mm512_undefined_* operands inside AVX-512 intrinsics as "may be used
// uninitialized" (GCC bug 105593) wherever they inline.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/primitive_cache.h"
#include "server/kernels/simd_convert.h"
#include "server/kernels/threads.h"

namespace posenc {
namespace {

// Debian's abseil is built without std::string_view interop in StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Every bias here depends on (head, key - query) only. Across a request, e = j - (offset + i)
// runs over [-(offset + q - 1), k - 1 - offset]: q + k - 1 values. Each kernel therefore fills
// one per-head row of that length, indexed by e + offset + q - 1, and every output row is a
// contiguous slice of it: query i reads from index q - 1 - i. That keeps the float64 math to
// q + k - 1 evaluations per head and the O(q*k) part a plain copy or add that vectorises.
int64_t RelativeRowLength(const BiasGeometry& g) { return g.query_length + g.key_length - 1; }
int64_t RelativeOffsetAt(const BiasGeometry& g, int64_t t) {
  return t - (g.query_offset + g.query_length - 1);
}

// Outputs of at least this many bytes are written with non-temporal (streaming) stores: a
// write-only output far larger than the caches gains nothing from being cached, and plain
// stores would first read every destination line (read-for-ownership), doubling the DRAM
// traffic. Smaller outputs stay cached for the caller to read back: 32 MiB is the last-level
// cache one core of a current server part sees (an EPYC CCD; a Xeon socket has more), and a
// 16 MiB build streamed to DRAM ran at 0.37 of plain stores that stayed in it.
constexpr size_t kStreamingStoreBytes = size_t{32} << 20;

// Copies n 4-byte elements from src (any alignment) to dst with streaming stores: the
// unaligned head (up to the first 16-byte boundary of dst) and the tail with plain stores,
// the rest 16 bytes at a time (SSE2, part of x86-64). The caller fences (_mm_sfence) before
// the data is read by another thread.
void StreamCopy32(const void* src, void* dst, int64_t n) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  size_t bytes = static_cast<size_t>(n) * 4;
  if ((reinterpret_cast<uintptr_t>(d) & 3) != 0) {  // not element aligned: no streaming
    std::memcpy(d, s, bytes);
    return;
  }
  const size_t head =
      std::min(bytes, static_cast<size_t>((16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15));
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  }
  std::memcpy(d + i, s + i, bytes - i);
}

// out[i, :] = rel[q-1-i : q-1-i+k] for the queries i in [first, last). out: [q, k]; T is 4
// bytes wide. stream: write with streaming stores, then fence (this thread's stores).
template <typename T>
void CopyRelativeRowRange(const T* rel, const BiasGeometry& g, T* out, int64_t first, int64_t last,
                          bool stream) {
  static_assert(sizeof(T) == 4);
  const int64_t q = g.query_length, k = g.key_length;
  for (int64_t i = first; i < last; ++i) {  // query
    if (stream) {
      StreamCopy32(rel + (q - 1 - i), out + i * k, k);
    } else {
      std::memcpy(out + i * k, rel + (q - 1 - i), static_cast<size_t>(k) * sizeof(T));
    }
  }
  if (stream) _mm_sfence();
}

// Every query row of out [q, k] as above, streamed from kStreamingStoreBytes up, split
// across `threads` threads (one core writes at a fraction of the memory bandwidth; the
// caller's KernelThreadLease for the output's size says how many).
template <typename T>
void CopyRelativeRows(const T* rel, const BiasGeometry& g, T* out, int threads) {
  const size_t out_bytes = static_cast<size_t>(g.query_length * g.key_length) * sizeof(T);
  ParallelFor(threads, g.query_length, [&](int64_t first, int64_t last) {
    CopyRelativeRowRange(rel, g, out, first, last, out_bytes >= kStreamingStoreBytes);
  });
}

// The output bytes of a [q, k] build of 4-byte ids.
size_t IdBytes(const BiasGeometry& g) {
  return static_cast<size_t>(g.query_length * g.key_length) * 4;
}

// row[0..n) += bias[0..n) in the row's dtype: float32 adds, one rounding, bit-identical
// to ToFloat32 / add / FromFloat32. One function per dtype and ISA; 16-bit rows are
// converted in registers (simd_convert.h), in one pass. The kConstant functions add
// bias[0] to every element (the same sums as a bias row of n copies of it).
using AddBiasRowFn = void (*)(void* row, const float* bias, int64_t n);

// bias[j], or bias[0] for a constant bias.
template <bool kConstant>
inline float BiasAt(const float* bias, int64_t j) {
  return kConstant ? bias[0] : bias[j];
}

template <DType kType, bool kConstant = false>
void AddBiasRowScalar(void* row, const float* bias, int64_t n) {
  if constexpr (kType == DType::kFloat32) {
    float* r = static_cast<float*>(row);
    for (int64_t j = 0; j < n; ++j) r[j] += BiasAt<kConstant>(bias, j);  // key
  } else {
    uint16_t* r = static_cast<uint16_t*>(row);
    for (int64_t j = 0; j < n; ++j) {  // key
      if constexpr (kType == DType::kFloat16) {
        r[j] = FloatToHalf(HalfToFloat(r[j]) + BiasAt<kConstant>(bias, j));
      } else {
        r[j] = FloatToBFloat16(BFloat16ToFloat(r[j]) + BiasAt<kConstant>(bias, j));
      }
    }
  }
}

template <DType kType>
__attribute__((target("avx2,f16c"))) inline __m256 Load8(const void* row, int64_t j) {
  if constexpr (kType == DType::kFloat32)
    return _mm256_loadu_ps(static_cast<const float*>(row) + j);
  if constexpr (kType == DType::kFloat16)
    return simd::LoadF16x8(static_cast<const uint16_t*>(row) + j);
  return simd::LoadBf16x8(static_cast<const uint16_t*>(row) + j);
}

template <DType kType>
__attribute__((target("avx2,f16c"))) inline void Store8(void* row, int64_t j, __m256 v) {
  if constexpr (kType == DType::kFloat32) {
    _mm256_storeu_ps(static_cast<float*>(row) + j, v);
  } else if constexpr (kType == DType::kFloat16) {
    simd::StoreF16x8(static_cast<uint16_t*>(row) + j, v);
  } else {
    simd::StoreBf16x8(static_cast<uint16_t*>(row) + j, v);
  }
}

template <bool kConstant>
__attribute__((target("avx2"))) inline __m256 Bias8(const float* bias, int64_t j) {
  return kConstant ? _mm256_broadcast_ss(bias) : _mm256_loadu_ps(bias + j);
}

// 32 lanes per step: four independent loads in flight, as the roofline pass has.
template <DType kType, bool kConstant = false>
__attribute__((target("avx2,f16c"))) void AddBiasRowAvx2(void* row, const float* bias, int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {  // key
    const __m256 r0 = _mm256_add_ps(Load8<kType>(row, j), Bias8<kConstant>(bias, j));
    const __m256 r1 = _mm256_add_ps(Load8<kType>(row, j + 8), Bias8<kConstant>(bias, j + 8));
    const __m256 r2 = _mm256_add_ps(Load8<kType>(row, j + 16), Bias8<kConstant>(bias, j + 16));
    const __m256 r3 = _mm256_add_ps(Load8<kType>(row, j + 24), Bias8<kConstant>(bias, j + 24));
    Store8<kType>(row, j, r0);
    Store8<kType>(row, j + 8, r1);
    Store8<kType>(row, j + 16, r2);
    Store8<kType>(row, j + 24, r3);
  }
  for (; j + 8 <= n; j += 8) {
    Store8<kType>(row, j, _mm256_add_ps(Load8<kType>(row, j), Bias8<kConstant>(bias, j)));
  }
  const size_t elem = DTypeSize(kType);
  AddBiasRowScalar<kType, kConstant>(static_cast<char*>(row) + j * elem,
                                     kConstant ? bias : bias + j, n - j);
}

// 16-bit scores, 16 lanes per vector, the tail under a mask. bfloat16 rounds with
// VCVTNEPS2BF16 where the CPU has AVX512_BF16 (NarrowBf16x16Native), else in integer ops.
#define POSENC_AVX512_BIAS __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

template <DType kType, bool kNative, bool kConstant>
POSENC_AVX512_BIAS inline void AddBias16(void* row, const float* bias, int64_t j, __mmask16 m) {
  const __m512 b = kConstant ? _mm512_set1_ps(bias[0]) : _mm512_maskz_loadu_ps(m, bias + j);
  uint16_t* r = static_cast<uint16_t*>(row) + j;
  const __m256i h = _mm256_maskz_loadu_epi16(m, r);
  __m256i out;
  if constexpr (kType == DType::kFloat16) {
    out = simd::NarrowF16x16(_mm512_add_ps(simd::WidenF16x16(h), b));
  } else if constexpr (kNative) {
    out = simd::NarrowBf16x16Native(_mm512_add_ps(simd::WidenBf16x16(h), b));
  } else {
    out = simd::NarrowBf16x16(_mm512_add_ps(simd::WidenBf16x16(h), b));
  }
  _mm256_mask_storeu_epi16(r, m, out);
}

template <DType kType, bool kNative, bool kConstant = false>
POSENC_AVX512_BIAS void AddBiasRowAvx512(void* row, const float* bias, int64_t n) {
  const __mmask16 all = 0xffff;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {  // key
    AddBias16<kType, kNative, kConstant>(row, bias, j, all);
    AddBias16<kType, kNative, kConstant>(row, bias, j + 16, all);
  }
  for (; j < n; j += 16) {
    const int64_t left = n - j;
    AddBias16<kType, kNative, kConstant>(
        row, bias, j, left >= 16 ? all : static_cast<__mmask16>((1u << left) - 1));
  }
}
#undef POSENC_AVX512_BIAS

// REQUIRES: dtype is FLOAT16 or BFLOAT16.
template <bool kNative, bool kConstant>
AddBiasRowFn Avx512BiasRow(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return AddBiasRowAvx512<DType::kFloat16, kNative, kConstant>;
    default: return AddBiasRowAvx512<DType::kBFloat16, kNative, kConstant>;
  }
}

// The row function (kConstant: the constant-bias one) for `dtype` and `implementation`
// (bias_kernel.h): AVX-512 for 16-bit scores where the ISA bound allows it (the conversions
// are the work), AVX2 for float32 (memory-bound either way), scalar at a scalar bound.
template <bool kConstant = false>
AddBiasRowFn BiasRowFor(DType dtype, KernelImpl implementation) {
  const KernelImpl isa = IsaBoundFor(implementation);
  if (isa == KernelImpl::kAvx512 && dtype != DType::kFloat32) {
    return simd::HasAvx512Bf16() ? Avx512BiasRow<true, kConstant>(dtype)
                                 : Avx512BiasRow<false, kConstant>(dtype);
  }
  if (isa == KernelImpl::kAvx2 || isa == KernelImpl::kAvx512) {
    switch (dtype) {
      case DType::kFloat16: return AddBiasRowAvx2<DType::kFloat16, kConstant>;
      case DType::kBFloat16: return AddBiasRowAvx2<DType::kBFloat16, kConstant>;
      default: return AddBiasRowAvx2<DType::kFloat32, kConstant>;
    }
  }
  switch (dtype) {
    case DType::kFloat16: return AddBiasRowScalar<DType::kFloat16, kConstant>;
    case DType::kBFloat16: return AddBiasRowScalar<DType::kBFloat16, kConstant>;
    default: return AddBiasRowScalar<DType::kFloat32, kConstant>;
  }
}

// scores[i, :] += rel[q-1-i : ...] for every query i, in the scores' dtype. block: [q, k].
void AddRelativeRows(const float* rel, const BiasGeometry& g, DType dtype, void* block,
                     AddBiasRowFn add_row) {
  const int64_t q = g.query_length, k = g.key_length;
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(dtype);
  char* bytes = static_cast<char*>(block);
  for (int64_t i = 0; i < q; ++i) add_row(bytes + i * row_bytes, rel + (q - 1 - i), k);  // query
}

// ALiBi of head h over all relative offsets: rel[t] for e = RelativeOffsetAt(t).
void FillAlibiRelativeRow(const AlibiSpec& spec, const BiasGeometry& g, int32_t h, float* rel) {
  const double slope = AlibiSlope(h, spec.num_heads, spec.max_bias);
  const int64_t n = RelativeRowLength(g);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t e = RelativeOffsetAt(g, t);  // key - query
    double bias;
    if (e > 0) {
      bias = spec.causal ? -std::numeric_limits<double>::infinity()
                         : -(slope * static_cast<double>(e));
    } else {
      bias = slope * static_cast<double>(e);
    }
    // + 0.0 turns the -0 at e == 0 into +0, so the bias tensor has no negative zeros.
    rel[t] = static_cast<float>(bias + 0.0);
  }
}

void FillT5RelativeBuckets(const T5Spec& spec, const BiasGeometry& g, int32_t* buckets) {
  const int64_t n = RelativeRowLength(g);
  for (int64_t t = 0; t < n; ++t) {
    buckets[t] = T5RelativeBucket(RelativeOffsetAt(g, t), spec.bidirectional, spec.num_buckets,
                                  spec.max_distance);
  }
}

absl::Status ValidateAlibiCall(const AlibiSpec& spec, const BiasGeometry& geom) {
  RETURN_IF_ERROR(ValidateAlibiSpec(spec));
  return ValidateBiasGeometry(geom);
}

absl::Status ValidateT5Call(const T5Spec& spec, const BiasGeometry& geom, const float* table,
                            int32_t heads) {
  RETURN_IF_ERROR(ValidateT5Spec(spec));
  RETURN_IF_ERROR(ValidateBiasGeometry(geom));
  if (table == nullptr) return absl::InvalidArgumentError("t5.table has no data");
  if (heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("t5.table has ", heads, " heads; it must have >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAlibiSpec(const AlibiSpec& spec) {
  if (spec.num_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("alibi.num_heads is ", spec.num_heads, "; it must be >= 1"));
  }
  if (!std::isfinite(spec.max_bias) || spec.max_bias <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("alibi.max_bias is ", spec.max_bias,
                                                   "; it must be a finite number > 0 (default 8)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateT5Spec(const T5Spec& spec) {
  // HF halves num_buckets when bidirectional, then exact buckets are half of the rest; with
  // max_exact == 0 it would divide by zero, so both halvings must leave at least 1.
  const int32_t min_buckets = spec.bidirectional ? 4 : 2;
  if (spec.num_buckets < min_buckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("t5.num_buckets is ", spec.num_buckets, "; it must be >= ", min_buckets,
                     spec.bidirectional ? " when bidirectional" : " when not bidirectional"));
  }
  const int32_t max_exact = (spec.bidirectional ? spec.num_buckets / 2 : spec.num_buckets) / 2;
  if (spec.max_distance <= max_exact) {
    return absl::InvalidArgumentError(
        absl::StrCat("t5.max_distance is ", spec.max_distance, "; it must be > ", max_exact,
                     " (the exact-bucket count t5.num_buckets/", spec.bidirectional ? 4 : 2,
                     ") for t5.num_buckets ", spec.num_buckets));
  }
  return absl::OkStatus();
}

absl::Status ValidateBiasGeometry(const BiasGeometry& geom) {
  if (geom.query_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("query_length is ", geom.query_length, "; it must be >= 1"));
  }
  if (geom.key_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("key_length is ", geom.key_length, "; it must be >= 1"));
  }
  if (geom.key_length > kMaxBiasPosition) {
    return absl::InvalidArgumentError(
        absl::StrCat("key_length is ", geom.key_length, "; it must be <= ", kMaxBiasPosition));
  }
  if (geom.query_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "query_offset is ", geom.query_offset,
        "; it must be >= 0 (it defaults to key_length - query_length = ", geom.key_length, " - ",
        geom.query_length, ")"));
  }
  if (geom.query_length > kMaxBiasPosition ||
      geom.query_offset > kMaxBiasPosition - geom.query_length) {
    return absl::InvalidArgumentError(absl::StrCat("query_offset + query_length is ",
                                                   geom.query_offset, " + ", geom.query_length,
                                                   "; it must be <= ", kMaxBiasPosition));
  }
  return absl::OkStatus();
}

absl::Status ValidateT5TableShape(const T5Spec& spec, absl::Span<const int64_t> table_shape,
                                  std::string_view field) {
  if (table_shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        Sv(field), " has shape ", ShapeString(table_shape), "; it must be [num_buckets, heads]"));
  }
  if (table_shape[0] != spec.num_buckets) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(field), ".shape[0] is ", table_shape[0],
                                                   "; it must equal t5.num_buckets (",
                                                   spec.num_buckets, ")"));
  }
  if (table_shape[1] < 1 || table_shape[1] > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(field), ".shape[1] (heads) is ",
                                                   table_shape[1], "; it must be in [1, 2^31)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateScores(const BiasGeometry& geom, int64_t heads, std::string_view heads_field,
                            const TensorView& scores) {
  if (!IsFloat(scores.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("scores.dtype is ", DTypeName(scores.dtype),
                                                   "; it must be FLOAT32, FLOAT16 or BFLOAT16"));
  }
  if (scores.shape.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores has shape ", ShapeString(scores.shape),
                     "; it must be [batch, heads, query_length, key_length]"));
  }
  if (scores.shape[0] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores.shape[0] (batch) is ", scores.shape[0], "; it must be >= 1"));
  }
  if (scores.shape[1] != heads) {
    return absl::InvalidArgumentError(absl::StrCat("scores.shape[1] (heads) is ", scores.shape[1],
                                                   "; it must equal ", Sv(heads_field), " (", heads,
                                                   ")"));
  }
  if (scores.shape[2] != geom.query_length) {
    return absl::InvalidArgumentError(absl::StrCat("scores.shape[2] is ", scores.shape[2],
                                                   "; it must equal query_length (",
                                                   geom.query_length, ")"));
  }
  if (scores.shape[3] != geom.key_length) {
    return absl::InvalidArgumentError(absl::StrCat("scores.shape[3] is ", scores.shape[3],
                                                   "; it must equal key_length (", geom.key_length,
                                                   ")"));
  }
  ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(scores.shape, "scores"));
  if (n > 0 && scores.data == nullptr) return absl::InvalidArgumentError("scores has no data");
  return absl::OkStatus();
}

absl::Status ValidateShawSpec(const ShawSpec& spec) {
  if (spec.max_relative_position < 1 || spec.max_relative_position > kMaxShawRelativePosition) {
    return absl::InvalidArgumentError(
        absl::StrCat("shaw.max_relative_position is ", spec.max_relative_position,
                     "; it must be in [1, ", kMaxShawRelativePosition, "]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateShawTableShape(const ShawSpec& spec, absl::Span<const int64_t> table_shape,
                                    std::string_view field) {
  const int64_t rows = 2 * int64_t{spec.max_relative_position} + 1;
  if (table_shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        Sv(field), " has shape ", ShapeString(table_shape), "; it must be [2k + 1, d]"));
  }
  if (table_shape[0] != rows) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(field), ".shape[0] is ", table_shape[0],
                                                   "; it must be 2 * shaw.max_relative_position",
                                                   " + 1 (", rows, ")"));
  }
  if (table_shape[1] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(field), ".shape[1] (d) is ", table_shape[1], "; it must be >= 1"));
  }
  return absl::OkStatus();
}

namespace {

// torch.log(torch.tensor((max_position - 1) / mid)): Python's float64 quotient stored as
// float32, its log correctly rounded to float32. The same for every position of a spec.
float DebertaLogRange(int64_t mid, int32_t max_position) {
  const float range =
      static_cast<float>(static_cast<double>(max_position - 1) / static_cast<double>(mid));
  return static_cast<float>(std::log(static_cast<double>(range)));
}

// HF's log_pos before the sign, in torch's float32 steps (see DebertaLogBucket).
// REQUIRES: abs_pos > mid >= 1; log_range = DebertaLogRange(mid, max_position).
float DebertaLogPosition(int64_t abs_pos, int64_t mid, float log_range) {
  // abs_pos / mid: torch true-divides an int64 tensor by a Python int in float32.
  const float ratio = static_cast<float>(abs_pos) / static_cast<float>(mid);
  const float log_ratio = static_cast<float>(std::log(static_cast<double>(ratio)));
  const float scaled = log_ratio / log_range * static_cast<float>(mid - 1);
  return std::ceil(scaled) + static_cast<float>(mid);
}

// DebertaLogBucket with mid = bucket_size / 2 and its log range given.
std::optional<int32_t> DebertaBucketOf(int64_t rel, int64_t mid, float log_range) {
  const int64_t abs_pos = (rel < mid && rel > -mid) ? mid - 1 : (rel < 0 ? -rel : rel);
  // where(abs_pos <= mid, rel.type_as(log_pos), ...): rel goes through float32 there, which
  // rounds it once |rel| > 2^24 (buckets over 2^25); |rel| <= mid < 2^30 fits int32 after.
  if (abs_pos <= mid) return static_cast<int32_t>(static_cast<float>(rel));
  const float sign = rel > 0 ? 1.0f : -1.0f;
  const float bucket = DebertaLogPosition(abs_pos, mid, log_range) * sign;
  // A zero or negative log range (max_position <= mid + 1) can give inf, NaN or huge values
  // that torch's .long() would not turn into a meaningful id.
  if (!(std::fabs(bucket) < 2147483648.0f)) return std::nullopt;
  // .to(torch.long) truncates toward zero; the value is integral already.
  return static_cast<int32_t>(bucket);
}

}  // namespace

absl::Status ValidateDebertaSpec(const DebertaSpec& spec, const BiasGeometry& geom) {
  if (!spec.Bucketed()) {
    // The largest |query_pos - key_pos| of the request.
    const int64_t farthest =
        std::max(geom.query_offset + geom.query_length - 1, geom.key_length - 1);
    constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
    if (farthest > kInt32Max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "query_offset + query_length and key_length reach relative position ", farthest,
          "; without deberta buckets the INT32 output holds at most ", kInt32Max));
    }
    return absl::OkStatus();
  }
  // HF divides by mid = position_buckets // 2 (Python raises ZeroDivisionError at 0).
  if (spec.position_buckets < 2) {
    return absl::InvalidArgumentError(absl::StrCat("deberta.position_buckets is ",
                                                   spec.position_buckets,
                                                   "; it must be >= 2 (or <= 0 for no buckets)"));
  }
  return absl::OkStatus();
}

std::optional<int32_t> DebertaLogBucket(int64_t relative_position, int32_t bucket_size,
                                        int32_t max_position) {
  const int64_t mid = bucket_size / 2;
  return DebertaBucketOf(relative_position, mid, DebertaLogRange(mid, max_position));
}

double AlibiSlope(int32_t h, int32_t num_heads, double max_bias) {
  // n: the largest power of two <= num_heads.
  int32_t n = 1;
  while (n <= num_heads / 2) n *= 2;
  if (h < n) return std::exp2(-max_bias / n * (h + 1));
  return std::exp2(-max_bias / (2.0 * n) * (2.0 * (h - n) + 1));
}

std::vector<double> AlibiSlopes(int32_t num_heads, double max_bias) {
  std::vector<double> slopes(static_cast<size_t>(std::max(num_heads, 0)));
  for (int32_t h = 0; h < num_heads; ++h) slopes[h] = AlibiSlope(h, num_heads, max_bias);
  return slopes;
}

int32_t T5RelativeBucket(int64_t relative_position, bool bidirectional, int32_t num_buckets,
                         int32_t max_distance) {
  int32_t buckets = num_buckets;
  int32_t bucket = 0;
  int64_t distance;
  if (bidirectional) {
    buckets /= 2;
    if (relative_position > 0) bucket += buckets;
    distance = relative_position < 0 ? -relative_position : relative_position;
  } else {
    distance = relative_position < 0 ? -relative_position : 0;
  }
  const int32_t max_exact = buckets / 2;
  if (distance < max_exact) return bucket + static_cast<int32_t>(distance);

  // HF computes this in torch float32: log(float(d) / max_exact) / float(log(max_distance /
  // max_exact)) * (buckets - max_exact), truncated. Each step is rounded to float32 here in
  // the same order, the log correctly rounded, so bucket edges truncate the same way.
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float log_ratio = static_cast<float>(std::log(static_cast<double>(ratio)));
  const float log_range = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float span = static_cast<float>(buckets - max_exact);
  const float scaled = log_ratio / log_range * span;
  // Compare before converting: a large distance can exceed int64 range, and trunc(x) >= span
  // exactly when x >= span because span is an integer.
  if (!(scaled < span)) return bucket + buckets - 1;
  const int64_t large = max_exact + static_cast<int64_t>(scaled);
  return bucket + static_cast<int32_t>(std::min<int64_t>(large, buckets - 1));
}

namespace {

// The bias of `heads` heads, each from its relative row (fill_row(h, rel) fills one):
// written as [heads, q, k] into `out`, or added to scores [batch, heads, q, k]. The only
// difference between ALiBi and T5 is how a row is filled.
template <typename FillRow>
void BuildBiasHeads(const BiasGeometry& geom, int32_t heads, float* out, const FillRow& fill_row) {
  const int64_t head_size = geom.query_length * geom.key_length;
  const size_t out_bytes = static_cast<size_t>(head_size * heads) * 4;
  const bool stream = out_bytes >= kStreamingStoreBytes;
  const KernelThreadLease lease(out_bytes);
  ParallelFor(lease.threads(), heads, [&](int64_t first, int64_t last) {
    std::vector<float> rel(static_cast<size_t>(RelativeRowLength(geom)));
    for (auto h = static_cast<int32_t>(first); h < last; ++h) {  // head
      fill_row(h, rel.data());
      CopyRelativeRowRange(rel.data(), geom, out + h * head_size, 0, geom.query_length, stream);
    }
  });
}

template <typename FillRow>
void AddBiasHeads(const BiasGeometry& geom, int32_t heads, const TensorView& scores,
                  KernelImpl implementation, const FillRow& fill_row) {
  const int64_t batch = scores.shape[0];
  const size_t block_bytes =
      static_cast<size_t>(geom.query_length * geom.key_length) * DTypeSize(scores.dtype);
  char* base = static_cast<char*>(scores.data);
  const AddBiasRowFn add_row = BiasRowFor(scores.dtype, implementation);
  const KernelThreadLease lease(WorkBytes(scores.NumElements()));
  ParallelFor(lease.threads(), heads, [&](int64_t first, int64_t last) {
    std::vector<float> rel(static_cast<size_t>(RelativeRowLength(geom)));
    for (auto h = static_cast<int32_t>(first); h < last; ++h) {  // head
      fill_row(h, rel.data());
      for (int64_t b = 0; b < batch; ++b) {  // batch
        void* block = base + static_cast<size_t>(b * heads + h) * block_bytes;
        AddRelativeRows(rel.data(), geom, scores.dtype, block, add_row);
      }
    }
  });
}

// T5's row for head h: the table's entry for each relative position's bucket.
struct T5RowFill {
  const std::vector<int32_t>& buckets;
  const float* table;
  int32_t heads;
  void operator()(int32_t h, float* rel) const {
    for (size_t t = 0; t < buckets.size(); ++t) {
      rel[t] = table[static_cast<int64_t>(buckets[t]) * heads + h];
    }
  }
};

std::vector<int32_t> T5RowBuckets(const T5Spec& spec, const BiasGeometry& geom) {
  std::vector<int32_t> buckets(static_cast<size_t>(RelativeRowLength(geom)));
  FillT5RelativeBuckets(spec, geom, buckets.data());
  return buckets;
}

}  // namespace

absl::Status BuildAlibiBias(const AlibiSpec& spec, const BiasGeometry& geom, float* out) {
  RETURN_IF_ERROR(ValidateAlibiCall(spec, geom));
  if (out == nullptr) return absl::InvalidArgumentError("output buffer is null");
  BuildBiasHeads(geom, spec.num_heads, out,
                 [&](int32_t h, float* rel) { FillAlibiRelativeRow(spec, geom, h, rel); });
  return absl::OkStatus();
}

absl::Status AddAlibiBias(const AlibiSpec& spec, const BiasGeometry& geom, const TensorView& scores,
                          KernelImpl implementation) {
  RETURN_IF_ERROR(ValidateAlibiCall(spec, geom));
  RETURN_IF_ERROR(ValidateScores(geom, spec.num_heads, "alibi.num_heads", scores));
  AddBiasHeads(geom, spec.num_heads, scores, implementation,
               [&](int32_t h, float* rel) { FillAlibiRelativeRow(spec, geom, h, rel); });
  return absl::OkStatus();
}

absl::Status BuildT5Buckets(const T5Spec& spec, const BiasGeometry& geom, int32_t* out) {
  RETURN_IF_ERROR(ValidateT5Spec(spec));
  RETURN_IF_ERROR(ValidateBiasGeometry(geom));
  if (out == nullptr) return absl::InvalidArgumentError("output buffer is null");
  const std::vector<int32_t> rel = T5RowBuckets(spec, geom);
  const KernelThreadLease lease(IdBytes(geom));
  CopyRelativeRows(rel.data(), geom, out, lease.threads());
  return absl::OkStatus();
}

absl::Status BuildT5Bias(const T5Spec& spec, const BiasGeometry& geom, const float* table,
                         int32_t heads, float* out) {
  RETURN_IF_ERROR(ValidateT5Call(spec, geom, table, heads));
  if (out == nullptr) return absl::InvalidArgumentError("output buffer is null");
  const std::vector<int32_t> buckets = T5RowBuckets(spec, geom);
  BuildBiasHeads(geom, heads, out, T5RowFill{buckets, table, heads});
  return absl::OkStatus();
}

absl::Status AddT5Bias(const T5Spec& spec, const BiasGeometry& geom, const float* table,
                       int32_t heads, const TensorView& scores, KernelImpl implementation) {
  RETURN_IF_ERROR(ValidateT5Call(spec, geom, table, heads));
  RETURN_IF_ERROR(ValidateScores(geom, heads, "t5.table.shape[1]", scores));
  const std::vector<int32_t> buckets = T5RowBuckets(spec, geom);
  AddBiasHeads(geom, heads, scores, implementation, T5RowFill{buckets, table, heads});
  return absl::OkStatus();
}

namespace {

// clamp(e, -k, k) + k: the Shaw index of relative position e = key_pos - query_pos.
int32_t ShawIndexOf(int64_t e, int32_t k) {
  return static_cast<int32_t>(std::clamp<int64_t>(e, -k, k) + k);
}

absl::Status ValidateShawCall(const ShawSpec& spec, const BiasGeometry& geom) {
  RETURN_IF_ERROR(ValidateShawSpec(spec));
  return ValidateBiasGeometry(geom);
}

// out[r - first] = dot(q, table[r]) for r in [first, last], float32 with FMA. One function
// per ISA: the AVX2 one takes four table rows per pass over q (its loads shared), eight lanes
// of d at a time, the d tail in scalar FMAs.
using ShawDotsFn = void (*)(const float* q, const float* table, int64_t dim, int64_t first,
                            int64_t last, float* out);

void ShawDotsScalar(const float* q, const float* table, int64_t dim, int64_t first, int64_t last,
                    float* out) {
  for (int64_t r = first; r <= last; ++r) {  // relative index
    const float* row = table + r * dim;
    float acc = 0.0f;
    for (int64_t d = 0; d < dim; ++d) acc = std::fma(q[d], row[d], acc);  // feature
    out[r - first] = acc;
  }
}

__attribute__((target("avx2,fma"))) inline float HorizontalSum(__m256 v) {
  const __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

__attribute__((target("avx2,fma"))) void ShawDotsAvx2(const float* q, const float* table,
                                                      int64_t dim, int64_t first, int64_t last,
                                                      float* out) {
  const int64_t body = dim - dim % 8;
  int64_t r = first;
  for (; r + 3 <= last; r += 4) {  // relative index, four rows per pass
    const float* t0 = table + r * dim;
    const float* t1 = t0 + dim;
    const float* t2 = t1 + dim;
    const float* t3 = t2 + dim;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t d = 0; d < body; d += 8) {  // feature
      const __m256 x = _mm256_loadu_ps(q + d);
      a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(t0 + d), a0);
      a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(t1 + d), a1);
      a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(t2 + d), a2);
      a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(t3 + d), a3);
    }
    float s0 = HorizontalSum(a0), s1 = HorizontalSum(a1), s2 = HorizontalSum(a2),
          s3 = HorizontalSum(a3);
    for (int64_t d = body; d < dim; ++d) {
      s0 = std::fma(q[d], t0[d], s0);
      s1 = std::fma(q[d], t1[d], s1);
      s2 = std::fma(q[d], t2[d], s2);
      s3 = std::fma(q[d], t3[d], s3);
    }
    out[r - first] = s0;
    out[r - first + 1] = s1;
    out[r - first + 2] = s2;
    out[r - first + 3] = s3;
  }
  for (; r <= last; ++r) {
    const float* t0 = table + r * dim;
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t d = 0; d < body; d += 8) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(t0 + d), a0);
    }
    float s0 = HorizontalSum(a0);
    for (int64_t d = body; d < dim; ++d) s0 = std::fma(q[d], t0[d], s0);
    out[r - first] = s0;
  }
}

// Table rows [lo, lo + n) as columns: at[d * stride + (r - lo)] = table[r * dim + d], the
// columns from n to stride (a multiple of 8, at least 32 past n: a pass reads two whole
// vectors of up to 16 lanes) zero. A query row's dot products with consecutive table rows
// are then consecutive lanes: one broadcast of q[d] and one FMA per vector of them, no
// horizontal sums, each lane summing over d in order with FMA exactly as ShawDotsScalar does
// (so bit-identical to it).
struct ShawColumns {
  int64_t lo = 0, n = 0, stride = 0;
  std::vector<float> at;
};

// The columns of the table rows [lo, hi] a request reaches, or none (n == 0) where they
// would take more than kMaxShawColumnFloats: a long reach of a wide table, which the row
// dots serve without the copy.
constexpr int64_t kMaxShawColumnFloats = int64_t{1} << 20;

ShawColumns MakeShawColumns(const float* table, int64_t dim, int64_t lo, int64_t hi) {
  ShawColumns c;
  const int64_t n = hi - lo + 1;
  const int64_t stride = (n + 7) / 8 * 8 + 32;
  if (stride * dim > kMaxShawColumnFloats) return c;
  c.lo = lo;
  c.n = n;
  c.stride = stride;
  c.at.assign(static_cast<size_t>(stride * dim), 0.0f);
  for (int64_t r = 0; r < n; ++r) {  // table row lo + r
    for (int64_t d = 0; d < dim; ++d)
      c.at[static_cast<size_t>(d * stride + r)] = table[(lo + r) * dim + d];
  }
  return c;
}

// Query rows per block of dot products, at most: each load of a column vector serves all
// of them. The AVX2 passes take 4 rows of 2 vectors (8 accumulators of 16 registers), the
// AVX-512 ones 8 rows of 2 (16 of 32), which also wastes fewer lanes on the block's
// columns (2k + 1 + rows - 1 of them) than 4 rows would.
constexpr int kShawBlockRows = 8;

// The query rows of one block (as float32) and where their dot products go: a row b's dot
// with table row r lands at out[b][r - lo] for the block's column range [lo, hi].
struct ShawBlock {
  const float* q[kShawBlockRows];
  float* out[kShawBlockRows];
};

// out[b][at .. at + 8 * kV) = dots of q[b] with the kV vectors of columns from col on, for
// the block's first kRows rows: per feature kV column loads, kRows broadcasts, kRows * kV
// FMAs. Asks for one line of `ahead` in L2 per feature while the FMAs run (ahead_lines of
// them). GCC keeps a stack copy of the accumulators, stored after each FMA; forcing them
// into registers made the whole pass slower (docs/performance.md, "Kernel choices").
template <int kRows, int kV>
__attribute__((target("avx2,fma"))) inline void ShawBlockPass(const ShawBlock& blk,
                                                              const float* col, int64_t dim,
                                                              int64_t stride, int64_t at,
                                                              const char* ahead,
                                                              int64_t ahead_lines) {
  __m256 acc[kRows][kV];
  for (auto& row : acc) {
    for (__m256& a : row) a = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < dim; ++d) {  // feature
    if (d < ahead_lines) _mm_prefetch(ahead + d * 64, _MM_HINT_T1);
    const float* t = col + d * stride;
    __m256 c[kV];
    for (int v = 0; v < kV; ++v) c[v] = _mm256_loadu_ps(t + 8 * v);
    for (int b = 0; b < kRows; ++b) {
      const __m256 x = _mm256_broadcast_ss(blk.q[b] + d);
      for (int v = 0; v < kV; ++v) acc[b][v] = _mm256_fmadd_ps(x, c[v], acc[b][v]);
    }
  }
  for (int b = 0; b < kRows; ++b) {
    for (int v = 0; v < kV; ++v) _mm256_storeu_ps(blk.out[b] + at + 8 * v, acc[b][v]);
  }
}

// The same pass in AVX-512, sixteen columns per vector.
template <int kRows, int kV>
__attribute__((target("avx512f"))) inline void ShawBlockPass512(const ShawBlock& blk,
                                                                const float* col, int64_t dim,
                                                                int64_t stride, int64_t at,
                                                                const char* ahead,
                                                                int64_t ahead_lines) {
  __m512 acc[kRows][kV];
  for (auto& row : acc) {
    for (__m512& a : row) a = _mm512_setzero_ps();
  }
  for (int64_t d = 0; d < dim; ++d) {  // feature
    if (d < ahead_lines) _mm_prefetch(ahead + d * 64, _MM_HINT_T1);
    const float* t = col + d * stride;
    __m512 c[kV];
    for (int v = 0; v < kV; ++v) c[v] = _mm512_loadu_ps(t + 16 * v);
    for (int b = 0; b < kRows; ++b) {
      const __m512 x = _mm512_set1_ps(blk.q[b][d]);
      for (int v = 0; v < kV; ++v) acc[b][v] = _mm512_fmadd_ps(x, c[v], acc[b][v]);
    }
  }
  for (int b = 0; b < kRows; ++b) {
    for (int v = 0; v < kV; ++v) _mm512_storeu_ps(blk.out[b] + at + 16 * v, acc[b][v]);
  }
}

// The dot products of the block's first kRows rows with table rows [lo, hi] from the
// columns, 2 * kLanes at a time (passes of one vector for a tail of at most kLanes). Each
// out[b] has room for 2 * kLanes floats past hi - lo (whole vectors are stored).
// ahead[0, ahead_bytes): memory the caller reads next (the next block's score rows), asked
// for in L2 a line per feature as the passes run and the rest after them. The dot products
// issue no memory traffic; without this the hardware prefetcher saw the score rows in
// bursts and each row's add met DRAM latency cold (and a loop of prefetches before the dots
// waited on full miss queues).
template <int kLanes, int kRows>
void ShawBlockDots(const ShawBlock& blk, const ShawColumns& c, int64_t dim, int64_t lo, int64_t hi,
                   const char* ahead, int64_t ahead_bytes) {
  const int64_t count = hi - lo + 1;
  int64_t line = 0;
  const int64_t lines = (ahead_bytes + 63) / 64;
  for (int64_t c0 = 0; c0 < count; c0 += 2 * kLanes) {  // relative index, two vectors a pass
    const float* col = c.at.data() + (lo - c.lo) + c0;
    const char* pf = ahead + line * 64;
    const int64_t n = std::max<int64_t>(0, lines - line);
    const int vectors = count - c0 > kLanes ? 2 : 1;
    if constexpr (kLanes == 16) {
      if (vectors == 2) ShawBlockPass512<kRows, 2>(blk, col, dim, c.stride, c0, pf, n);
      else ShawBlockPass512<kRows, 1>(blk, col, dim, c.stride, c0, pf, n);
    } else {
      if (vectors == 2) ShawBlockPass<kRows, 2>(blk, col, dim, c.stride, c0, pf, n);
      else ShawBlockPass<kRows, 1>(blk, col, dim, c.stride, c0, pf, n);
    }
    line += dim;
  }
  for (; line < lines; ++line) _mm_prefetch(ahead + line * 64, _MM_HINT_T1);
}

using ShawBlockDotsFn = void (*)(const ShawBlock& blk, const ShawColumns& c, int64_t dim,
                                 int64_t lo, int64_t hi, const char* ahead, int64_t ahead_bytes);

// The block dot products of one ISA and the rows of its blocks.
struct ShawBlockPlan {
  ShawBlockDotsFn dots;
  int rows;
};

// REQUIRES: a vector ISA bound (AVX2 or AVX-512).
ShawBlockPlan ShawBlockPlanFor(KernelImpl implementation) {
  if (IsaBoundFor(implementation) == KernelImpl::kAvx512) return {ShawBlockDots<16, 8>, 8};
  return {ShawBlockDots<8, 4>, 4};
}

ShawDotsFn ShawDotsFor(KernelImpl implementation) {
  return IsaBoundFor(implementation) == KernelImpl::kScalar ? ShawDotsScalar : ShawDotsAvx2;
}

// ShawQueryTerm's arguments: a table of width dim, query [batch, heads, q, dim] in a float
// dtype, and scores of the same batch and heads.
absl::Status ValidateShawQueryCall(const ShawSpec& spec, const BiasGeometry& geom,
                                   const float* table, int64_t dim, const ConstTensorView& query,
                                   const TensorView& out) {
  RETURN_IF_ERROR(ValidateShawCall(spec, geom));
  if (table == nullptr || dim < 1) {
    return absl::InvalidArgumentError("shaw.table has no data");
  }
  if (!IsFloat(query.dtype) || query.shape.size() != 4 || query.shape[2] != geom.query_length ||
      query.shape[3] != dim || query.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("query is ", ShapeString(query.shape), " ", DTypeName(query.dtype),
                     "; it must be [batch, heads, query_length (", geom.query_length, "), d (", dim,
                     ")] FLOAT32, FLOAT16 or BFLOAT16"));
  }
  RETURN_IF_ERROR(ValidateScores(geom, query.shape[1], "query.shape[1]", out));
  if (out.shape[0] != query.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("scores.shape[0] (batch) is ", out.shape[0],
                                                   "; it must equal query.shape[0] (",
                                                   query.shape[0], ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BuildShawIndex(const ShawSpec& spec, const BiasGeometry& geom, int32_t* out) {
  RETURN_IF_ERROR(ValidateShawCall(spec, geom));
  if (out == nullptr) return absl::InvalidArgumentError("output buffer is null");
  std::vector<int32_t> rel(static_cast<size_t>(RelativeRowLength(geom)));
  for (size_t t = 0; t < rel.size(); ++t) {
    rel[t] =
        ShawIndexOf(RelativeOffsetAt(geom, static_cast<int64_t>(t)), spec.max_relative_position);
  }
  const KernelThreadLease lease(IdBytes(geom));
  CopyRelativeRows(rel.data(), geom, out, lease.threads());
  return absl::OkStatus();
}

absl::Status BuildShawEmbeddings(const ShawSpec& spec, const BiasGeometry& geom, const float* table,
                                 int64_t dim, float* out) {
  RETURN_IF_ERROR(ValidateShawCall(spec, geom));
  if (table == nullptr || out == nullptr || dim < 1) {
    return absl::InvalidArgumentError("shaw embeddings need a table, dim >= 1 and an output");
  }
  const int64_t q = geom.query_length, k = geom.key_length;
  const int32_t kmax = spec.max_relative_position;
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  const KernelThreadLease lease(static_cast<size_t>(q * k) * row_bytes);
  ParallelFor(lease.threads(), q, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {  // query
      const int64_t query_pos = geom.query_offset + i;
      float* row = out + i * k * dim;
      for (int64_t j = 0; j < k; ++j) {  // key
        std::memcpy(row + j * dim, table + ShawIndexOf(j - query_pos, kmax) * dim, row_bytes);
      }
    }
  });
  return absl::OkStatus();
}

namespace {

// The term of one query row at query_pos along its k keys, from its dot products with
// table rows [lo, hi] (dots_row[r - lo]): the index is 0 (clipped left) for keys [0, left),
// rises by one per key over [left, right), whose dot products start at middle, then stays
// 2k (clipped right) for keys [right, k).
struct ShawTermSpans {
  int64_t left, right;
  const float* middle;
};

ShawTermSpans ShawTermSpansOf(const float* dots_row, int64_t lo, int64_t query_pos, int32_t kmax,
                              int64_t k) {
  const int64_t left = std::clamp<int64_t>(query_pos - kmax, 0, k);
  const int64_t right = std::clamp<int64_t>(query_pos + kmax + 1, left, k);
  return {left, right, dots_row + (ShawIndexOf(left - query_pos, kmax) - lo)};
}

// term[j] for the keys j of one query row: two fills around one copy.
void GatherShawTerm(const float* dots_row, int64_t lo, int64_t hi, int64_t query_pos, int32_t kmax,
                    int64_t k, float* term) {
  const ShawTermSpans spans = ShawTermSpansOf(dots_row, lo, query_pos, kmax, k);
  std::fill(term, term + spans.left, dots_row[0]);
  std::copy(spans.middle, spans.middle + (spans.right - spans.left), term + spans.left);
  std::fill(term + spans.right, term + k, dots_row[hi - lo]);
}

// One query row of a Shaw call: its position and the table rows its keys reach (key 0 and
// key k - 1 bound them).
struct ShawRow {
  int64_t pos, lo, hi;
};

ShawRow ShawRowAt(const BiasGeometry& geom, int32_t kmax, int64_t row) {
  const int64_t pos = geom.query_offset + row % geom.query_length;
  return {pos, ShawIndexOf(-pos, kmax), ShawIndexOf(geom.key_length - 1 - pos, kmax)};
}

// A ShawQueryTerm call's work for one kernel thread: query rows in blocks of the plan's
// rows (at most kShawBlockRows), each block's dot products (from the columns where there
// are any, else row by row), then each row's term added to (or stored as) its score row.
class ShawRowRunner {
 public:
  ShawRowRunner(const BiasGeometry& geom, int32_t kmax, const ConstTensorView& query,
                const TensorView& out, bool add_to_out, const ShawColumns& columns,
                KernelImpl implementation, const float* table, int64_t dim, int64_t dots_width)
      : geom_(geom), kmax_(kmax), query_(query), out_(out), add_to_out_(add_to_out),
        columns_(columns), dots_(ShawDotsFor(implementation)),
        block_plan_(columns.n > 0 ? ShawBlockPlanFor(implementation)
                                  : ShawBlockPlan{nullptr, kShawBlockRows}),
        add_row_(BiasRowFor(out.dtype, implementation)),
        add_constant_(BiasRowFor<true>(out.dtype, implementation)), table_(table), dim_(dim),
        q_rows_(static_cast<size_t>(kShawBlockRows * dim), 0.0f),
        dots_rows_(static_cast<size_t>(kShawBlockRows * dots_width)),
        term_(add_to_out ? 0 : static_cast<size_t>(geom.key_length)) {
    for (int b = 0; b < kShawBlockRows; ++b) {
      block_.q[b] = q_rows_.data() + b * dim;
      block_.out[b] = dots_rows_.data() + b * dots_width;
    }
  }

  void Run(int64_t first, int64_t last) {
    const int rows = block_plan_.rows;
    for (int64_t row0 = first; row0 < last; row0 += rows) {  // (batch, head, query)
      RunBlock(row0, std::min<int64_t>(rows, last - row0), last);
    }
  }

 private:
  char* ScoreRow(int64_t row) const {
    return static_cast<char*>(out_.data) + row * geom_.key_length * DTypeSize(out_.dtype);
  }

  // Rows [row0, row0 + n) of the rows up to last. Rows of the block past n keep the
  // previous block's (finite) query values: their dot products are computed and unused.
  void RunBlock(int64_t row0, int64_t n, int64_t last) {
    ShawRow at[kShawBlockRows];
    const size_t q_elem = DTypeSize(query_.dtype);
    for (int64_t b = 0; b < n; ++b) {
      at[b] = ShawRowAt(geom_, kmax_, row0 + b);
      ToFloat32(query_.dtype, static_cast<const char*>(query_.data) + (row0 + b) * dim_ * q_elem,
                q_rows_.data() + b * dim_, static_cast<size_t>(dim_));
    }
    const float* dots_of[kShawBlockRows];
    if (columns_.n > 0) {
      int64_t lo = at[0].lo, hi = at[0].hi;
      for (int64_t b = 1; b < n; ++b) {
        lo = std::min(lo, at[b].lo);
        hi = std::max(hi, at[b].hi);
      }
      // The next block's score rows, read next, asked for while the dots run.
      const int64_t next = std::min<int64_t>(block_plan_.rows, last - row0 - n);
      const auto next_bytes = static_cast<int64_t>(next * geom_.key_length * DTypeSize(out_.dtype));
      block_plan_.dots(block_, columns_, dim_, lo, hi, ScoreRow(row0 + n), next_bytes);
      for (int64_t b = 0; b < n; ++b) dots_of[b] = block_.out[b] + (at[b].lo - lo);
    } else {
      for (int64_t b = 0; b < n; ++b) {
        dots_(block_.q[b], table_, dim_, at[b].lo, at[b].hi, block_.out[b]);
        dots_of[b] = block_.out[b];
      }
    }
    for (int64_t b = 0; b < n; ++b) {
      if (add_to_out_) {
        AddTerm(dots_of[b], at[b], ScoreRow(row0 + b));
        continue;
      }
      GatherShawTerm(dots_of[b], at[b].lo, at[b].hi, at[b].pos, kmax_, geom_.key_length,
                     term_.data());
      FromFloat32(term_.data(), out_.dtype, ScoreRow(row0 + b),
                  static_cast<size_t>(geom_.key_length));
    }
  }

  // score += the row's term, span by span (ShawTermSpans), without writing the term out:
  // the clipped spans add a constant, the middle one its dot products.
  void AddTerm(const float* dots_row, const ShawRow& at, char* score) const {
    const int64_t k = geom_.key_length;
    const size_t elem = DTypeSize(out_.dtype);
    const ShawTermSpans spans = ShawTermSpansOf(dots_row, at.lo, at.pos, kmax_, k);
    if (spans.left > 0) add_constant_(score, dots_row, spans.left);
    if (spans.right > spans.left) {
      add_row_(score + spans.left * elem, spans.middle, spans.right - spans.left);
    }
    if (k > spans.right)
      add_constant_(score + spans.right * elem, dots_row + (at.hi - at.lo), k - spans.right);
  }

  const BiasGeometry& geom_;
  const int32_t kmax_;
  const ConstTensorView& query_;
  const TensorView& out_;
  const bool add_to_out_;
  const ShawColumns& columns_;
  const ShawDotsFn dots_;
  const ShawBlockPlan block_plan_;
  const AddBiasRowFn add_row_;
  const AddBiasRowFn add_constant_;
  const float* const table_;
  const int64_t dim_;
  std::vector<float> q_rows_;     // the block's query rows as float32
  std::vector<float> dots_rows_;  // the block's dot products, dots_width per row
  std::vector<float> term_;       // one row's term along the keys (when storing it)
  ShawBlock block_;
};

}  // namespace

absl::Status ShawQueryTerm(const ShawSpec& spec, const BiasGeometry& geom, const float* table,
                           int64_t dim, const ConstTensorView& query, const TensorView& out,
                           bool add_to_out, KernelImpl implementation) {
  RETURN_IF_ERROR(ValidateShawQueryCall(spec, geom, table, dim, query, out));
  const int64_t q = geom.query_length, k = geom.key_length;
  const int32_t kmax = spec.max_relative_position;
  const int64_t rows = query.shape[0] * query.shape[1] * q;
  // The vector ISAs read the table rows the request reaches as columns (ShawColumns).
  const ShawColumns columns =
      IsaBoundFor(implementation) == KernelImpl::kScalar
          ? ShawColumns{}
          : MakeShawColumns(table, dim, ShawIndexOf(-(geom.query_offset + q - 1), kmax),
                            ShawIndexOf(k - 1 - geom.query_offset, kmax));
  // The work is the dot products (d multiply-adds per reached distance) and the row pass.
  const int64_t reach = std::min<int64_t>(2 * int64_t{kmax} + 1, k);
  // A block's dot products reach at most every column (blocks that cross a head), and whole
  // vectors are stored past them.
  const int64_t dots_width = std::max(reach, columns.n) + 64;
  const KernelThreadLease lease(WorkBytes(rows * (reach * dim / 8 + k)));
  ParallelFor(lease.threads(), rows, [&](int64_t first, int64_t last) {
    ShawRowRunner(geom, kmax, query, out, add_to_out, columns, implementation, table, dim,
                  dots_width)
        .Run(first, last);
  });
  return absl::OkStatus();
}

namespace {

// out[i] = f(i) for i in [first, last), for an f that is monotone over that range (so its
// equal values form contiguous runs), evaluating f at a few points per run: a probe where
// the run would end were it as long as the previous one, then steps doubling past it, then
// a binary search between the last equal and the first unequal value.
template <typename F>
void FillMonotoneRuns(int64_t first, int64_t last, int64_t* out, const F& f) {
  int64_t i = first, guess = 1;
  int64_t v = first < last ? f(first) : 0;
  while (i < last) {
    int64_t same = i, differs = last, next = 0;  // f(same) == v; f(differs) == next != v
    for (int64_t step = std::max<int64_t>(1, guess - 1); same + 1 < last;) {
      const int64_t probe = std::min(same + step, last - 1);
      const int64_t fp = f(probe);
      if (fp != v) {
        differs = probe;
        next = fp;
        break;
      }
      step = probe == i + guess - 1 ? 1 : 2 * step;
      same = probe;
    }
    while (differs < last && differs - same > 1) {
      const int64_t m = same + (differs - same) / 2;
      const int64_t fm = f(m);
      (fm == v ? same : differs) = m;
      if (fm != v) next = fm;
    }
    std::fill(out + i, out + same + 1, v);
    guess = same + 1 - i;
    i = same + 1;
    v = next;
  }
}

// DeBERTa's id of every relative position the request reaches: rel[t] for query_pos -
// key_pos = -RelativeOffsetAt(t), the position itself unbucketed. A log bucket depends on
// |query_pos - key_pos| alone (the sign multiplies it exactly, truncation is symmetric), and
// past mid it is monotone in that distance (each of HF's float32 steps is: the conversion,
// the divide, the log, the scaling by a constant, ceil), a few hundred runs of equal ids:
// FillMonotoneRuns finds each run's ends, the distances split across `threads` threads.
// Distances up to mid are their own bucket. Returns the first position
// in rel's order that has no finite INT32 bucket, if any (rel is then incomplete).
std::optional<int64_t> FillDebertaRow(const DebertaSpec& spec, const BiasGeometry& geom,
                                      int threads, int32_t* rel) {
  const int64_t n = RelativeRowLength(geom);
  if (!spec.Bucketed()) {
    for (int64_t t = 0; t < n; ++t) rel[t] = static_cast<int32_t>(-RelativeOffsetAt(geom, t));
    return std::nullopt;
  }
  const int64_t mid = spec.position_buckets / 2;
  const float log_range = DebertaLogRange(mid, spec.max_relative_positions);
  // query_pos - key_pos runs over [lowest, highest] (n values; query_offset >= 0); the
  // distances past mid it reaches are [first_far, farthest], at most n of them, so the
  // table below is sized by the request's row, never by how far its offset reaches.
  const int64_t lowest = geom.query_offset - (geom.key_length - 1);
  const int64_t highest = geom.query_offset + geom.query_length - 1;
  const int64_t nearest = lowest <= 0 ? 0 : lowest;
  const int64_t farthest = std::max(highest, -lowest);
  const int64_t first_far = std::max(nearest, mid + 1);
  // magnitude[a - first_far]: the bucket of distance +a for a in [first_far, farthest], or none.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> magnitude(
      static_cast<size_t>(std::max<int64_t>(0, farthest - first_far + 1)));
  ParallelFor(threads, static_cast<int64_t>(magnitude.size()), [&](int64_t first, int64_t last) {
    FillMonotoneRuns(first, last, magnitude.data(), [&](int64_t i) {  // distance first_far + i
      const std::optional<int32_t> b = DebertaBucketOf(first_far + i, mid, log_range);
      return b ? int64_t{*b} : kNone;
    });
  });
  for (int64_t t = 0; t < n; ++t) {
    const int64_t e = -RelativeOffsetAt(geom, t);  // query_pos - key_pos
    const int64_t a = e < 0 ? -e : e;
    if (a <= mid) {
      rel[t] = static_cast<int32_t>(static_cast<float>(e));
      continue;
    }
    const int64_t m = magnitude[static_cast<size_t>(a - first_far)];
    if (m == kNone) return e;
    rel[t] = static_cast<int32_t>(e > 0 ? m : -m);
  }
  return std::nullopt;
}

// One bucketed DeBERTa row (FillDebertaRow's values for every relative offset of a
// geometry), or the first offset without a finite bucket.
struct DebertaRow {
  std::vector<int32_t> rel;
  std::optional<int64_t> bad;
};

// The bucketed rows of recent calls. A row depends on the spec, the offset of its first
// entry (query_offset + query_length - 1) and its length; a model asks with one spec and a
// few geometries, so repeat calls copy the row instead of searching its runs again (16 us
// of a 120 us [2048, 2048] build). At most kCachedDebertaRows rows of at most
// kMaxCachedDebertaRow entries are kept (2 MiB); longer rows are made per call.
constexpr size_t kCachedDebertaRows = 8;
constexpr int64_t kMaxCachedDebertaRow = int64_t{1} << 16;
using DebertaRowKey = std::tuple<int32_t, int32_t, int64_t, int64_t>;

std::shared_ptr<const DebertaRow> MakeDebertaRow(const DebertaSpec& spec, const BiasGeometry& geom,
                                                 int threads) {
  auto row = std::make_shared<DebertaRow>();
  row->rel.resize(static_cast<size_t>(RelativeRowLength(geom)));
  row->bad = FillDebertaRow(spec, geom, threads, row->rel.data());
  return row;
}

std::shared_ptr<const DebertaRow> DebertaRowFor(const DebertaSpec& spec, const BiasGeometry& geom,
                                                int threads) {
  const int64_t n = RelativeRowLength(geom);
  if (!spec.Bucketed() || n > kMaxCachedDebertaRow) return MakeDebertaRow(spec, geom, threads);
  static auto* rows =
      new PrimitiveCache<DebertaRowKey, std::shared_ptr<const DebertaRow>>(kCachedDebertaRows);
  const DebertaRowKey key{spec.position_buckets, spec.max_relative_positions,
                          geom.query_offset + geom.query_length - 1, n};
  return rows->Find(key, [&] { return MakeDebertaRow(spec, geom, threads); });
}

}  // namespace

absl::Status BuildDebertaPositions(const DebertaSpec& spec, const BiasGeometry& geom,
                                   int32_t* out) {
  RETURN_IF_ERROR(ValidateBiasGeometry(geom));
  RETURN_IF_ERROR(ValidateDebertaSpec(spec, geom));
  if (out == nullptr) return absl::InvalidArgumentError("output buffer is null");
  const KernelThreadLease lease(IdBytes(geom));
  const std::shared_ptr<const DebertaRow> row = DebertaRowFor(spec, geom, lease.threads());
  if (const std::optional<int64_t> bad = row->bad) {
    return absl::InvalidArgumentError(
        absl::StrCat("deberta.max_relative_positions is ", spec.max_relative_positions,
                     "; with position_buckets ", spec.position_buckets, " relative position ", *bad,
                     " has no finite INT32 bucket (HF's log((max_relative_positions - 1) / ",
                     "(position_buckets / 2)) must be > 0: max_relative_positions > ",
                     spec.position_buckets / 2 + 1, ")"));
  }
  CopyRelativeRows(row->rel.data(), geom, out, lease.threads());
  return absl::OkStatus();
}

double AlibiBiasReference(const AlibiSpec& spec, const BiasGeometry& geom, int32_t h, int64_t i,
                          int64_t j) {
  const double slope = AlibiSlope(h, spec.num_heads, spec.max_bias);
  const int64_t q_pos = geom.query_offset + i;
  if (spec.causal) {
    if (j > q_pos) return -std::numeric_limits<double>::infinity();
    return -slope * static_cast<double>(q_pos - j);
  }
  return -slope * std::fabs(static_cast<double>(q_pos - j));
}

int32_t T5BucketReference(const T5Spec& spec, const BiasGeometry& geom, int64_t i, int64_t j) {
  return T5RelativeBucket(j - (geom.query_offset + i), spec.bidirectional, spec.num_buckets,
                          spec.max_distance);
}

}  // namespace posenc
