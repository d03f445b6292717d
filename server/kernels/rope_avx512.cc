// GCC 12 reports the _mm512_undefined_* operands inside AVX-512 intrinsics (srli, cvtepi32_epi16,
// cvtps_ph, ...) as "may be used uninitialized" (GCC bug 105593) wherever they inline.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstring>

#include "server/kernels/rope_isa.h"
#include "server/kernels/simd_convert.h"

// RoPE's AVX-512 kernels (F for float32; F, BW, VL, DQ, and AVX512_BF16 where present, for
// 16-bit heads); see rope_isa.h.
namespace posenc::rope_internal {
namespace {

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

#define POSENC_AVX512_16 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))

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
// 32 bfloat16 as two 256-bit loads: on AMD a 512-bit load of data not yet in cache halves
// the whole kernel's speed (docs/performance.md, "Kernel choices").
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
POSENC_AVX512_16 inline void StoreEvenOddBf16(uint16_t* p, __m512 even, __m512 odd, __m512i order) {
  __m512i halves;  // words 0..15: even elements, 16..31: odd
  const __mmask16 denormal = _mm512_fpclass_ps_mask(even, 0x20) | _mm512_fpclass_ps_mask(odd, 0x20);
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
POSENC_AVX512_16 void SplitByParityImpl(const float* src, float* dst, int64_t n) {
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
  alignas(64) static const uint16_t kOrder[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                  21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                  11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_load_si512(kOrder);
}

// REQUIRES: half % 32 == 0.
POSENC_AVX512_16 void RotateHalfTokenBf16EvenOdd(uint16_t* x, int64_t heads, int64_t head_stride,
                                                 const float* c, const float* s, int64_t half) {
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
POSENC_AVX512_16 void InterleavedTokenBf16EvenOdd(uint16_t* x, int64_t heads, int64_t head_stride,
                                                  const float* c, const float* s, int64_t half) {
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

// The 16-bit AVX-512 kernels use AVX512BW/VL/DQ encodings too.
bool HasAvx512ForSixteenBit() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}

}  // namespace

RotateFns Avx512Fns() { return {RotateHalfAvx512, InterleavedAvx512}; }

void SplitByParity32(const float* src, float* dst, int64_t n) { SplitByParityImpl(src, dst, n); }

// bfloat16 with AVX512_BF16 takes the parity-split kernels where whole vectors cover the
// rotated features: they skip the lane shuffles, and are faster for both styles
// (docs/performance.md, "Kernel choices").
Token16Kernel Avx512Token16(DType dtype, RopePairing pairing, int64_t half) {
  if (!HasAvx512ForSixteenBit()) return {};
  const bool half_pairs = pairing == RopePairing::kRotateHalf;
  if (dtype != DType::kBFloat16) {
    return {half_pairs ? RotateHalfToken16Avx512<false, false>
                       : InterleavedToken16Avx512<false, false>};
  }
  if (simd::HasAvx512Bf16()) {
    if (half_pairs && half % 32 == 0) return {RotateHalfTokenBf16EvenOdd, TableLayout::kEvenOdd};
    if (!half_pairs && half % 16 == 0) {
      return {InterleavedTokenBf16EvenOdd, TableLayout::kEvenOdd};
    }
    return {half_pairs ? RotateHalfToken16Avx512<true, true>
                       : InterleavedToken16Avx512<true, true>};
  }
  return {half_pairs ? RotateHalfToken16Avx512<true, false>
                     : InterleavedToken16Avx512<true, false>};
}

#undef POSENC_AVX512_16

}  // namespace posenc::rope_internal
