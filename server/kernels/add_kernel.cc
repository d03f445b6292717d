#include "server/kernels/add_kernel.h"

// GCC 12 reports the _mm512_undefined_* operands inside AVX-512 intrinsics (srli, cvtepi32_epi16,
// cvtps_ph, ...) as "may be used uninitialized" (GCC bug 105593) wherever they inline.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "server/kernels/finite_kernel.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/onednn_common.h"
#include "server/kernels/primitive_cache.h"
#include "server/kernels/simd_convert.h"
#include "server/kernels/threads.h"

namespace posenc {
namespace {

thread_local KernelImpl last_impl = KernelImpl::kAuto;
thread_local const AddRowLayout* last_layout = nullptr;

// pe [rows, dim] to out [rows, dim] with each whole group of 16 columns reordered as its 8
// even columns, then its 8 odd ones (as the lanes of widened bfloat16 pairs hold them);
// the columns past the last whole group stay in order.
void SplitRowsByParity(const float* pe, int64_t rows, int64_t dim, float* out) {
  const int64_t grouped = dim / 16 * 16;  // the columns in whole groups of 16
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = pe + r * dim;
    float* o = out + r * dim;
    for (int64_t c = 0; c < grouped; c += 16) {
      for (int j = 0; j < 8; ++j) {
        o[c + j] = in[c + 2 * j];
        o[c + 8 + j] = in[c + 2 * j + 1];
      }
    }
    std::copy(in + grouped, in + dim, o + grouped);
  }
}

// The layout the AVX2 bfloat16 rows read (AddRowsBf16Avx2 with kByParity).
constexpr AddRowLayout kByParity16("by-parity-16", SplitRowsByParity);

// oneDNN 2.6 builds a primitive from an op desc, a JIT compile per shape signature, so
// primitives are kept in a PrimitiveCache (LRU beyond kMaxPrimitives, one creation per key
// outside the lock). The scales are runtime arguments, not part of the key: requests with
// varying input_scale share one primitive. A dtype the CPU has no JIT kernel for is
// remembered as null so the vector rows serve it without asking again. Every oneDNN call
// in this file is inside a try that catches whatever it throws.
class BinaryAddPrimitives {
 public:
  using Primitive = std::shared_ptr<const dnnl::binary>;

  // The shared instance, or null where oneDNN cannot make a CPU engine.
  static BinaryAddPrimitives* Get() {
    static BinaryAddPrimitives* instance =
        onednn::Engine() != nullptr ? new BinaryAddPrimitives(*onednn::Engine()) : nullptr;
    return instance;
  }

  const dnnl::engine& engine() const { return engine_; }

  Primitive Find(DType dtype, int64_t nb, int64_t seq, int64_t dim) {
    return cache_.Find(Key{static_cast<int>(dtype), nb, seq, dim},
                       [&] { return Create(dtype, nb, seq, dim); });
  }

 private:
  using Key = std::tuple<int, int64_t, int64_t, int64_t>;
  static constexpr size_t kMaxPrimitives = 256;

  explicit BinaryAddPrimitives(const dnnl::engine& engine) : engine_(engine) {}

  Primitive Create(DType dtype, int64_t nb, int64_t seq, int64_t dim) const {
    using tag = dnnl::memory::format_tag;
    try {
      // src0/dst: the embeddings in their own dtype; src1: the float32 encoding rows,
      // broadcast over the batch axis. dst = s0 * src0 + s1 * src1, both scales given at
      // execution (DNNL_RUNTIME_F32_VAL).
      const dnnl::memory::desc x_md({nb, seq, dim}, onednn::DataType(dtype), tag::abc);
      const dnnl::memory::desc pe_md({1, seq, dim}, dnnl::memory::data_type::f32, tag::abc);
      const dnnl::binary::desc add_desc(dnnl::algorithm::binary_add, x_md, pe_md, x_md);
      dnnl::primitive_attr attr;
      attr.set_scales(DNNL_ARG_SRC_0, 0, {DNNL_RUNTIME_F32_VAL});
      attr.set_scales(DNNL_ARG_SRC_1, 0, {DNNL_RUNTIME_F32_VAL});
      const dnnl::binary::primitive_desc add_pd(add_desc, attr, engine_);
      // A reference (non-JIT) kernel is slower than our loop: keep the loop then.
      if (std::strncmp(add_pd.impl_info_str(), "ref", 3) == 0) return nullptr;
      return std::make_shared<const dnnl::binary>(add_pd);
    } catch (const std::exception&) {
      return nullptr;  // unimplemented for this dtype on this CPU, or out of memory
    }
  }

  const dnnl::engine& engine_;
  PrimitiveCache<Key, Primitive> cache_{kMaxPrimitives};
};

// x = input_scale * x + pe_scale * pe with oneDNN's binary_add. Returns false (nothing
// written) where oneDNN has no JIT kernel for x; INTERNAL if it fails while running.
absl::StatusOr<bool> AddWithOneDnn(TensorView x, const float* pe, float input_scale,
                                   float pe_scale) {
  BinaryAddPrimitives* primitives = BinaryAddPrimitives::Get();
  if (primitives == nullptr) return false;
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  const BinaryAddPrimitives::Primitive add = primitives->Find(x.dtype, nb, seq, dim);
  if (!add) return false;
  try {
    // 1 thread for small tensors or while another call holds the pool.
    const KernelThreadLease lease(WorkBytes(x.NumElements()));
    onednn::UseThreads(lease.threads());
    thread_local dnnl::stream stream(primitives->engine());
    using tag = dnnl::memory::format_tag;
    const dnnl::engine& engine = primitives->engine();
    const dnnl::memory::desc x_md({nb, seq, dim}, onednn::DataType(x.dtype), tag::abc);
    const dnnl::memory::desc pe_md({1, seq, dim}, dnnl::memory::data_type::f32, tag::abc);
    const dnnl::memory::desc scale_md({1}, dnnl::memory::data_type::f32, tag::x);
    dnnl::memory x_mem(x_md, engine, x.data);
    dnnl::memory pe_mem(pe_md, engine, const_cast<float*>(pe));
    dnnl::memory s0_mem(scale_md, engine, &input_scale);
    dnnl::memory s1_mem(scale_md, engine, &pe_scale);
    add->execute(stream, {{DNNL_ARG_SRC_0, x_mem},
                          {DNNL_ARG_SRC_1, pe_mem},
                          {DNNL_ARG_DST, x_mem},
                          {DNNL_ARG_ATTR_INPUT_SCALES | DNNL_ARG_SRC_0, s0_mem},
                          {DNNL_ARG_ATTR_INPUT_SCALES | DNNL_ARG_SRC_1, s1_mem}});
    stream.wait();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("oneDNN binary_add failed: ", e.what()));
  }
  return true;
}

template <typename Load, typename Store>
void AddLoop(int64_t nb, int64_t rows, int64_t dim, const float* pe, float a, float b, Load load,
             Store store) {
  for (int64_t n = 0; n < nb; ++n) {      // batch
    for (int64_t s = 0; s < rows; ++s) {  // seq
      const int64_t base = (n * rows + s) * dim;
      const float* pe_row = pe + s * dim;
      for (int64_t c = 0; c < dim; ++c) {  // feature
        store(base + c, load(base + c) * a + pe_row[c] * b);
      }
    }
  }
}

// kRows rows of x (the same position in kRows batch rows) plus one [dim] encoding row:
// x = x*a + pe*b, the same float32 operations (two products, one sum, no FMA) as AddLoop,
// so results are bit-identical to it. Each pe vector is loaded (and scaled) once for all
// kRows rows, so the encoding rows come from L2 half as often with two rows.
// 16-bit rows are widened, computed and rounded once to nearest even, NaN kept as the
// canonical quiet NaN as in FloatToHalf and FloatToBFloat16.
// ahead[g]: the bytes row g's stream will touch kPrefetchBytes later (the next rows in the
// blocked order, which may lie in another batch row), fetched column for column as the row
// runs; null when there is nothing left in the block.
using AddRowsFn = void (*)(void* const* x, const char* const* ahead, const float* pe, int64_t dim,
                           float a, float b);

// How far ahead of the loads the rows prefetch x. The blocked order jumps between batch
// rows every few KiB, and the hardware prefetcher meets each jump cold; fetching 8 KiB
// ahead hides it (docs/performance.md, "Kernel choices").
constexpr size_t kPrefetchBytes = 8 << 10;

inline void PrefetchLine(const char* p) { __builtin_prefetch(p, 1, 3); }

// x*a + pb, pb being pe*b.
__attribute__((target("avx2"))) inline __m256 Combine8(__m256 x, __m256 pb, __m256 va) {
  return _mm256_add_ps(_mm256_mul_ps(x, va), pb);
}

__attribute__((target("avx2"))) inline __m256 ScaledPe8(const float* pe, __m256 vb) {
  return _mm256_mul_ps(_mm256_loadu_ps(pe), vb);
}

// kUnit (a == 1 and b == 1): x + pe, the same float32 result as x * 1 + pe * 1 (both
// products are exact) without the two multiplies.
template <bool kUnit>
__attribute__((target("avx2"))) inline __m256 Pe8(const float* pe, __m256 vb) {
  return kUnit ? _mm256_loadu_ps(pe) : ScaledPe8(pe, vb);
}
template <bool kUnit>
__attribute__((target("avx2"))) inline __m256 Add8(__m256 x, __m256 pb, __m256 va) {
  return kUnit ? _mm256_add_ps(x, pb) : Combine8(x, pb, va);
}

// What a row function combines x with its (scaled) encoding by. Both share every row
// function below: they differ in this one operation per element, not in loads, layouts,
// conversions or blocking. kAdd: x*a + pe*b, as AddLoop. kMultiply: (x*a) * (pe*b), as
// MultiplyEncodingLoop (two products for the scaled operands, one for the result; no FMA
// can contract a product of products). kUnit (a == b == 1) drops the products by 1, which
// are exact either way.
enum class RowOp { kAdd, kMultiply };

template <RowOp kOp, bool kUnit>
__attribute__((target("avx2"))) inline __m256 Op8(__m256 x, __m256 pb, __m256 va) {
  if constexpr (kOp == RowOp::kAdd) return Add8<kUnit>(x, pb, va);
  return _mm256_mul_ps(kUnit ? x : _mm256_mul_ps(x, va), pb);
}

template <RowOp kOp>
inline float OpOne(float x, float pe, float a, float b) {
  if constexpr (kOp == RowOp::kAdd) return x * a + pe * b;
  return (x * a) * (pe * b);
}

template <RowOp kOp, bool kUnit, int kRows>
__attribute__((target("avx2"))) void AddRowsF32Avx2(void* const* xs, const char* const* ahead,
                                                    const float* pe, int64_t dim, float a,
                                                    float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int64_t c = 0;
  for (; c + 32 <= dim; c += 32) {  // four independent vectors per step keep loads in flight
    const __m256 p0 = Pe8<kUnit>(pe + c, vb), p1 = Pe8<kUnit>(pe + c + 8, vb);
    const __m256 p2 = Pe8<kUnit>(pe + c + 16, vb), p3 = Pe8<kUnit>(pe + c + 24, vb);
    for (int g = 0; g < kRows; ++g) {
      float* x = static_cast<float*>(xs[g]);
      if (ahead[g] != nullptr) {
        PrefetchLine(ahead[g] + c * 4);
        PrefetchLine(ahead[g] + c * 4 + 64);
      }
      const __m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);
      const __m256 x2 = _mm256_loadu_ps(x + c + 16), x3 = _mm256_loadu_ps(x + c + 24);
      _mm256_storeu_ps(x + c, Op8<kOp, kUnit>(x0, p0, va));
      _mm256_storeu_ps(x + c + 8, Op8<kOp, kUnit>(x1, p1, va));
      _mm256_storeu_ps(x + c + 16, Op8<kOp, kUnit>(x2, p2, va));
      _mm256_storeu_ps(x + c + 24, Op8<kOp, kUnit>(x3, p3, va));
    }
  }
  for (; c + 8 <= dim; c += 8) {
    const __m256 p = Pe8<kUnit>(pe + c, vb);
    for (int g = 0; g < kRows; ++g) {
      float* x = static_cast<float*>(xs[g]);
      _mm256_storeu_ps(x + c, Op8<kOp, kUnit>(_mm256_loadu_ps(x + c), p, va));
    }
  }
  for (; c < dim; ++c) {
    for (int g = 0; g < kRows; ++g) {
      float* x = static_cast<float*>(xs[g]);
      x[c] = OpOne<kOp>(x[c], pe[c], a, b);
    }
  }
}

// pe[0..16) times b (kUnit: b == 1, no product), split by parity as 16 bfloat16 words hold
// x (simd::EvenBf16x8): even lanes pe[2j], odd lanes pe[2j+1]. Two 128-bit loads per vector
// put pe[0..3] beside pe[8..11], so one in-lane shuffle sorts each half.
template <bool kUnit>
__attribute__((target("avx2"))) inline void ScaledPeEvenOdd(const float* pe, __m256 vb,
                                                            __m256* even, __m256* odd) {
  const __m256 lo = _mm256_loadu2_m128(pe + 8, pe);       // pe0..3  | pe8..11
  const __m256 hi = _mm256_loadu2_m128(pe + 12, pe + 4);  // pe4..7  | pe12..15
  *even = _mm256_shuffle_ps(lo, hi, 0x88);
  *odd = _mm256_shuffle_ps(lo, hi, 0xDD);
  if constexpr (!kUnit) {
    *even = _mm256_mul_ps(*even, vb);
    *odd = _mm256_mul_ps(*odd, vb);
  }
}

// bfloat16 rows split by parity: widened by a shift or a mask, rounded to nearest even and
// put back in element order by simd::RoundJoinEvenOddBf16, with the float32 rows' prefetch.
// kUnit: both scales 1, so x + pe (the same float32 result: a product by 1 is exact and
// quiets a NaN as the sum does). NaN: a NaN result here is x's NaN quieted (a widened
// bfloat16: low 16 bits zero), the default NaN, or a NaN of a, b or pe. Only the last
// kind can carry low bits that the rounding add would push into the bfloat16, so the
// per-lane NaN fix-up runs only for pe vectors (or an a) that hold a NaN: one test per
// pe vector, shared by both rows (in-order widening and narrowing with a NaN test per row
// vector made the 16-bit add as slow as the float32 one with twice the bytes).
// 16 results of a row split by parity, rounded and stored (exact: no NaN fix-up; see below).
__attribute__((target("avx2"))) inline void StoreBf16Parity(uint16_t* p, __m256 even, __m256 odd,
                                                            bool exact) {
  if (__builtin_expect(exact, 1)) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), simd::RoundJoinEvenOddBf16(even, odd));
  } else {
    simd::StoreEvenOddBf16x16(p, even, odd);
  }
}

// Whether no lane of the pe vectors (or a) is a NaN.
__attribute__((target("avx2"))) inline bool NoNan(__m256 p, __m256 q, bool a_nan) {
  const __m256 nan = _mm256_cmp_ps(p, q, _CMP_UNORD_Q);
  return _mm256_testz_ps(nan, nan) && !a_nan;
}

// Columns c.. of bfloat16 rows (fewer than 16 of them), 8 at a time, then one by one.
template <RowOp kOp, int kRows>
__attribute__((target("avx2"))) void AddTailBf16Avx2(void* const* xs, const float* pe, int64_t c,
                                                     int64_t dim, float a, float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  for (; c + 8 <= dim; c += 8) {
    const __m256 p = ScaledPe8(pe + c, vb);
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      simd::StoreBf16x8(x + c, Op8<kOp, false>(simd::LoadBf16x8(x + c), p, va));
    }
  }
  for (; c < dim; ++c) {
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      x[c] = FloatToBFloat16(OpOne<kOp>(BFloat16ToFloat(x[c]), pe[c], a, b));
    }
  }
}

// pe[0..16) times b for the 16 values of a row split by parity: kByParity, pe is split
// already (SplitRowsByParity: each group of 16 columns holds its 8 even columns, then its
// 8 odd ones) and is loaded as it lies; else sorted by ScaledPeEvenOdd.
template <bool kUnit, bool kByParity>
__attribute__((target("avx2"))) inline void PeEvenOdd(const float* pe, __m256 vb, __m256* even,
                                                      __m256* odd) {
  if constexpr (!kByParity) {
    ScaledPeEvenOdd<kUnit>(pe, vb, even, odd);
  } else if constexpr (kUnit) {
    *even = _mm256_loadu_ps(pe);
    *odd = _mm256_loadu_ps(pe + 8);
  } else {
    *even = _mm256_mul_ps(_mm256_loadu_ps(pe), vb);
    *odd = _mm256_mul_ps(_mm256_loadu_ps(pe + 8), vb);
  }
}

// kByParity: pe split by parity (see PeEvenOdd), finite, and a, b not NaN (the caller's
// contract), so no NaN fix-up runs: a NaN result is then x's quieted or the default NaN,
// both with zero low bits; without the shuffles and NaN tests the bfloat16 rows run as fast
// as float32 (docs/performance.md, "Kernel choices").
template <RowOp kOp, bool kUnit, bool kByParity, int kRows>
__attribute__((target("avx2"))) void AddRowsBf16Avx2(void* const* xs, const char* const* ahead,
                                                     const float* pe, int64_t dim, float a,
                                                     float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  const bool a_nan = std::isnan(a);
  int64_t c = 0;
  for (; c + 32 <= dim; c += 32) {  // one cache line of x per row: both loads in flight
    __m256 e0, o0, e1, o1;
    PeEvenOdd<kUnit, kByParity>(pe + c, vb, &e0, &o0);
    PeEvenOdd<kUnit, kByParity>(pe + c + 16, vb, &e1, &o1);
    const bool exact0 = kByParity || NoNan(e0, o0, a_nan);
    const bool exact1 = kByParity || NoNan(e1, o1, a_nan);
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      if (ahead[g] != nullptr) PrefetchLine(ahead[g] + c * 2);
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c + 16));
      StoreBf16Parity(x + c, Op8<kOp, kUnit>(simd::EvenBf16x8(w0), e0, va),
                      Op8<kOp, kUnit>(simd::OddBf16x8(w0), o0, va), exact0);
      StoreBf16Parity(x + c + 16, Op8<kOp, kUnit>(simd::EvenBf16x8(w1), e1, va),
                      Op8<kOp, kUnit>(simd::OddBf16x8(w1), o1, va), exact1);
    }
  }
  for (; c + 16 <= dim; c += 16) {
    __m256 e, o;
    PeEvenOdd<kUnit, kByParity>(pe + c, vb, &e, &o);
    const bool exact = kByParity || NoNan(e, o, a_nan);
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c));
      StoreBf16Parity(x + c, Op8<kOp, kUnit>(simd::EvenBf16x8(w), e, va),
                      Op8<kOp, kUnit>(simd::OddBf16x8(w), o, va), exact);
    }
  }
  AddTailBf16Avx2<kOp, kRows>(xs, pe, c, dim, a, b);  // past the last 16 columns: in order
}

// float16 rows with F16C, 32 lanes per step as above (kUnit as for the float32 rows).
template <RowOp kOp, bool kUnit, int kRows>
__attribute__((target("avx2,f16c"))) void AddRowsF16Avx2(void* const* xs, const char* const* ahead,
                                                         const float* pe, int64_t dim, float a,
                                                         float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int64_t c = 0;
  for (; c + 32 <= dim; c += 32) {
    const __m256 p0 = Pe8<kUnit>(pe + c, vb), p1 = Pe8<kUnit>(pe + c + 8, vb);
    const __m256 p2 = Pe8<kUnit>(pe + c + 16, vb), p3 = Pe8<kUnit>(pe + c + 24, vb);
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      if (ahead[g] != nullptr) PrefetchLine(ahead[g] + c * 2);
      const __m256 x0 = simd::LoadF16x8(x + c), x1 = simd::LoadF16x8(x + c + 8);
      const __m256 x2 = simd::LoadF16x8(x + c + 16), x3 = simd::LoadF16x8(x + c + 24);
      simd::StoreF16x32(x + c, Op8<kOp, kUnit>(x0, p0, va), Op8<kOp, kUnit>(x1, p1, va),
                        Op8<kOp, kUnit>(x2, p2, va), Op8<kOp, kUnit>(x3, p3, va));
    }
  }
  for (; c + 8 <= dim; c += 8) {
    const __m256 p = Pe8<kUnit>(pe + c, vb);
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      simd::StoreF16x8(x + c, Op8<kOp, kUnit>(simd::LoadF16x8(x + c), p, va));
    }
  }
  for (; c < dim; ++c) {
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      x[c] = FloatToHalf(OpOne<kOp>(HalfToFloat(x[c]), pe[c], a, b));
    }
  }
}

// The 16-bit rows 16 lanes at a time with AVX-512 (F, BW, VL and DQ: masked 16-bit tails,
// VFPCLASSPS); bfloat16 needs AVX512_BF16 too (VCVTNE2PS2BF16, denormal lanes fixed up as
// FloatToBFloat16 rounds them). Same float32 operations as AddLoop, so bit-identical to it.
bool HasAvx512Rows(DType dtype) {
  static const bool base = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (dtype == DType::kFloat16) return base;
  if (dtype == DType::kBFloat16) return base && simd::HasAvx512Bf16();
  return false;  // float32 rows are memory-bound already: AVX2 only
}

#define POSENC_AVX512_ROWS __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// x*a + pb (pb being pe*b), or x + pe when both scales are 1 (the same float32 result: a
// product by 1 is exact, and a NaN is canonicalised on narrowing either way).
template <RowOp kOp, bool kBf16, bool kUnitScales>
POSENC_AVX512_ROWS inline __m512 Combine16(__m256i h, __m512 pb, __m512 va) {
  const __m512 x = kBf16 ? simd::WidenBf16x16(h) : simd::WidenF16x16(h);
  const __m512 xa = kUnitScales ? x : _mm512_mul_ps(x, va);
  if constexpr (kOp == RowOp::kMultiply) return _mm512_mul_ps(xa, pb);
  return _mm512_add_ps(xa, pb);
}

template <bool kUnitScales>
POSENC_AVX512_ROWS inline __m512 ScaledPe16(__m512 pe, __m512 vb) {
  if constexpr (kUnitScales) return pe;
  return _mm512_mul_ps(pe, vb);
}

// Stores 32 results (lo: the first 16) as x's dtype, rounded as FloatToBFloat16 /
// FloatToHalf.
template <bool kBf16>
POSENC_AVX512_ROWS inline void Store32(uint16_t* p, __m512 lo, __m512 hi) {
  if constexpr (kBf16) {
    simd::StoreBf16x32(p, lo, hi);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), simd::NarrowF16x16(lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16), simd::NarrowF16x16(hi));
  }
}

template <bool kBf16>
POSENC_AVX512_ROWS inline __m256i Narrow16(__m512 f) {
  if constexpr (kBf16) {
    return simd::NarrowBf16x16Native(f);
  } else {
    return simd::NarrowF16x16(f);
  }
}

template <RowOp kOp, bool kBf16, bool kUnitScales, int kRows>
POSENC_AVX512_ROWS void AddRows16Avx512(void* const* xs, const char* const* ahead, const float* pe,
                                        int64_t dim, float a, float b) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  int64_t c = 0;
  for (; c + 32 <= dim; c += 32) {  // 32 lanes, one cache line, per step
    const __m512 p0 = ScaledPe16<kUnitScales>(_mm512_loadu_ps(pe + c), vb);
    const __m512 p1 = ScaledPe16<kUnitScales>(_mm512_loadu_ps(pe + c + 16), vb);
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      if (ahead[g] != nullptr) PrefetchLine(ahead[g] + c * 2);
      const __m256i h0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c));
      const __m256i h1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c + 16));
      Store32<kBf16>(x + c, Combine16<kOp, kBf16, kUnitScales>(h0, p0, va),
                     Combine16<kOp, kBf16, kUnitScales>(h1, p1, va));
    }
  }
  for (; c < dim; c += 16) {  // up to two more vectors, the last under a mask
    const int64_t left = dim - c;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    const __m512 p = ScaledPe16<kUnitScales>(_mm512_maskz_loadu_ps(m, pe + c), vb);
    for (int g = 0; g < kRows; ++g) {
      auto* x = static_cast<uint16_t*>(xs[g]);
      const __m256i h = _mm256_maskz_loadu_epi16(m, x + c);
      const __m512 r = Combine16<kOp, kBf16, kUnitScales>(h, p, va);
      _mm256_mask_storeu_epi16(x + c, m, Narrow16<kBf16>(r));
    }
  }
}

// Which code AddEncodingInPlace (multiply: MultiplyEncodingInPlace) runs for
// `implementation` (kernel_impl.h's rules): the hand-written rows of the ISA resolved, AVX2
// rows where the dtype has no AVX-512 ones, kScalar for the loop, or kOneDnn. oneDNN's
// binary_add is kept as an implementation to compare but wins no case beyond the noise (its
// broadcast re-reads the encoding for every batch row, and at AVX2 it has no bfloat16 JIT
// kernel; docs/performance.md, "Kernel choices"), so kAuto takes it only on a CPU without
// AVX2, where it may still have an SSE4.1 JIT kernel. The multiply has no oneDNN code.
KernelImpl ChosenRows(DType dtype, KernelImpl implementation, bool multiply) {
  KernelImpl isa = implementation;
  if (implementation == KernelImpl::kAuto) {
    const KernelImpl forced = KernelOverride();
    if (forced == KernelImpl::kOneDnn && !multiply) return KernelImpl::kOneDnn;
    // A CPU without AVX2 has no rows; oneDNN may still have an SSE4.1 JIT kernel.
    if (forced == KernelImpl::kAuto && CpuBestIsa() == KernelImpl::kScalar && !multiply) {
      return KernelImpl::kOneDnn;
    }
    isa = AutoIsaCeiling();
  } else if (implementation == KernelImpl::kOneDnn) {
    if (!multiply) return KernelImpl::kOneDnn;
    isa = CpuBestIsa();
  }
  isa = CpuIsaAtMost(isa);
  if (isa == KernelImpl::kAvx512 && !HasAvx512Rows(dtype)) return KernelImpl::kAvx2;
  return isa;
}

// Encoding rows per block: 64 KiB of pe, kept in L2 while every batch row adds it.
constexpr int64_t kPeBlockBytes = 64 << 10;

// Rows at least this long are checked for values that are not finite one by one as they are
// written (RunRowsBlocked); below it a row's check costs more in calls than a pass.
constexpr size_t kMinCheckedRowBytes = 256;

// How many position blocks of at most max_block rows split seq rows evenly over `threads`:
// a multiple of threads (while blocks have rows to spare), so each thread gets the same
// rows. A [1,128,768] tensor in 21-row blocks gave one thread 84 rows and the other 44.
int64_t BalancedBlocks(int64_t seq, int64_t max_block, int threads) {
  const int64_t blocks = (seq + max_block - 1) / max_block;
  if (threads <= 1 || blocks % threads == 0) return blocks;
  return std::min(seq, (blocks + threads - 1) / threads * threads);
}

// The row functions for x's dtype, for two rows at a time and for one.
struct RowFns {
  AddRowsFn two;
  AddRowsFn one;
};

template <RowOp kOp, bool kUnit>
RowFns Bf16Avx2RowFns(bool by_parity) {
  if (by_parity) {
    return {AddRowsBf16Avx2<kOp, kUnit, true, 2>, AddRowsBf16Avx2<kOp, kUnit, true, 1>};
  }
  return {AddRowsBf16Avx2<kOp, kUnit, false, 2>, AddRowsBf16Avx2<kOp, kUnit, false, 1>};
}

template <RowOp kOp, bool kBf16, bool kUnitScales>
RowFns Avx512RowFns() {
  return {AddRows16Avx512<kOp, kBf16, kUnitScales, 2>, AddRows16Avx512<kOp, kBf16, kUnitScales, 1>};
}

// x [nb, seq, dim] in blocks of positions: for each block, the batch rows' slices of it
// (each contiguous in x, so it streams), two batch rows at a time, combine with the same pe
// rows (fns: the add's or the multiply's), read from memory once and then from cache.
// oneDNN's broadcast reads all of pe once per batch row: 1.5x the traffic for fp32. Large
// tensors split the blocks across the kernel threads.
// With `first_non_finite`, each row is checked for values that are not finite right after it
// is written, while it is in cache, instead of in a second pass over memory; rows narrower
// than kMinCheckedRowBytes (where a call per row would cost more than the pass) get the pass.
void RunRowsBlocked(TensorView x, const float* pe, float a, float b, RowFns fns,
                    int64_t* first_non_finite) {
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  const size_t row_bytes = static_cast<size_t>(dim) * DTypeSize(x.dtype);
  auto* bytes = static_cast<char*>(x.data);
  const KernelThreadLease lease(WorkBytes(x.NumElements()));
  const int threads = lease.threads();
  const int64_t blocks =
      BalancedBlocks(seq, std::max<int64_t>(1, kPeBlockBytes / (dim * 4)), threads);
  const int64_t block = (seq + blocks - 1) / blocks;
  // Each stream prefetches the row kPrefetchBytes ahead of it in the order it visits rows
  // (rounded up to whole rows).
  const int64_t rows_ahead = static_cast<int64_t>((kPrefetchBytes + row_bytes - 1) / row_bytes);
  const int64_t pairs = (nb + 1) / 2;  // batch rows 2p and 2p + 1 (absent for odd nb)
  const bool check_rows = first_non_finite != nullptr && row_bytes >= kMinCheckedRowBytes;
  const size_t elem = DTypeSize(x.dtype);
  std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};
  ParallelFor(threads, blocks, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {  // position block
      const int64_t s0 = k * block, len = std::min(seq, s0 + block) - s0;
      const int64_t visits = pairs * len;
      // Row g of the i-th visit in this block, or null past the block or the batch.
      auto row_at = [&](int64_t i, int g) -> char* {
        if (i >= visits) return nullptr;
        const int64_t n = 2 * (i / len) + g, s = s0 + i % len;
        return n < nb ? bytes + static_cast<size_t>(n * seq + s) * row_bytes : nullptr;
      };
      for (int64_t i = 0; i < visits; ++i) {  // batch pairs, then seq
        const int64_t s = s0 + i % len;
        void* rows[2] = {row_at(i, 0), row_at(i, 1)};
        const char* ahead[2] = {row_at(i + rows_ahead, 0), row_at(i + rows_ahead, 1)};
        (rows[1] != nullptr ? fns.two : fns.one)(rows, ahead, pe + s * dim, dim, a, b);
        if (!check_rows) continue;
        for (void* row : rows) {
          if (row == nullptr) continue;
          const int64_t at = FirstNonFiniteHere(x.dtype, row, dim);
          if (at < 0) continue;
          const int64_t index = static_cast<int64_t>((static_cast<char*>(row) - bytes) / elem) + at;
          int64_t seen = first_bad.load();
          while (index < seen && !first_bad.compare_exchange_weak(seen, index)) {
          }
        }
      }
    }
  });
  if (first_non_finite == nullptr) return;
  if (!check_rows) {
    *first_non_finite = FirstNonFinite(x.dtype, x.data, x.NumElements());
    return;
  }
  const int64_t found = first_bad.load();
  *first_non_finite = found == std::numeric_limits<int64_t>::max() ? -1 : found;
}

// The row functions of kOp for x's dtype: AVX-512 where `wide_rows` (REQUIRES:
// HasAvx512Rows(x.dtype)), else AVX2, reading pe split by parity where `by_parity`.
template <RowOp kOp>
RowFns RowFnsFor(DType dtype, bool unit, bool wide_rows, bool by_parity) {
  if (wide_rows) {
    if (dtype == DType::kBFloat16) {
      return unit ? Avx512RowFns<kOp, true, true>() : Avx512RowFns<kOp, true, false>();
    }
    return unit ? Avx512RowFns<kOp, false, true>() : Avx512RowFns<kOp, false, false>();
  }
  if (dtype == DType::kFloat32) {
    return unit ? RowFns{AddRowsF32Avx2<kOp, true, 2>, AddRowsF32Avx2<kOp, true, 1>}
                : RowFns{AddRowsF32Avx2<kOp, false, 2>, AddRowsF32Avx2<kOp, false, 1>};
  }
  if (dtype == DType::kBFloat16) {
    return unit ? Bf16Avx2RowFns<kOp, true>(by_parity) : Bf16Avx2RowFns<kOp, false>(by_parity);
  }
  return unit ? RowFns{AddRowsF16Avx2<kOp, true, 2>, AddRowsF16Avx2<kOp, true, 1>}
              : RowFns{AddRowsF16Avx2<kOp, false, 2>, AddRowsF16Avx2<kOp, false, 1>};
}

// The rows of kOp (the add's or the multiply's: the same row functions) for x's dtype, then
// RunRowsBlocked. wide: the AVX-512 rows where the dtype has them, else AVX2. Sets
// last_impl and last_layout. laid_out: pe's rows in kByParity16 are read by the AVX2
// bfloat16 rows.
template <RowOp kOp>
void RowsBlocked(TensorView x, const float* pe, LaidOutRows laid_out, float a, float b, bool wide,
                 int64_t* first_non_finite) {
  // The parity rows skip the NaN fix-up, so they take only scales that are not NaN.
  const bool wide_rows = wide && HasAvx512Rows(x.dtype);
  const bool by_parity = x.dtype == DType::kBFloat16 && laid_out.layout == &kByParity16 &&
                         laid_out.rows != nullptr && !wide_rows && !std::isnan(a) && !std::isnan(b);
  const RowFns fns = RowFnsFor<kOp>(x.dtype, a == 1.0f && b == 1.0f, wide_rows, by_parity);
  last_impl = wide_rows ? KernelImpl::kAvx512 : KernelImpl::kAvx2;
  last_layout = by_parity ? &kByParity16 : nullptr;
  RunRowsBlocked(x, by_parity ? laid_out.rows : pe, a, b, fns, first_non_finite);
}

// The multiply's scalar form, for MultiplyEncodingLoop.
template <int kDtype>
inline float LoadOne(const void* x, int64_t c) {
  if constexpr (kDtype == 0) return static_cast<const float*>(x)[c];
  if constexpr (kDtype == 1) return HalfToFloat(static_cast<const uint16_t*>(x)[c]);
  return BFloat16ToFloat(static_cast<const uint16_t*>(x)[c]);
}

template <int kDtype>
inline void StoreOne(void* x, int64_t c, float v) {
  if constexpr (kDtype == 0) static_cast<float*>(x)[c] = v;
  if constexpr (kDtype == 1) static_cast<uint16_t*>(x)[c] = FloatToHalf(v);
  if constexpr (kDtype == 2) static_cast<uint16_t*>(x)[c] = FloatToBFloat16(v);
}

// What a kernel that did not check its rows as it wrote them reports: a pass over x.
void ScanAfter(const TensorView& x, int64_t* first_non_finite) {
  if (first_non_finite != nullptr) {
    *first_non_finite = FirstNonFinite(x.dtype, x.data, x.NumElements());
  }
}

}  // namespace

void AddEncodingLoop(TensorView x, const float* pe, float input_scale, float pe_scale) {
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  switch (x.dtype) {
    case DType::kFloat32: {
      float* p = x.As<float>();
      AddLoop(
          nb, seq, dim, pe, input_scale, pe_scale, [p](int64_t i) { return p[i]; },
          [p](int64_t i, float v) { p[i] = v; });
      break;
    }
    case DType::kFloat16: {
      uint16_t* p = x.As<uint16_t>();
      AddLoop(
          nb, seq, dim, pe, input_scale, pe_scale, [p](int64_t i) { return HalfToFloat(p[i]); },
          [p](int64_t i, float v) { p[i] = FloatToHalf(v); });
      break;
    }
    case DType::kBFloat16: {
      uint16_t* p = x.As<uint16_t>();
      AddLoop(
          nb, seq, dim, pe, input_scale, pe_scale, [p](int64_t i) { return BFloat16ToFloat(p[i]); },
          [p](int64_t i, float v) { p[i] = FloatToBFloat16(v); });
      break;
    }
    default: break;
  }
}

absl::Status AddEncodingInPlace(TensorView x, const float* pe, float input_scale, float pe_scale,
                                KernelImpl implementation, LaidOutRows laid_out,
                                int64_t* first_non_finite) {
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  if (first_non_finite != nullptr) *first_non_finite = -1;
  if (nb == 0 || seq == 0 || dim == 0) return absl::OkStatus();
  KernelImpl impl = ChosenRows(x.dtype, implementation, /*multiply=*/false);
  if (impl == KernelImpl::kOneDnn) {
    absl::StatusOr<bool> done = AddWithOneDnn(x, pe, input_scale, pe_scale);
    if (!done.ok()) return done.status();
    if (*done) {
      last_impl = KernelImpl::kOneDnn;
      last_layout = nullptr;
      ScanAfter(x, first_non_finite);
      return absl::OkStatus();
    }
    // No JIT kernel for this dtype: kAuto's rows at this CPU's widest ISA.
    impl = ChosenRows(x.dtype, CpuBestIsa(), /*multiply=*/false);
  }
  if (impl == KernelImpl::kAvx2 || impl == KernelImpl::kAvx512) {
    RowsBlocked<RowOp::kAdd>(x, pe, laid_out, input_scale, pe_scale, impl == KernelImpl::kAvx512,
                             first_non_finite);
    return absl::OkStatus();
  }
  last_impl = KernelImpl::kScalar;
  last_layout = nullptr;
  AddEncodingLoop(x, pe, input_scale, pe_scale);
  ScanAfter(x, first_non_finite);
  return absl::OkStatus();
}

void MultiplyEncodingLoop(TensorView x, const float* pe, float input_scale, float pe_scale) {
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  for (int64_t n = 0; n < nb; ++n) {     // batch
    for (int64_t s = 0; s < seq; ++s) {  // seq
      char* row = static_cast<char*>(x.data) +
                  static_cast<size_t>((n * seq + s) * dim) * DTypeSize(x.dtype);
      const float* pe_row = pe + s * dim;
      for (int64_t c = 0; c < dim; ++c) {  // feature
        const float pb = pe_row[c] * pe_scale;
        switch (x.dtype) {
          case DType::kFloat32: StoreOne<0>(row, c, (LoadOne<0>(row, c) * input_scale) * pb); break;
          case DType::kFloat16: StoreOne<1>(row, c, (LoadOne<1>(row, c) * input_scale) * pb); break;
          case DType::kBFloat16:
            StoreOne<2>(row, c, (LoadOne<2>(row, c) * input_scale) * pb);
            break;
          default: return;
        }
      }
    }
  }
}

absl::Status MultiplyEncodingInPlace(TensorView x, const float* pe, float input_scale,
                                     float pe_scale, KernelImpl implementation,
                                     LaidOutRows laid_out, int64_t* first_non_finite) {
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  if (first_non_finite != nullptr) *first_non_finite = -1;
  if (nb == 0 || seq == 0 || dim == 0) return absl::OkStatus();
  // oneDNN is not used: its binary_mul broadcast re-reads pe per batch row, as for the add.
  const KernelImpl impl = ChosenRows(x.dtype, implementation, /*multiply=*/true);
  if (impl == KernelImpl::kAvx2 || impl == KernelImpl::kAvx512) {
    RowsBlocked<RowOp::kMultiply>(x, pe, laid_out, input_scale, pe_scale,
                                  impl == KernelImpl::kAvx512, first_non_finite);
    return absl::OkStatus();
  }
  last_impl = KernelImpl::kScalar;
  last_layout = nullptr;
  MultiplyEncodingLoop(x, pe, input_scale, pe_scale);
  ScanAfter(x, first_non_finite);
  return absl::OkStatus();
}

KernelImpl LastAddImplementation() { return last_impl; }

const AddRowLayout* LastAddRowLayout() { return last_layout; }

const AddRowLayout* AddRowLayoutFor(DType dtype, KernelImpl implementation) {
  if (dtype != DType::kBFloat16) return nullptr;
  return ChosenRows(dtype, implementation, /*multiply=*/false) == KernelImpl::kAvx2 ? &kByParity16
                                                                                    : nullptr;
}

}  // namespace posenc
