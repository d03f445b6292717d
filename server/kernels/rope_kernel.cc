#include "server/kernels/rope_kernel.h"

// GCC 12 reports the _mm512_undefined_* operands inside AVX-512 intrinsics (srli, cvtepi32_epi16,
// cvtps_ph, ...) as "may be used uninitialized" (GCC bug 105593) wherever they inline.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "server/kernels/isa.h"
#include "server/kernels/simd_convert.h"
#include "server/kernels/threads.h"

namespace posenc {
namespace {

// Below this many tensor bytes a rotation runs on the calling thread.

// Rotates rotary_dim features of one head in place. A pair is (x[k*step], x[k*step+offset])
// with step 2, offset 1 for interleaved pairs and step 1, offset half for rotate-half:
// the single pair offset ggml's rotate_pairs uses.
using RotateHeadFn = void (*)(float* x, const float* cos, const float* sin, int64_t half);

inline void RotatePairsScalar(float* x, const float* cos, const float* sin, int64_t k0,
                              int64_t half, int64_t step, int64_t offset) {
  for (int64_t k = k0; k < half; ++k) {
    float* a = x + k * step;
    float* b = a + offset;
    const float xa = *a;
    const float xb = *b;
    *a = xa * cos[k] - xb * sin[k];
    *b = xb * cos[k] + xa * sin[k];
  }
}

void RotateHalfScalar(float* x, const float* cos, const float* sin, int64_t half) {
  RotatePairsScalar(x, cos, sin, 0, half, 1, half);
}

void InterleavedScalar(float* x, const float* cos, const float* sin, int64_t half) {
  RotatePairsScalar(x, cos, sin, 0, half, 2, 1);
}

__attribute__((target("avx2,fma"))) void RotateHalfAvx2(float* x, const float* cos,
                                                        const float* sin, int64_t half) {
  float* x2 = x + half;
  int64_t k = 0;
  for (; k + 8 <= half; k += 8) {
    const __m256 a = _mm256_loadu_ps(x + k);
    const __m256 b = _mm256_loadu_ps(x2 + k);
    const __m256 c = _mm256_loadu_ps(cos + k);
    const __m256 s = _mm256_loadu_ps(sin + k);
    _mm256_storeu_ps(x + k, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
    _mm256_storeu_ps(x2 + k, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
  }
  RotatePairsScalar(x, cos, sin, k, half, 1, half);
}

__attribute__((target("avx2,fma"))) void InterleavedAvx2(float* x, const float* cos,
                                                         const float* sin, int64_t half) {
  int64_t k = 0;
  // 4 pairs = 8 floats per step: cos/sin duplicated onto both lanes of their pair; then
  // fmaddsub gives x_a*c - x_b*s on even lanes and x_b*c + x_a*s on odd ones.
  for (; k + 4 <= half; k += 4) {
    const __m256 v = _mm256_loadu_ps(x + 2 * k);
    const __m128 c4 = _mm_loadu_ps(cos + k);
    const __m128 s4 = _mm_loadu_ps(sin + k);
    const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
    const __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
    const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x_b, x_a) in every pair
    _mm256_storeu_ps(x + 2 * k, _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(swapped, s)));
  }
  RotatePairsScalar(x, cos, sin, k, half, 2, 1);
}

// All heads of one float32 token, interleaved pairs, from the token's duplicated cos/sin
// tables (RopeTokenTables: c[2k] = c[2k+1] = cos_k, zero-padded to a multiple of 16), so
// the per-head loop needs no shuffles of cos/sin. Same arithmetic as InterleavedAvx2.
__attribute__((target("avx2,fma"))) inline void PairStepF32(float* x, const float* c,
                                                           const float* s) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x_b, x_a) in every pair
  _mm256_storeu_ps(x, _mm256_fmaddsub_ps(v, _mm256_loadu_ps(c),
                                         _mm256_mul_ps(swapped, _mm256_loadu_ps(s))));
}

__attribute__((target("avx2,fma"))) void InterleavedTokenF32Avx2(float* x, int64_t heads,
                                                                 int64_t head_stride,
                                                                 const float* c,
                                                                 const float* s, int64_t half) {
  const int64_t n = 2 * half;
  const int64_t full = n & ~int64_t{7};
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    int64_t i = 0;
    for (; i + 32 <= full; i += 32) {  // four independent vectors per iteration
      PairStepF32(x + i, c + i, s + i);
      PairStepF32(x + i + 8, c + i + 8, s + i + 8);
      PairStepF32(x + i + 16, c + i + 16, s + i + 16);
      PairStepF32(x + i + 24, c + i + 24, s + i + 24);
    }
    for (; i < full; i += 8) PairStepF32(x + i, c + i, s + i);
    for (int64_t j = full; j < n; j += 2) {  // the last < 4 pairs, as RotatePairsScalar
      const float xa = x[j];
      const float xb = x[j + 1];
      x[j] = xa * c[j] - xb * s[j];
      x[j + 1] = xb * c[j] + xa * s[j];
    }
  }
}

__attribute__((target("avx512f"))) void RotateHalfAvx512(float* x, const float* cos,
                                                         const float* sin, int64_t half) {
  float* x2 = x + half;
  int64_t k = 0;
  for (; k + 16 <= half; k += 16) {
    const __m512 a = _mm512_loadu_ps(x + k);
    const __m512 b = _mm512_loadu_ps(x2 + k);
    const __m512 c = _mm512_loadu_ps(cos + k);
    const __m512 s = _mm512_loadu_ps(sin + k);
    _mm512_storeu_ps(x + k, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
    _mm512_storeu_ps(x2 + k, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
  }
  // The remainder (< 16 pairs) under a mask rather than a scalar loop: head sizes such as
  // 64 or 80 leave 8 or 0.
  if (k < half) {
    const __mmask16 m = static_cast<__mmask16>((1u << (half - k)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(m, x + k);
    const __m512 b = _mm512_maskz_loadu_ps(m, x2 + k);
    const __m512 c = _mm512_maskz_loadu_ps(m, cos + k);
    const __m512 s = _mm512_maskz_loadu_ps(m, sin + k);
    _mm512_mask_storeu_ps(x + k, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
    _mm512_mask_storeu_ps(x2 + k, m, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
  }
}

// Loads the first `count` (<= 8) floats of p and duplicates each onto a pair of lanes:
// [p0 p0 p1 p1 .. p7 p7]. (Masked load and permutex2var: the cast/permutexvar route draws
// GCC 12's false "may be used uninitialized" on the undefined upper half.)
__attribute__((target("avx512f"))) inline __m512 LoadDuplicated(const float* p, unsigned count) {
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p);
  return _mm512_permutex2var_ps(v, dup, v);
}

__attribute__((target("avx512f"))) void InterleavedAvx512(float* x, const float* cos,
                                                          const float* sin, int64_t half) {
  int64_t k = 0;
  for (; k + 8 <= half; k += 8) {
    const __m512 v = _mm512_loadu_ps(x + 2 * k);
    const __m512 c = LoadDuplicated(cos + k, 8);
    const __m512 s = LoadDuplicated(sin + k, 8);
    const __m512 swapped = _mm512_shuffle_ps(v, v, 0xB1);  // (x_b, x_a) in every pair
    _mm512_storeu_ps(x + 2 * k, _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(swapped, s)));
  }
  if (k < half) {  // fewer than 8 pairs left: the same under a mask
    const unsigned pairs = static_cast<unsigned>(half - k);
    const __mmask16 m = static_cast<__mmask16>((1u << (2 * pairs)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + 2 * k);
    const __m512 c = LoadDuplicated(cos + k, pairs);
    const __m512 s = LoadDuplicated(sin + k, pairs);
    const __m512 swapped = _mm512_shuffle_ps(v, v, 0xB1);
    _mm512_mask_storeu_ps(x + 2 * k, m, _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(swapped, s)));
  }
}

// ---------------------------------------------------------------------------------------
// 16-bit heads rotated in registers: each vector of halves is widened, rotated with the
// same FMA formula as the float32 vector kernels, and rounded once to nearest even (NaN
// as FloatToHalf / FloatToBFloat16 give it), with no float32 staging buffer. The caller
// lays out each token's cos/sin once for all its heads (RopeTokenTables), zero-padded to
// a multiple of 16 so every vector step, tails included, loads them directly:
//   rotate-half: c[k] = cos_k, s[k] = sin_k for k < half;
//   interleaved: c[2k] = c[2k+1] = cos_k, s likewise.
// Tails (fewer than one vector of features) go through a small zeroed buffer, so every
// feature takes the same vector arithmetic.
using RotateToken16Fn = void (*)(uint16_t* x, int64_t heads, int64_t head_stride,
                                 const float* c, const float* s, int64_t half);
using RotateTokenF32Fn = void (*)(float* x, int64_t heads, int64_t head_stride,
                                  const float* c, const float* s, int64_t half);

template <bool kBf16>
__attribute__((target("avx2,f16c"))) inline __m256 Load8(const uint16_t* p) {
  if constexpr (kBf16) {
    return simd::LoadBf16x8(p);
  } else {
    return simd::LoadF16x8(p);
  }
}

// float16 through VCVTPS2PH alone, as the AVX-512 kernels do (a NaN result keeps the quiet
// NaN it gives, not FloatToHalf's canonical bits).
template <bool kBf16>
__attribute__((target("avx2,f16c"))) inline void Store8(uint16_t* p, __m256 v) {
  if constexpr (kBf16) {
    simd::StoreBf16x8(p, v);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// 8 rotate-half pairs: xa[0..8) with xb[0..8).
template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) inline void HalfStep8(uint16_t* xa, uint16_t* xb,
                                                              const float* c, const float* s) {
  const __m256 a = Load8<kBf16>(xa);
  const __m256 b = Load8<kBf16>(xb);
  const __m256 vc = _mm256_loadu_ps(c);
  const __m256 vs = _mm256_loadu_ps(s);
  Store8<kBf16>(xa, _mm256_fmsub_ps(a, vc, _mm256_mul_ps(b, vs)));
  Store8<kBf16>(xb, _mm256_fmadd_ps(b, vc, _mm256_mul_ps(a, vs)));
}

// 8 interleaved features (4 pairs); c and s hold each pair's value twice.
template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) inline void PairStep8(uint16_t* x, const float* c,
                                                              const float* s) {
  const __m256 v = Load8<kBf16>(x);
  const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x_b, x_a) in every pair
  Store8<kBf16>(x, _mm256_fmaddsub_ps(v, _mm256_loadu_ps(c),
                                      _mm256_mul_ps(swapped, _mm256_loadu_ps(s))));
}

template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) void RotateHalfToken16Avx2(
    uint16_t* x, int64_t heads, int64_t head_stride, const float* c, const float* s,
    int64_t half) {
  const int64_t full = half & ~int64_t{7};
  const size_t tail_bytes = static_cast<size_t>(half - full) * 2;
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    uint16_t* x2 = x + half;
    for (int64_t k = 0; k < full; k += 8) HalfStep8<kBf16>(x + k, x2 + k, c + k, s + k);
    if (tail_bytes != 0) {
      uint16_t ta[8] = {}, tb[8] = {};
      std::memcpy(ta, x + full, tail_bytes);
      std::memcpy(tb, x2 + full, tail_bytes);
      HalfStep8<kBf16>(ta, tb, c + full, s + full);
      std::memcpy(x + full, ta, tail_bytes);
      std::memcpy(x2 + full, tb, tail_bytes);
    }
  }
}

template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) void InterleavedToken16Avx2(
    uint16_t* x, int64_t heads, int64_t head_stride, const float* c, const float* s,
    int64_t half) {
  const int64_t n = 2 * half;
  const int64_t full = n & ~int64_t{7};
  const size_t tail_bytes = static_cast<size_t>(n - full) * 2;
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    for (int64_t i = 0; i < full; i += 8) PairStep8<kBf16>(x + i, c + i, s + i);
    if (tail_bytes != 0) {
      uint16_t t[8] = {};
      std::memcpy(t, x + full, tail_bytes);
      PairStep8<kBf16>(t, c + full, s + full);
      std::memcpy(x + full, t, tail_bytes);
    }
  }
}

// bfloat16 with AVX2, 16 lanes per 256-bit vector split by parity (the AVX-512 parity
// kernels below do the same 32 at a time): as 32-bit words, element 2j is the low half of
// word j and 2j+1 the high half, so `word << 16` and `word & 0xffff0000` are the even and
// odd elements as floats, and a result goes back with one shift or one mask and an OR: no
// pack or lane-crossing permute. Rounding is FloatToBFloat16's integer round to nearest even
// (bits + 0x7fff + lsb). A NaN needs no special case here: every NaN these FMAs give is a
// widened bfloat16 input quieted (low 16 bits zero) or the default NaN, so the rounding add
// never carries out of its payload and the result is a NaN (as the header allows).
__attribute__((target("avx2"))) inline __m256i RoundedBf16High(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}

__attribute__((target("avx2"))) inline __m256 EvenBf16x8(__m256i w) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
__attribute__((target("avx2"))) inline __m256 OddBf16x8(__m256i w) {
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// 16 bfloat16 from the even and odd results, in element order.
__attribute__((target("avx2"))) inline void StoreEvenOddBf16x16(uint16_t* p, __m256 even,
                                                                __m256 odd) {
  const __m256i lo = _mm256_srli_epi32(RoundedBf16High(even), 16);
  const __m256i hi = _mm256_and_si256(RoundedBf16High(odd),
                                      _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_or_si256(lo, hi));
}

__attribute__((target("avx2"))) inline __m256i LoadWords(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Interleaved pairs: c[k] = cos_k (each 16-lane vector is 8 pairs). REQUIRES: half % 8 == 0.
__attribute__((target("avx2,fma"))) void InterleavedTokenBf16EvenOddAvx2(
    uint16_t* x, int64_t heads, int64_t head_stride, const float* c, const float* s,
    int64_t half) {
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    for (int64_t k = 0; k < half; k += 8) {  // pairs k..k+7: features 2k..2k+15
      const __m256i v = LoadWords(x + 2 * k);
      const __m256 vc = _mm256_loadu_ps(c + k), vs = _mm256_loadu_ps(s + k);
      const __m256 e = EvenBf16x8(v), o = OddBf16x8(v);
      StoreEvenOddBf16x16(x + 2 * k, _mm256_fmsub_ps(e, vc, _mm256_mul_ps(o, vs)),
                          _mm256_fmadd_ps(o, vc, _mm256_mul_ps(e, vs)));
    }
  }
}

// Rotate-half: tables split by parity in blocks of 16 features, c[16b + j] = cos_{16b+2j},
// c[16b + 8 + j] = cos_{16b+2j+1} (j < 8). REQUIRES: half % 16 == 0.
__attribute__((target("avx2,fma"))) void RotateHalfTokenBf16EvenOddAvx2(
    uint16_t* x, int64_t heads, int64_t head_stride, const float* c, const float* s,
    int64_t half) {
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    uint16_t* x2 = x + half;
    for (int64_t k = 0; k < half; k += 16) {
      const __m256i va = LoadWords(x + k), vb = LoadWords(x2 + k);
      const __m256 ce = _mm256_loadu_ps(c + k), co = _mm256_loadu_ps(c + k + 8);
      const __m256 se = _mm256_loadu_ps(s + k), so = _mm256_loadu_ps(s + k + 8);
      const __m256 ae = EvenBf16x8(va), ao = OddBf16x8(va);
      const __m256 be = EvenBf16x8(vb), bo = OddBf16x8(vb);
      StoreEvenOddBf16x16(x + k, _mm256_fmsub_ps(ae, ce, _mm256_mul_ps(be, se)),
                          _mm256_fmsub_ps(ao, co, _mm256_mul_ps(bo, so)));
      StoreEvenOddBf16x16(x2 + k, _mm256_fmadd_ps(be, ce, _mm256_mul_ps(ae, se)),
                          _mm256_fmadd_ps(bo, co, _mm256_mul_ps(ao, so)));
    }
  }
}

// The same 16 floats at a time with AVX-512F. kNative: bfloat16 rounded with
// VCVTNEPS2BF16 (AVX512_BF16), else with integer ops. float16 goes through VCVTPS2PH
// alone: a NaN result keeps the quiet NaN it gives rather than FloatToHalf's canonical one
// (a NaN either way; its bits are not part of RoPE's contract), which spares a compare and
// a branch per vector: 10-18% on [2048,32,128] (AMD EPYC).
template <bool kBf16>
__attribute__((target("avx512f"))) inline __m512 Load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (kBf16) {
    return simd::WidenBf16x16(h);
  } else {
    return simd::WidenF16x16(h);
  }
}

template <bool kBf16, bool kNative>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16"))) inline void Store16(
    uint16_t* p, __m512 v) {
  __m256i h;
  if constexpr (!kBf16) {
    h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else if constexpr (kNative) {
    h = simd::NarrowBf16x16Native(v);
  } else {
    h = simd::NarrowBf16x16(v);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
}

#define POSENC_AVX512_16 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))

template <bool kBf16, bool kNative>
POSENC_AVX512_16 inline void HalfStep16(uint16_t* xa, uint16_t* xb, const float* c,
                                        const float* s) {
  const __m512 a = Load16<kBf16>(xa);
  const __m512 b = Load16<kBf16>(xb);
  const __m512 vc = _mm512_loadu_ps(c);
  const __m512 vs = _mm512_loadu_ps(s);
  Store16<kBf16, kNative>(xa, _mm512_fmsub_ps(a, vc, _mm512_mul_ps(b, vs)));
  Store16<kBf16, kNative>(xb, _mm512_fmadd_ps(b, vc, _mm512_mul_ps(a, vs)));
}

template <bool kBf16, bool kNative>
POSENC_AVX512_16 inline void PairStep16(uint16_t* x, const float* c, const float* s) {
  const __m512 v = Load16<kBf16>(x);
  const __m512 swapped = _mm512_permute_ps(v, 0xB1);
  Store16<kBf16, kNative>(x, _mm512_fmaddsub_ps(v, _mm512_loadu_ps(c),
                                                _mm512_mul_ps(swapped, _mm512_loadu_ps(s))));
}

template <bool kBf16, bool kNative>
POSENC_AVX512_16 void RotateHalfToken16Avx512(uint16_t* x, int64_t heads, int64_t head_stride,
                                              const float* c, const float* s, int64_t half) {
  const int64_t full = half & ~int64_t{15};
  const size_t tail_bytes = static_cast<size_t>(half - full) * 2;
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    uint16_t* x2 = x + half;
    for (int64_t k = 0; k < full; k += 16) {
      HalfStep16<kBf16, kNative>(x + k, x2 + k, c + k, s + k);
    }
    if (tail_bytes != 0) {
      uint16_t ta[16] = {}, tb[16] = {};
      std::memcpy(ta, x + full, tail_bytes);
      std::memcpy(tb, x2 + full, tail_bytes);
      HalfStep16<kBf16, kNative>(ta, tb, c + full, s + full);
      std::memcpy(x + full, ta, tail_bytes);
      std::memcpy(x2 + full, tb, tail_bytes);
    }
  }
}

template <bool kBf16, bool kNative>
POSENC_AVX512_16 void InterleavedToken16Avx512(uint16_t* x, int64_t heads, int64_t head_stride,
                                               const float* c, const float* s, int64_t half) {
  const int64_t n = 2 * half;
  const int64_t full = n & ~int64_t{15};
  const size_t tail_bytes = static_cast<size_t>(n - full) * 2;
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    for (int64_t i = 0; i < full; i += 16) PairStep16<kBf16, kNative>(x + i, c + i, s + i);
    if (tail_bytes != 0) {
      uint16_t t[16] = {};
      std::memcpy(t, x + full, tail_bytes);
      PairStep16<kBf16, kNative>(t, c + full, s + full);
      std::memcpy(x + full, t, tail_bytes);
    }
  }
}

// bfloat16 32 lanes at a time, split by parity rather than widened in order: as 32-bit
// words, a vector of 32 bfloat16 holds element 2j in the low half of word j and 2j+1 in
// the high half, so `word << 16` and `word & 0xffff0000` are the even and odd elements as
// floats (one cheap op per 16 lanes, where an in-order widen takes a lane-crossing
// VPMOVZXWD and a shift). VCVTNE2PS2BF16 narrows both halves in one instruction and one
// VPERMW puts the elements back in order. Same FMA formula and rounding as HalfStep16 /
// PairStep16, so bit-identical to them; a float32 denormal result (which VCVTNE2PS2BF16
// flushes) takes the integer rounding. Needs AVX512_BF16.
// Per token the tables are, for interleaved pairs, c[k] = cos_k (each 32-lane vector is 16
// pairs); for rotate-half, each block of 32 features split by parity:
// c[32b + j] = cos_{32b + 2j}, c[32b + 16 + j] = cos_{32b + 2j + 1} (j < 16).
// 32 bfloat16 as two 256-bit loads: on this project's AMD EPYC a 512-bit load of data not
// yet in cache ran the whole kernel at half speed (a standalone loop: 24 against 53 GB/s,
// one thread).
POSENC_AVX512_16 inline __m512i LoadBf16x32(const uint16_t* p) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)), 1);
}

POSENC_AVX512_16 inline __m512 EvenBf16(__m512i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
POSENC_AVX512_16 inline __m512 OddBf16(__m512i v) {
  const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  return _mm512_castsi512_ps(_mm512_and_si512(v, high_halves));
}

// Stores the even and odd results back in element order as bfloat16.
POSENC_AVX512_16 inline void StoreEvenOddBf16(uint16_t* p, __m512 even, __m512 odd,
                                               __m512i order) {
  __m512i halves;  // words 0..15: even elements, 16..31: odd
  const __mmask16 denormal =
      _mm512_fpclass_ps_mask(even, 0x20) | _mm512_fpclass_ps_mask(odd, 0x20);
  if (__builtin_expect(denormal == 0, 1)) {
    halves = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
  } else {
    halves = _mm512_inserti64x4(_mm512_castsi256_si512(simd::NarrowBf16x16(even)),
                                simd::NarrowBf16x16(odd), 1);
  }
  _mm512_storeu_si512(p, _mm512_permutexvar_epi16(order, halves));
}

// src[0..n) split by parity in blocks of 32: dst[32b + j] = src[32b + 2j],
// dst[32b + 16 + j] = src[32b + 2j + 1]. REQUIRES: n % 32 == 0.
POSENC_AVX512_16 void SplitByParity(const float* src, float* dst, int64_t n) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t b = 0; b < n; b += 32) {
    const __m512 lo = _mm512_loadu_ps(src + b), hi = _mm512_loadu_ps(src + b + 16);
    _mm512_storeu_ps(dst + b, _mm512_permutex2var_ps(lo, even, hi));
    _mm512_storeu_ps(dst + b + 16, _mm512_permutex2var_ps(lo, odd, hi));
  }
}

// VPERMW indices that interleave [even 0..15 | odd 0..15] into element order.
POSENC_AVX512_16 inline __m512i EvenOddOrder() {
  alignas(64) static const uint16_t kOrder[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                  21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                                  11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_load_si512(kOrder);
}

// REQUIRES: half % 32 == 0.
POSENC_AVX512_16 void RotateHalfTokenBf16EvenOdd(uint16_t* x, int64_t heads,
                                                 int64_t head_stride, const float* c,
                                                 const float* s, int64_t half) {
  const __m512i order = EvenOddOrder();
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    uint16_t* x2 = x + half;
    for (int64_t k = 0; k < half; k += 32) {
      const __m512i va = LoadBf16x32(x + k);
      const __m512i vb = LoadBf16x32(x2 + k);
      const __m512 ce = _mm512_loadu_ps(c + k), co = _mm512_loadu_ps(c + k + 16);
      const __m512 se = _mm512_loadu_ps(s + k), so = _mm512_loadu_ps(s + k + 16);
      const __m512 ae = EvenBf16(va), ao = OddBf16(va);
      const __m512 be = EvenBf16(vb), bo = OddBf16(vb);
      StoreEvenOddBf16(x + k, _mm512_fmsub_ps(ae, ce, _mm512_mul_ps(be, se)),
                       _mm512_fmsub_ps(ao, co, _mm512_mul_ps(bo, so)), order);
      StoreEvenOddBf16(x2 + k, _mm512_fmadd_ps(be, ce, _mm512_mul_ps(ae, se)),
                       _mm512_fmadd_ps(bo, co, _mm512_mul_ps(ao, so)), order);
    }
  }
}

// REQUIRES: half % 16 == 0.
POSENC_AVX512_16 void InterleavedTokenBf16EvenOdd(uint16_t* x, int64_t heads,
                                                  int64_t head_stride, const float* c,
                                                  const float* s, int64_t half) {
  const __m512i order = EvenOddOrder();
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    int64_t k = 0;
    for (; k + 32 <= half; k += 32) {  // two groups of 16 pairs: independent chains
      const __m512i v0 = LoadBf16x32(x + 2 * k), v1 = LoadBf16x32(x + 2 * k + 32);
      const __m512 c0 = _mm512_loadu_ps(c + k), s0 = _mm512_loadu_ps(s + k);
      const __m512 c1 = _mm512_loadu_ps(c + k + 16), s1 = _mm512_loadu_ps(s + k + 16);
      const __m512 e0 = EvenBf16(v0), o0 = OddBf16(v0), e1 = EvenBf16(v1), o1 = OddBf16(v1);
      StoreEvenOddBf16(x + 2 * k, _mm512_fmsub_ps(e0, c0, _mm512_mul_ps(o0, s0)),
                       _mm512_fmadd_ps(o0, c0, _mm512_mul_ps(e0, s0)), order);
      StoreEvenOddBf16(x + 2 * k + 32, _mm512_fmsub_ps(e1, c1, _mm512_mul_ps(o1, s1)),
                       _mm512_fmadd_ps(o1, c1, _mm512_mul_ps(e1, s1)), order);
    }
    for (; k < half; k += 16) {  // pairs k..k+15: features 2k..2k+31
      const __m512i v = LoadBf16x32(x + 2 * k);
      const __m512 vc = _mm512_loadu_ps(c + k), vs = _mm512_loadu_ps(s + k);
      const __m512 e = EvenBf16(v), o = OddBf16(v);
      StoreEvenOddBf16(x + 2 * k, _mm512_fmsub_ps(e, vc, _mm512_mul_ps(o, vs)),
                       _mm512_fmadd_ps(o, vc, _mm512_mul_ps(e, vs)), order);
    }
  }
}

#undef POSENC_AVX512_16

struct RotateFns {
  RotateHeadFn rotate_half;
  RotateHeadFn interleaved;
};

RotateFns FnsFor(RopeIsa isa) {
  switch (isa) {
    case RopeIsa::kAvx512: return {RotateHalfAvx512, InterleavedAvx512};
    case RopeIsa::kAvx2: return {RotateHalfAvx2, InterleavedAvx2};
    case RopeIsa::kScalar: return {RotateHalfScalar, InterleavedScalar};
    case RopeIsa::kAuto: break;
  }
  return FnsFor(RopeBestIsa());
}

// The 16-bit AVX-512 kernels use AVX512BW/VL/DQ encodings too.
bool HasAvx512ForSixteenBit() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq");
  return has;
}

// How a fused 16-bit kernel wants each token's cos/sin laid out (see RopeTokenTables).
// kEvenOdd: the AVX-512 parity kernels (rotate-half split in blocks of 32);
// kEvenOdd16: the AVX2 ones (blocks of 16). Interleaved pairs take plain cos/sin for both.
enum class TableLayout { kPaired, kEvenOdd, kEvenOdd16 };

struct Token16Kernel {
  RotateToken16Fn fn = nullptr;
  TableLayout layout = TableLayout::kPaired;
};

// The fused 16-bit kernel for `isa` (already resolved from kAuto), or none where the
// widen-rotate-narrow staging below serves (scalar, or no F16C).
// bfloat16 with AVX512_BF16 takes the parity-split kernels where whole vectors cover the
// rotated features: on an AMD EPYC, 2 threads, [4,2048,32,128] 1.58 -> 1.29 ms (NeoX) and
// 1.77 -> 1.50 ms (GPT-J), [1,2048,32,128] 0.36 -> 0.27 and 0.41 -> 0.33 ms.
Token16Kernel Token16KernelFor(RopeIsa isa, DType dtype, RopePairing pairing, int64_t half) {
  const bool bf16 = dtype == DType::kBFloat16;
  const bool half_pairs = pairing == RopePairing::kRotateHalf;
  if (isa == RopeIsa::kAvx512 && HasAvx512ForSixteenBit()) {
    if (!bf16) {
      return {half_pairs ? RotateHalfToken16Avx512<false, false>
                         : InterleavedToken16Avx512<false, false>};
    }
    if (simd::HasAvx512Bf16()) {
      if (half_pairs && half % 32 == 0) {
        return {RotateHalfTokenBf16EvenOdd, TableLayout::kEvenOdd};
      }
      if (!half_pairs && half % 16 == 0) {
        return {InterleavedTokenBf16EvenOdd, TableLayout::kEvenOdd};
      }
      return {half_pairs ? RotateHalfToken16Avx512<true, true>
                         : InterleavedToken16Avx512<true, true>};
    }
    return {half_pairs ? RotateHalfToken16Avx512<true, false>
                       : InterleavedToken16Avx512<true, false>};
  }
  if ((isa == RopeIsa::kAvx2 || isa == RopeIsa::kAvx512) && simd::HasAvx2F16c() &&
      RopeIsaSupported(RopeIsa::kAvx2)) {
    if (bf16) {
      if (half_pairs && half % 16 == 0) {
        return {RotateHalfTokenBf16EvenOddAvx2, TableLayout::kEvenOdd16};
      }
      if (!half_pairs && half % 8 == 0) {
        return {InterleavedTokenBf16EvenOddAvx2, TableLayout::kEvenOdd16};
      }
      return {half_pairs ? RotateHalfToken16Avx2<true> : InterleavedToken16Avx2<true>};
    }
    return {half_pairs ? RotateHalfToken16Avx2<false> : InterleavedToken16Avx2<false>};
  }
  return {};
}

// Lays out one token's cos/sin for the fused 16-bit kernels (see RotateToken16Fn) in
// c and s, each of at least PaddedTableSize floats.
int64_t PaddedTableSize(int64_t half) { return (2 * half + 15) / 16 * 16; }

void RopeTokenTables(RopePairing pairing, TableLayout layout, const float* cos,
                     const float* sin, int64_t half, float* c, float* s) {
  const int64_t padded = PaddedTableSize(half);
  if (layout == TableLayout::kEvenOdd && pairing == RopePairing::kRotateHalf) {
    // Only the AVX-512 parity kernels ask for this layout; half % 32 == 0 for them.
    SplitByParity(cos, c, half);
    SplitByParity(sin, s, half);
    return;
  }
  if (layout == TableLayout::kEvenOdd16 && pairing == RopePairing::kRotateHalf) {
    for (int64_t b = 0; b < half; b += 16) {  // half % 16 == 0 for these kernels
      for (int64_t j = 0; j < 8; ++j) {
        c[b + j] = cos[b + 2 * j];
        c[b + 8 + j] = cos[b + 2 * j + 1];
        s[b + j] = sin[b + 2 * j];
        s[b + 8 + j] = sin[b + 2 * j + 1];
      }
    }
    return;
  }
  if (pairing == RopePairing::kRotateHalf || layout != TableLayout::kPaired) {
    std::memcpy(c, cos, static_cast<size_t>(half) * sizeof(float));
    std::memcpy(s, sin, static_cast<size_t>(half) * sizeof(float));
    std::fill(c + half, c + padded, 0.0f);
    std::fill(s + half, s + padded, 0.0f);
  } else {
    for (int64_t k = 0; k < half; ++k) {
      c[2 * k] = c[2 * k + 1] = cos[k];
      s[2 * k] = s[2 * k + 1] = sin[k];
    }
    std::fill(c + 2 * half, c + padded, 0.0f);
    std::fill(s + 2 * half, s + padded, 0.0f);
  }
}

}  // namespace

bool RopeIsaSupported(RopeIsa isa) {
  switch (isa) {
    case RopeIsa::kAuto:
    case RopeIsa::kScalar: return true;
    case RopeIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case RopeIsa::kAvx512: return __builtin_cpu_supports("avx512f");
  }
  return false;
}

// SetIsaOverride's ISA as a RopeIsa, if one is set.
std::optional<RopeIsa> OverriddenRopeIsa() {
  const std::optional<Isa> forced = IsaOverride();
  if (!forced) return std::nullopt;
  switch (*forced) {
    case Isa::kScalar: return RopeIsa::kScalar;
    case Isa::kAvx2: return RopeIsa::kAvx2;
    case Isa::kAvx512: return RopeIsa::kAvx512;
  }
  return std::nullopt;
}

RopeIsa RopeBestIsa() {
  if (const std::optional<RopeIsa> forced = OverriddenRopeIsa()) return *forced;
  static const RopeIsa best = [] {
    // POSENC_ROPE_ISA=scalar|avx2|avx512 pins the choice (benchmarks, CI comparisons); an
    // unsupported or unknown value falls through to the default.
    if (const char* pin = std::getenv("POSENC_ROPE_ISA"); pin != nullptr) {
      const std::string_view v(pin);
      if (v == "scalar") return RopeIsa::kScalar;
      if (v == "avx2" && RopeIsaSupported(RopeIsa::kAvx2)) return RopeIsa::kAvx2;
      if (v == "avx512" && RopeIsaSupported(RopeIsa::kAvx512)) return RopeIsa::kAvx512;
    }
    // AVX-512 only on Intel: on an AMD EPYC with AVX-512 the 512-bit path measured no
    // faster than AVX2 in cache and 1.7-2.5x slower on a 32 MiB tensor (rotate-half,
    // [2048, 32, 128] fp32), so AMD gets AVX2.
    if (RopeIsaSupported(RopeIsa::kAvx512) && __builtin_cpu_is("intel")) {
      return RopeIsa::kAvx512;
    }
    if (RopeIsaSupported(RopeIsa::kAvx2)) return RopeIsa::kAvx2;
    return RopeIsa::kScalar;
  }();
  return best;
}

RopeIsa RopeBestIsa16(DType dtype) {
  // A POSENC_ROPE_ISA pin applies to every dtype. (Read once: getenv is on every call's path.)
  static const bool pinned = [] {
    const char* pin = std::getenv("POSENC_ROPE_ISA");
    return pin != nullptr && *pin != 0;
  }();
  if (pinned || IsaOverride()) return RopeBestIsa();
  // The fused 16-bit kernels are bound by the conversions, where 16 lanes per instruction
  // pay even on AMD: on an AMD EPYC (AVX-512, AVX512_BF16) [4,2048,32,128] took 1.5 ms with
  // AVX-512 against 3.5 ms (bf16) and 2.1 ms (fp16) with AVX2, [1,128,12,64] 0.013 ms
  // against 0.028 / 0.020. So every CPU with AVX-512 (F, BW, VL) takes it for both dtypes.
  (void)dtype;
  if (HasAvx512ForSixteenBit()) return RopeIsa::kAvx512;
  return RopeBestIsa();
}

void RopeRotateInPlace(const TensorView& x, const RopeGeometry& g, RopePairing pairing,
                       int rotary_dim, absl::Span<const float* const> token_rows, RopeIsa isa) {
  // Every part of the path (rotation, fused 16-bit kernels, the staging conversions) runs
  // on one resolved ISA, so a pin to scalar never reaches F16C.
  const bool wide = x.dtype == DType::kFloat32;
  const RopeIsa resolved =
      isa != RopeIsa::kAuto ? isa : wide ? RopeBestIsa() : RopeBestIsa16(x.dtype);
  const RotateFns fns = FnsFor(resolved);
  const RotateHeadFn rotate =
      pairing == RopePairing::kRotateHalf ? fns.rotate_half : fns.interleaved;
  const int64_t half = rotary_dim / 2;
  const size_t elem = DTypeSize(x.dtype);
  auto* bytes = static_cast<unsigned char*>(x.data);
  const bool simd_convert = resolved != RopeIsa::kScalar && simd::HasAvx2F16c();
  const Token16Kernel kernel16 =
      wide ? Token16Kernel{} : Token16KernelFor(resolved, x.dtype, pairing, half);
  const RotateToken16Fn rotate16 = kernel16.fn;
  const RotateTokenF32Fn rotate32 =
      wide && pairing == RopePairing::kInterleaved && resolved == RopeIsa::kAvx2
          ? InterleavedTokenF32Avx2
          : nullptr;
  const bool tabled = rotate16 != nullptr || rotate32 != nullptr;
  // Small tensors stay on the calling thread; large ones split the tokens across the kernel
  // threads when no other call holds them (KernelThreadLease).
  const KernelThreadLease lease(WorkBytes(x.NumElements()));
  const int threads = lease.threads();
  const int64_t tokens = g.batch * g.seq;
  ParallelFor(threads, tokens, [&](int64_t first, int64_t last) {
    // 16-bit heads are rotated in registers (rotate16, from per-token cos/sin tables), or
    // else widened into this buffer, rotated, and narrowed back.
    std::vector<float> widened(wide || rotate16 != nullptr ? 0 : rotary_dim);
    std::vector<float> tables(tabled ? 2 * PaddedTableSize(half) : 0);
    float* table_c = tables.data();
    float* table_s = table_c + (tabled ? PaddedTableSize(half) : 0);
    for (int64_t t = first; t < last; ++t) {  // batch * seq
      const int64_t b = t / g.seq, s = t % g.seq;
      const float* row = token_rows[t];
      const float* cos = row;
      const float* sin = row + half;
      if (rotate16 != nullptr || rotate32 != nullptr) {  // whole token from shared tables
        RopeTokenTables(pairing, kernel16.layout, cos, sin, half, table_c, table_s);
        const int64_t offset = b * g.batch_stride + s * g.seq_stride;
        if (rotate16 != nullptr) {
          rotate16(reinterpret_cast<uint16_t*>(bytes) + offset, g.heads, g.head_stride, table_c,
                   table_s, half);
        } else {
          rotate32(reinterpret_cast<float*>(bytes) + offset, g.heads, g.head_stride, table_c,
                   table_s, half);
        }
        continue;
      }
      for (int64_t h = 0; h < g.heads; ++h) {  // head
        const int64_t offset = b * g.batch_stride + s * g.seq_stride + h * g.head_stride;
        void* head = bytes + static_cast<size_t>(offset) * elem;
        if (wide) {
          rotate(static_cast<float*>(head), cos, sin, half);
        } else if (simd_convert) {
          simd::Widen(x.dtype, static_cast<const uint16_t*>(head), widened.data(), rotary_dim);
          rotate(widened.data(), cos, sin, half);
          simd::Narrow(x.dtype, widened.data(), static_cast<uint16_t*>(head), rotary_dim);
        } else {
          ToFloat32(x.dtype, head, widened.data(), rotary_dim);
          rotate(widened.data(), cos, sin, half);
          FromFloat32(widened.data(), x.dtype, head, rotary_dim);
        }
      }
    }
  });
}

void RopeRotateReference(const TensorView& x, const RopeGeometry& g, RopePairing pairing,
                         int rotary_dim, absl::Span<const float* const> token_rows) {
  const int64_t half = rotary_dim / 2;
  auto load = [&](int64_t i) -> float {
    switch (x.dtype) {
      case DType::kFloat16: return HalfToFloat(x.As<uint16_t>()[i]);
      case DType::kBFloat16: return BFloat16ToFloat(x.As<uint16_t>()[i]);
      default: return x.As<float>()[i];
    }
  };
  auto store = [&](int64_t i, float v) {
    switch (x.dtype) {
      case DType::kFloat16: x.As<uint16_t>()[i] = FloatToHalf(v); break;
      case DType::kBFloat16: x.As<uint16_t>()[i] = FloatToBFloat16(v); break;
      default: x.As<float>()[i] = v; break;
    }
  };
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t s = 0; s < g.seq; ++s) {
      const float* row = token_rows[b * g.seq + s];
      for (int64_t h = 0; h < g.heads; ++h) {
        const int64_t start = b * g.batch_stride + s * g.seq_stride + h * g.head_stride;
        for (int64_t k = 0; k < half; ++k) {
          const int64_t ia = start + (pairing == RopePairing::kRotateHalf ? k : 2 * k);
          const int64_t ib = start + (pairing == RopePairing::kRotateHalf ? k + half : 2 * k + 1);
          const float xa = load(ia);
          const float xb = load(ib);
          store(ia, xa * row[k] - xb * row[half + k]);
          store(ib, xb * row[k] + xa * row[half + k]);
        }
      }
    }
  }
}

}  // namespace posenc
