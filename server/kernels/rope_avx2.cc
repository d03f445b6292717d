#include <immintrin.h>

#include <cstring>

#include "server/kernels/rope_isa.h"
#include "server/kernels/simd_convert.h"

// RoPE's AVX2+FMA kernels (F16C for float16); see rope_isa.h.
namespace posenc::rope_internal {
namespace {

// 8 rotate-half pairs of float32: xa[0..8) with xb[0..8).
__attribute__((target("avx2,fma"))) inline void HalfStepF32(float* xa, float* xb, const float* c,
                                                            const float* s) {
  const __m256 a = _mm256_loadu_ps(xa);
  const __m256 b = _mm256_loadu_ps(xb);
  const __m256 vc = _mm256_loadu_ps(c);
  const __m256 vs = _mm256_loadu_ps(s);
  _mm256_storeu_ps(xa, _mm256_fmsub_ps(a, vc, _mm256_mul_ps(b, vs)));
  _mm256_storeu_ps(xb, _mm256_fmadd_ps(b, vc, _mm256_mul_ps(a, vs)));
}

// All heads of one float32 token, interleaved pairs, from the token's duplicated cos/sin
// tables (RopeTokenTables: c[2k] = c[2k+1] = cos_k, zero-padded to a multiple of 16), so
// the per-head loop needs no shuffles of cos/sin: fmaddsub gives x_a*c - x_b*s on even
// lanes and x_b*c + x_a*s on odd ones.
__attribute__((target("avx2,fma"))) inline void PairStepF32(float* x, const float* c,
                                                            const float* s) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x_b, x_a) in every pair
  _mm256_storeu_ps(x, _mm256_fmaddsub_ps(v, _mm256_loadu_ps(c),
                                         _mm256_mul_ps(swapped, _mm256_loadu_ps(s))));
}

__attribute__((target("avx2,fma"))) void InterleavedTokenF32Avx2(float* x, int64_t heads,
                                                                 int64_t head_stride,
                                                                 const float* c, const float* s,
                                                                 int64_t half) {
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

// All heads of one float32 token, rotate-half pairs, from the token's cos/sin halves (c[k],
// s[k] for k < half), two vectors of pairs per step.
__attribute__((target("avx2,fma"))) void RotateHalfTokenF32Avx2(float* x, int64_t heads,
                                                                int64_t head_stride, const float* c,
                                                                const float* s, int64_t half) {
  const int64_t full = half & ~int64_t{7};
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    float* x2 = x + half;
    int64_t k = 0;
    for (; k + 16 <= full; k += 16) {
      HalfStepF32(x + k, x2 + k, c + k, s + k);
      HalfStepF32(x + k + 8, x2 + k + 8, c + k + 8, s + k + 8);
    }
    if (k < full) HalfStepF32(x + k, x2 + k, c + k, s + k);
    RotatePairsScalar(x, c, s, full, half, 1, half);
  }
}

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
__attribute__((target("avx2,fma,f16c"))) void RotateHalfToken16Avx2(uint16_t* x, int64_t heads,
                                                                    int64_t head_stride,
                                                                    const float* c, const float* s,
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
__attribute__((target("avx2,fma,f16c"))) void InterleavedToken16Avx2(uint16_t* x, int64_t heads,
                                                                     int64_t head_stride,
                                                                     const float* c, const float* s,
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

// bfloat16 with AVX2, 16 lanes per 256-bit vector split by parity (simd::EvenBf16x8; the
// AVX-512 parity kernels do the same 32 at a time). Rounding is FloatToBFloat16's integer
// round to nearest even (bits + 0x7fff + lsb). A NaN needs no special case here: every NaN
// these FMAs give is a widened bfloat16 input quieted (low 16 bits zero) or the default NaN,
// so the rounding add never carries out of its payload and the result is a NaN (as the
// header allows). Stores 16 results in element order.
__attribute__((target("avx2"))) inline void StoreRotatedBf16x16(uint16_t* p, __m256 even,
                                                                __m256 odd) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), simd::RoundJoinEvenOddBf16(even, odd));
}

__attribute__((target("avx2"))) inline __m256i LoadWords(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Interleaved pairs: c[k] = cos_k (each 16-lane vector is 8 pairs). REQUIRES: half % 8 == 0.
__attribute__((target("avx2,fma"))) void InterleavedTokenBf16EvenOddAvx2(
    uint16_t* x, int64_t heads, int64_t head_stride, const float* c, const float* s, int64_t half) {
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    int64_t k = 0;
    for (; k + 16 <= half; k += 16) {  // two groups of 8 pairs: independent chains
      const __m256i v0 = LoadWords(x + 2 * k), v1 = LoadWords(x + 2 * k + 16);
      const __m256 c0 = _mm256_loadu_ps(c + k), s0 = _mm256_loadu_ps(s + k);
      const __m256 c1 = _mm256_loadu_ps(c + k + 8), s1 = _mm256_loadu_ps(s + k + 8);
      const __m256 e0 = simd::EvenBf16x8(v0), o0 = simd::OddBf16x8(v0);
      const __m256 e1 = simd::EvenBf16x8(v1), o1 = simd::OddBf16x8(v1);
      StoreRotatedBf16x16(x + 2 * k, _mm256_fmsub_ps(e0, c0, _mm256_mul_ps(o0, s0)),
                          _mm256_fmadd_ps(o0, c0, _mm256_mul_ps(e0, s0)));
      StoreRotatedBf16x16(x + 2 * k + 16, _mm256_fmsub_ps(e1, c1, _mm256_mul_ps(o1, s1)),
                          _mm256_fmadd_ps(o1, c1, _mm256_mul_ps(e1, s1)));
    }
    for (; k < half; k += 8) {  // pairs k..k+7: features 2k..2k+15
      const __m256i v = LoadWords(x + 2 * k);
      const __m256 vc = _mm256_loadu_ps(c + k), vs = _mm256_loadu_ps(s + k);
      const __m256 e = simd::EvenBf16x8(v), o = simd::OddBf16x8(v);
      StoreRotatedBf16x16(x + 2 * k, _mm256_fmsub_ps(e, vc, _mm256_mul_ps(o, vs)),
                          _mm256_fmadd_ps(o, vc, _mm256_mul_ps(e, vs)));
    }
  }
}

// Rotate-half: tables split by parity in blocks of 16 features, c[16b + j] = cos_{16b+2j},
// c[16b + 8 + j] = cos_{16b+2j+1} (j < 8). REQUIRES: half % 16 == 0.
__attribute__((target("avx2,fma"))) void RotateHalfTokenBf16EvenOddAvx2(
    uint16_t* x, int64_t heads, int64_t head_stride, const float* c, const float* s, int64_t half) {
  for (int64_t h = 0; h < heads; ++h, x += head_stride) {
    uint16_t* x2 = x + half;
    for (int64_t k = 0; k < half; k += 16) {
      const __m256i va = LoadWords(x + k), vb = LoadWords(x2 + k);
      const __m256 ce = _mm256_loadu_ps(c + k), co = _mm256_loadu_ps(c + k + 8);
      const __m256 se = _mm256_loadu_ps(s + k), so = _mm256_loadu_ps(s + k + 8);
      const __m256 ae = simd::EvenBf16x8(va), ao = simd::OddBf16x8(va);
      const __m256 be = simd::EvenBf16x8(vb), bo = simd::OddBf16x8(vb);
      StoreRotatedBf16x16(x + k, _mm256_fmsub_ps(ae, ce, _mm256_mul_ps(be, se)),
                          _mm256_fmsub_ps(ao, co, _mm256_mul_ps(bo, so)));
      StoreRotatedBf16x16(x2 + k, _mm256_fmadd_ps(be, ce, _mm256_mul_ps(ae, se)),
                          _mm256_fmadd_ps(bo, co, _mm256_mul_ps(ao, so)));
    }
  }
}

}  // namespace

__attribute__((target("avx2"))) void SplitByParity16(const float* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n; b += 16) {
    const __m256 lo = _mm256_loadu2_m128(src + b + 8, src + b);       // 0..3   | 8..11
    const __m256 hi = _mm256_loadu2_m128(src + b + 12, src + b + 4);  // 4..7   | 12..15
    _mm256_storeu_ps(dst + b, _mm256_shuffle_ps(lo, hi, 0x88));       // 0 2 .. 14
    _mm256_storeu_ps(dst + b + 8, _mm256_shuffle_ps(lo, hi, 0xDD));   // 1 3 .. 15
  }
}

RotateTokenF32Fn Avx2TokenF32(RopePairing pairing) {
  return pairing == RopePairing::kRotateHalf ? RotateHalfTokenF32Avx2 : InterleavedTokenF32Avx2;
}

Token16Kernel Avx2Token16(DType dtype, RopePairing pairing, int64_t half) {
  const bool half_pairs = pairing == RopePairing::kRotateHalf;
  if (dtype == DType::kBFloat16) {
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

}  // namespace posenc::rope_internal
