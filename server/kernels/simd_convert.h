// AVX2/F16C conversions between float32 and the 16-bit float formats, bit-identical to
// FloatToHalf / HalfToFloat / FloatToBFloat16 / BFloat16ToFloat (round to nearest even; a
// NaN becomes the canonical quiet NaN those give), except that widening a signalling half
// NaN gives it quiet (F16C does; any float arithmetic on it would too). Internal to server/kernels: each
// function is compiled for AVX2+F16C, so call it only when HasAvx2F16c() says so.
// Pure functions; thread-safe.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "server/tensor/dtype.h"

namespace posenc::simd {

inline bool HasAvx2F16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}

__attribute__((target("avx2"))) inline __m256 LoadBf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// bfloat16 bits of 8 floats in the low half of each 32-bit lane, as FloatToBFloat16.
__attribute__((target("avx2"))) inline __m256i Bf16Bits(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan_bits = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_cmpgt_epi32(
      _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, nan_bits, is_nan);
}

// Stores 16 floats (lo, hi) as bfloat16.
__attribute__((target("avx2"))) inline void StoreBf16x16(uint16_t* p, __m256 lo, __m256 hi) {
  const __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(Bf16Bits(lo), Bf16Bits(hi)), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
}

__attribute__((target("avx2,f16c"))) inline __m256 LoadF16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Stores 8 floats as IEEE half. F16C keeps a NaN's payload; FloatToHalf gives sign|0x7e00.
__attribute__((target("avx2,f16c"))) inline void StoreF16x8(uint16_t* p, __m256 f) {
  const __m256 is_nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  const __m256 canonical = _mm256_or_ps(_mm256_and_ps(f, _mm256_set1_ps(-0.0f)),
                                        _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  f = _mm256_blendv_ps(f, canonical, is_nan);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// n 16-bit floats of `type` (FLOAT16 or BFLOAT16) to float32, and back.
__attribute__((target("avx2,f16c"))) inline void Widen(DType type, const uint16_t* src,
                                                       float* dst, int64_t n) {
  int64_t i = 0;
  if (type == DType::kBFloat16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadBf16x8(src + i));
    for (; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadF16x8(src + i));
    for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  }
}

__attribute__((target("avx2,f16c"))) inline void Narrow(DType type, const float* src,
                                                        uint16_t* dst, int64_t n) {
  int64_t i = 0;
  if (type == DType::kBFloat16) {
    for (; i + 16 <= n; i += 16) {
      StoreBf16x16(dst + i, _mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8));
    }
    for (; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
  } else {
    for (; i + 8 <= n; i += 8) StoreF16x8(dst + i, _mm256_loadu_ps(src + i));
    for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
  }
}

}  // namespace posenc::simd
