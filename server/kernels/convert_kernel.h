// Copies that convert: float32 rows rounded once to a tensor dtype (GetTable chunks, graph
// encodings), and the CONCAT fusion out = [x * input_scale, pe * pe_scale]. Each has the
// hand-written AVX2 code (AVX2/F16C conversions, simd_convert.h; no AVX-512 code), oneDNN's
// reorder beside it for comparison (posenc-bench shows both; the faster is the default),
// and the scalar loop. All are bit-identical to FromFloat32 on finite values.
// `implementation` follows kernel_impl.h: kAuto is the AVX2 code at an AVX2 or AVX-512
// ceiling, the loop at a scalar one, and on a CPU without AVX2 and F16C oneDNN's reorder
// (the loop where oneDNN has none); kAvx512 runs the AVX2 code; kOneDnn falls back to the
// AVX2 code (the loop without AVX2) where oneDNN has no JIT reorder.
// Free functions; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "server/kernels/kernel_impl.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// dst[i] = src[i] rounded to nearest even in `dst_type` (FLOAT32, FLOAT16 or BFLOAT16; a
// FLOAT32 destination is a plain copy unless kOneDnn is asked for).
// Large conversions run on the kernel threads (KernelThreadLease). INTERNAL only if oneDNN
// fails unexpectedly.
absl::Status ConvertFromFloat32(const float* src, DType dst_type, void* dst, int64_t n,
                                KernelImpl implementation = KernelImpl::kAuto);

// out[..., :d] = x * input_scale, out[..., d:] = pe * pe_scale, each rounded once to x's
// dtype. REQUIRES: x is [nb, seq, d] of FLOAT32/FLOAT16/BFLOAT16; out is
// [nb, seq, d + pe_dim] of x's dtype; pe is [seq, pe_dim] float32.
absl::Status ConcatEncoding(ConstTensorView x, const float* pe, int64_t pe_dim, float input_scale,
                            float pe_scale, TensorView out,
                            KernelImpl implementation = KernelImpl::kAuto);

// What the last call on this thread ran (kAvx2, kOneDnn or kScalar; kAuto before any),
// for tests and benchmarks.
KernelImpl LastConvertImplementation();

}  // namespace posenc
