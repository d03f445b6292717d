// Copies that convert: float32 rows rounded once to a tensor dtype (GetTable chunks, graph
// encodings), and the CONCAT fusion out = [x * input_scale, pe * pe_scale]. Each has the
// hand-written vector code (AVX2/F16C conversions, simd_convert.h), oneDNN's reorder beside
// it for comparison (posenc-bench shows both; the faster is the default), and the plain
// loop. All are bit-identical to FromFloat32 on finite values. Free functions; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// kAuto: kVector where the CPU has AVX2 and F16C (SetIsaOverride's scalar: kLoop), else
// kOneDnn, else the loop. kOneDnn falls back to kVector where oneDNN has no kernel.
enum class ConvertImplementation { kAuto, kVector, kOneDnn, kLoop };

// dst[i] = src[i] rounded to nearest even in `dst_type` (FLOAT32, FLOAT16 or BFLOAT16; a
// FLOAT32 destination is a plain copy unless kOneDnn is asked for).
// Large conversions run on the kernel threads (KernelThreadLease). INTERNAL only if oneDNN
// fails unexpectedly.
absl::Status ConvertFromFloat32(const float* src, DType dst_type, void* dst, int64_t n,
                                ConvertImplementation implementation =
                                    ConvertImplementation::kAuto);

// out[..., :d] = x * input_scale, out[..., d:] = pe * pe_scale, each rounded once to x's
// dtype. REQUIRES: x is [nb, seq, d] of FLOAT32/FLOAT16/BFLOAT16; out is
// [nb, seq, d + pe_dim] of x's dtype; pe is [seq, pe_dim] float32.
absl::Status ConcatEncoding(ConstTensorView x, const float* pe, int64_t pe_dim,
                            float input_scale, float pe_scale, TensorView out,
                            ConvertImplementation implementation =
                                ConvertImplementation::kAuto);

// Which implementation the last call on this thread used ("vector", "onednn" or "loop"),
// for tests and benchmarks.
const char* LastConvertImplementation();

}  // namespace posenc
