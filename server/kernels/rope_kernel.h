// The in-place RoPE rotation of queries or keys, given each token's cos/sin row. The
// scalar routine serves both pairings through one pair offset (like ggml's rotate_pairs);
// AVX2+FMA and AVX-512 versions (rope_avx2.cc, rope_avx512.cc), picked at run time (no
// -march flags), specialise each; the element-by-element reference for tests lives in
// tests/support/rope_reference.h.
// Pure functions over views; thread-safe; the caller owns every buffer.
//
//   RopeGeometry g = ...;                       // strides of BSHD, BHSD or THD
//   std::vector<const float*> rows(g.batch * g.seq);  // rows[b*seq+s]: cos half, sin half
//   RopeRotateInPlace(query, g, RopePairing::kRotateHalf, rotary_dim, rows);
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "server/kernels/kernel_impl.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// Which features form a rotated pair (x_a, x_b), for k in [0, rotary_dim/2):
//   kRotateHalf  (NEOX):  a = k,  b = k + rotary_dim/2
//   kInterleaved (GPTJ):  a = 2k, b = 2k + 1
// Either way: x_a' = x_a*cos_k - x_b*sin_k, x_b' = x_b*cos_k + x_a*sin_k.
enum class RopePairing { kRotateHalf, kInterleaved };

// Where head h of token (b, s) starts: b*batch_stride + s*seq_stride + h*head_stride
// elements into the data. Each head holds head_dim contiguous features.
struct RopeGeometry {
  int64_t batch = 1;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t batch_stride = 0;
  int64_t seq_stride = 0;
  int64_t head_stride = 0;
};

// `implementation` follows kernel_impl.h. kAuto, for float32, is AVX-512 on Intel CPUs
// (up to the ceiling), else AVX2+FMA, else scalar; for float16/bfloat16, AVX-512 wherever
// present, AMD included, else the same. kAvx512 uses AVX-512F float32 kernels and, for
// 16-bit heads, AVX-512 BW/VL/DQ ones (falling back to AVX2's where the CPU lacks them).
// kOneDnn (no oneDNN code here) runs kAuto's choice. 16-bit heads are converted and rotated
// in registers with AVX2+F16C or AVX-512 (bfloat16 split by parity and rounded by
// VCVTNE2PS2BF16 where AVX512_BF16 is present), bit-identical per element to widening, the
// vector formula (FMA) in float32, and FloatToHalf / FloatToBFloat16, except that a NaN
// result is some NaN (AVX-512 float16 keeps VCVTPS2PH's quiet NaN rather than FloatToHalf's
// canonical bits). Scalar code is bit-identical to tests/support/rope_reference.h (no FMA,
// no F16C).
// Rotates the first rotary_dim features of every head of `x` in place; the rest of each
// head is not touched. 16-bit inputs are rotated in float32 and rounded once.
// REQUIRES: x.dtype is FLOAT32, FLOAT16 or BFLOAT16; x.data spans the geometry;
//   0 < rotary_dim <= head_dim, rotary_dim even; token_rows.size() == batch*seq, and each
//   row holds rotary_dim floats: cos_0..cos_{r/2-1}, sin_0..sin_{r/2-1}.
void RopeRotateInPlace(const TensorView& x, const RopeGeometry& g, RopePairing pairing,
                       int rotary_dim, absl::Span<const float* const> token_rows,
                       KernelImpl implementation = KernelImpl::kAuto);

}  // namespace posenc
