// Internal to server/kernels: RoPE's per-ISA kernels behind function pointers, for the
// dispatch in rope_kernel.cc. rope_avx2.cc and rope_avx512.cc each compile their functions
// for the ISA they name (target attributes, no -march), so call one only when the CPU has
// it (CpuSupports, kernel_impl.h).
//
// float32 heads rotate one head at a time (RotateHeadFn), from the token's cos/sin halves,
// except with AVX2, which rotates a whole token at a time (RotateTokenF32Fn) from its
// laid-out tables.
// 16-bit heads rotated in registers: each vector of halves is widened, rotated with the
// same FMA formula as the float32 vector kernels, and rounded once to nearest even (NaN
// as FloatToHalf / FloatToBFloat16 give it), with no float32 staging buffer. The caller
// lays out each token's cos/sin once for all its heads (RopeTokenTables), zero-padded to
// a multiple of 16 so every vector step, tails included, loads them directly:
//   rotate-half: c[k] = cos_k, s[k] = sin_k for k < half;
//   interleaved: c[2k] = c[2k+1] = cos_k, s likewise.
// Tails (fewer than one vector of features) go through a small zeroed buffer, so every
// feature takes the same vector arithmetic.
#pragma once

#include <cstdint>

#include "server/kernels/rope_kernel.h"

namespace posenc::rope_internal {

// Rotates rotary_dim features of one head in place. A pair is (x[k*step], x[k*step+offset])
// with step 2, offset 1 for interleaved pairs and step 1, offset half for rotate-half:
// the single pair offset ggml's rotate_pairs uses.
using RotateHeadFn = void (*)(float* x, const float* cos, const float* sin, int64_t half);
using RotateToken16Fn = void (*)(uint16_t* x, int64_t heads, int64_t head_stride, const float* c,
                                 const float* s, int64_t half);
using RotateTokenF32Fn = void (*)(float* x, int64_t heads, int64_t head_stride, const float* c,
                                  const float* s, int64_t half);

// The plain formula on pairs k0..half-1 (pair k: x[k*step] and x[k*step + offset]): the
// scalar kernels, and the vector kernels' tails.
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

struct RotateFns {
  RotateHeadFn rotate_half;
  RotateHeadFn interleaved;
};

// How a fused 16-bit kernel wants each token's cos/sin laid out (see RopeTokenTables).
// kEvenOdd: the AVX-512 parity kernels (rotate-half split in blocks of 32);
// kEvenOdd16: the AVX2 ones (blocks of 16). Interleaved pairs take plain cos/sin for both.
enum class TableLayout { kPaired, kEvenOdd, kEvenOdd16 };

struct Token16Kernel {
  RotateToken16Fn fn = nullptr;
  TableLayout layout = TableLayout::kPaired;
};

// float32, one head: the plain formula (rope_kernel.cc), AVX-512F. AVX2 has none: it
// rotates whole tokens (Avx2TokenF32, Avx2Token16).
RotateFns ScalarFns();
RotateFns Avx512Fns();
// float32, whole tokens (AVX2): interleaved pairs from duplicated tables, rotate-half from
// plain halves.
RotateTokenF32Fn Avx2TokenF32(RopePairing pairing);

// The fused 16-bit kernel of each ISA for (dtype, pairing, half); Avx512Token16 gives none
// (fn null) where the CPU lacks BW/VL/DQ.
Token16Kernel Avx2Token16(DType dtype, RopePairing pairing, int64_t half);
Token16Kernel Avx512Token16(DType dtype, RopePairing pairing, int64_t half);

// src[0..n) split by parity in blocks of 16 (TableLayout::kEvenOdd16, rotate-half):
// dst[16b + j] = src[16b + 2j], dst[16b + 8 + j] = src[16b + 2j + 1]. REQUIRES: n % 16 == 0
// and the CPU has AVX2.
void SplitByParity16(const float* src, float* dst, int64_t n);

// src[0..n) split by parity in blocks of 32 (TableLayout::kEvenOdd, rotate-half):
// dst[32b + j] = src[32b + 2j], dst[32b + 16 + j] = src[32b + 2j + 1]. REQUIRES: n % 32 == 0
// and the CPU has AVX-512 BW/VL/DQ.
void SplitByParity32(const float* src, float* dst, int64_t n);

}  // namespace posenc::rope_internal
