// AVX2/F16C (and AVX-512) conversions between float32 and the 16-bit float formats,
// bit-identical to FloatToHalf / HalfToFloat / FloatToBFloat16 / BFloat16ToFloat (round to
// nearest even; a NaN becomes the canonical quiet NaN those give), except that widening a
// signalling half NaN gives it quiet (F16C does; any float arithmetic on it would too).
// Internal to server/kernels: each function is compiled for the instruction set it names,
// so call it only when HasAvx2F16c() / HasAvx512f() / HasAvx512Bf16() says so.
// Pure functions; thread-safe.
#pragma once

#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>

#include "server/tensor/dtype.h"

namespace posenc::simd {

inline bool HasAvx2F16c() {
  // F16C from CPUID leaf 1: clang 14's __builtin_cpu_supports does not know "f16c".
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }();
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
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, nan_bits, is_nan);
}

// Bf16Bits for lanes that hold no NaN: the rounding alone.
__attribute__((target("avx2"))) inline __m256i Bf16BitsNoNan(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)),
                           16);
}

// Stores 16 floats (lo, hi) as bfloat16. NaN is rare: one test for both vectors, and the
// NaN fix-up only when a lane holds one (the in-order narrowing used by simd::Narrow and the
// float32-to-bfloat16 tails).
__attribute__((target("avx2"))) inline void StoreBf16x16(uint16_t* p, __m256 lo, __m256 hi) {
  const __m256 nan =
      _mm256_or_ps(_mm256_cmp_ps(lo, lo, _CMP_UNORD_Q), _mm256_cmp_ps(hi, hi, _CMP_UNORD_Q));
  __m256i packed;
  if (__builtin_expect(_mm256_testz_ps(nan, nan), 1)) {
    packed = _mm256_packus_epi32(Bf16BitsNoNan(lo), Bf16BitsNoNan(hi));
  } else {
    packed = _mm256_packus_epi32(Bf16Bits(lo), Bf16Bits(hi));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
}

// Stores 8 floats as bfloat16.
__attribute__((target("avx2"))) inline void StoreBf16x8(uint16_t* p, __m256 f) {
  const __m256i bits = Bf16Bits(f);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm_packus_epi32(_mm256_castsi256_si128(bits),
                                    _mm256_extracti128_si256(bits, 1)));
}

// 16 bfloat16 split by parity: as 32-bit words, element 2j is the low half of word j and
// 2j+1 the high half, so `word << 16` and `word & 0xffff0000` are the even and odd elements
// as floats (no lane-crossing widen), and results go back with one shift and one blend
// (no pack or permute). Callers lay out their float operands in the same order.
__attribute__((target("avx2"))) inline __m256 EvenBf16x8(__m256i words) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
}
__attribute__((target("avx2"))) inline __m256 OddBf16x8(__m256i words) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(words, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// f rounded to nearest even at bit 16 (FloatToBFloat16's bits + 0x7fff + lsb): the bfloat16
// is the high half. For lanes that hold no NaN.
__attribute__((target("avx2"))) inline __m256i RoundedBf16High(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}

// The same with NaN lanes as FloatToBFloat16 gives them (high half bits>>16 | 0x40).
__attribute__((target("avx2"))) inline __m256i RoundedBf16HighNan(__m256 f) {
  const __m256i quiet = _mm256_or_si256(_mm256_castps_si256(f), _mm256_set1_epi32(0x400000));
  return _mm256_blendv_epi8(RoundedBf16High(f), quiet,
                            _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
}

// 16 bfloat16 in element order from rounded even and odd words (RoundedBf16High*).
__attribute__((target("avx2"))) inline __m256i JoinEvenOddBf16(__m256i even, __m256i odd) {
  return _mm256_blend_epi16(_mm256_srli_epi32(even, 16), odd, 0xAA);  // odd words from odd
}

// The same 16 bfloat16 (JoinEvenOddBf16 of RoundedBf16High of both) with the rounding done
// once per 16 results instead of per 8: the words are regrouped first (high halves: the
// truncated bfloat16 in element order; low halves: what decides the rounding), then
// bits + 0x7fff + lsb carries into the high half iff low + lsb > 0x8000, i.e. iff
// avg = (low + lsb + 1) >> 1 > 0x4000: 9 instructions where the per-lane rounding takes 10.
// For lanes that hold no NaN (or only NaNs with low halves zero, as RoundedBf16High).
__attribute__((target("avx2"))) inline __m256i RoundJoinEvenOddBf16(__m256 even, __m256 odd) {
  const __m256i e = _mm256_castps_si256(even), o = _mm256_castps_si256(odd);
  const __m256i high = _mm256_blend_epi16(_mm256_srli_epi32(e, 16), o, 0xAA);
  const __m256i low = _mm256_blend_epi16(e, _mm256_slli_epi32(o, 16), 0xAA);
  const __m256i v = _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi16(1)));
  const __m256i carry =
      _mm256_cmpgt_epi16(_mm256_xor_si256(v, _mm256_set1_epi16(-32768)), _mm256_setzero_si256());
  return _mm256_sub_epi16(high, carry);
}

// Stores even and odd float results as 16 bfloat16 in element order, as FloatToBFloat16
// (NaN tested once for both vectors: it is rare).
__attribute__((target("avx2"))) inline void StoreEvenOddBf16x16(uint16_t* p, __m256 even,
                                                                __m256 odd) {
  const __m256 nan =
      _mm256_or_ps(_mm256_cmp_ps(even, even, _CMP_UNORD_Q), _mm256_cmp_ps(odd, odd, _CMP_UNORD_Q));
  __m256i out;
  if (__builtin_expect(_mm256_testz_ps(nan, nan), 1)) {
    out = JoinEvenOddBf16(RoundedBf16High(even), RoundedBf16High(odd));
  } else {
    out = JoinEvenOddBf16(RoundedBf16HighNan(even), RoundedBf16HighNan(odd));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), out);
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

// Stores 32 floats (8 from each of f0..f3, in that order) at p as IEEE half, exactly as four
// StoreF16x8 calls would. Results are rarely NaN: two unordered compares (true where either
// operand is NaN) test all four vectors, and only a NaN pays the canonicalisation.
__attribute__((target("avx2,f16c"))) inline void StoreF16x32(uint16_t* p, __m256 f0, __m256 f1,
                                                             __m256 f2, __m256 f3) {
  const __m256 nan =
      _mm256_or_ps(_mm256_cmp_ps(f0, f1, _CMP_UNORD_Q), _mm256_cmp_ps(f2, f3, _CMP_UNORD_Q));
  if (__builtin_expect(!_mm256_testz_ps(nan, nan), 0)) {
    StoreF16x8(p, f0);
    StoreF16x8(p + 8, f1);
    StoreF16x8(p + 16, f2);
    StoreF16x8(p + 24, f3);
    return;
  }
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm256_set_m128i(_mm256_cvtps_ph(f1, kRound), _mm256_cvtps_ph(f0, kRound)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16),
                      _mm256_set_m128i(_mm256_cvtps_ph(f3, kRound), _mm256_cvtps_ph(f2, kRound)));
}

// The same conversions 16 lanes at a time with AVX-512F (call only when HasAvx512f()).
// Each takes or gives the 16 halves in a __m256i so callers choose plain or buffered
// loads and stores.
inline bool HasAvx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// Whether this CPU has VCVTNEPS2BF16 (AVX512_BF16, with VL, BW and DQ), used by
// NarrowBf16x16Native and StoreBf16x32.
inline bool HasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

__attribute__((target("avx512f"))) inline __m512 WidenBf16x16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx512f"))) inline __m512 WidenF16x16(__m256i h) {
  return _mm512_cvtph_ps(h);
}

// bfloat16 of 16 floats with integer ops, as FloatToBFloat16 (RNE; NaN -> bits>>16 | 0x40).
__attribute__((target("avx512f"))) inline __m256i NarrowBf16x16(__m512 f) {
  const __m512i bits = _mm512_castps_si512(f);
  const __m512i hi = _mm512_srli_epi32(bits, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

// The same with VCVTNEPS2BF16. That instruction flushes float32 denormals (exponent 0) to
// signed zero where FloatToBFloat16 rounds them; when a lane holds one (VFPCLASSPS, one
// instruction: the common case pays one test), all take the integer route.
// NaN: it gives bits>>16 | 0x40, as FloatToBFloat16 does.
#define POSENC_AVX512_BF16_TARGET \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))
POSENC_AVX512_BF16_TARGET inline __m256i NarrowBf16x16Native(__m512 f) {
  if (__builtin_expect(_mm512_fpclass_ps_mask(f, 0x20) == 0, 1)) {  // 0x20: denormal
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f));
  }
  return NarrowBf16x16(f);
}

// 32 floats (lo: the first 16) as bfloat16 into p, as FloatToBFloat16: one VCVTNE2PS2BF16
// unless a lane is a float32 denormal.
POSENC_AVX512_BF16_TARGET inline void StoreBf16x32(uint16_t* p, __m512 lo, __m512 hi) {
  const __mmask16 denormal = _mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20);
  if (__builtin_expect(denormal == 0, 1)) {
    _mm512_storeu_si512(p, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    return;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), NarrowBf16x16(lo));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16), NarrowBf16x16(hi));
}
#undef POSENC_AVX512_BF16_TARGET

// IEEE half of 16 floats, as FloatToHalf (VCVTPS2PH keeps a NaN's payload; FloatToHalf
// gives sign|0x7e00, so NaN lanes become sign|quiet NaN first; checked once, as NaN is rare).
__attribute__((target("avx512f"))) inline __m256i NarrowF16x16(__m512 f) {
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  if (__builtin_expect(nan != 0, 0)) {
    // (f & sign) | 0x7fc00000 on the NaN lanes: ternary logic (A & B) | C, imm 0xEA.
    const __m512i canonical =
        _mm512_ternarylogic_epi32(_mm512_castps_si512(f),
                                  _mm512_set1_epi32(static_cast<int>(0x80000000u)),
                                  _mm512_set1_epi32(0x7fc00000), 0xEA);
    f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(canonical));
  }
  return _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// n 16-bit floats of `type` (FLOAT16 or BFLOAT16) to float32, and back.
__attribute__((target("avx2,f16c"))) inline void Widen(DType type, const uint16_t* src, float* dst,
                                                       int64_t n) {
  int64_t i = 0;
  if (type == DType::kBFloat16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadBf16x8(src + i));
    for (; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadF16x8(src + i));
    for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  }
}

__attribute__((target("avx2,f16c"))) inline void Narrow(DType type, const float* src, uint16_t* dst,
                                                        int64_t n) {
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
