// Additive absolute encodings: x = x * input_scale + pe * pe_scale, with pe broadcast over
// the batch, in place on the caller's bytes (the CONCAT variant is in convert_kernel.h).
// Free functions; thread-safe (oneDNN primitives are created once per shape signature and
// shared; each calling thread uses its own stream).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// Which code applies the add. kAuto picks the fastest this CPU has (see below); the others
// exist so benchmarks and tests can compare them. kVectorAvx2 / kVectorAvx512 force one
// width of the vector rows (an AVX-512 request falls back to AVX2 rows where there are none
// for the dtype).
enum class AddImplementation { kAuto, kOneDnn, kScalar, kVectorAvx2, kVectorAvx512 };

// REQUIRES: x is [nb, seq, dim] of FLOAT32/FLOAT16/BFLOAT16; pe points to [seq, dim]
// float32 rows that stay alive for the call.
// kAuto: on CPUs with AVX2 (and FMA, F16C) vectorised rows in seq-major order (each pe row
// read once for all batch rows), bit-identical to AddEncodingLoop: AVX-512 rows for float16
// (F, BW, VL, DQ) and bfloat16 (also AVX512_BF16) where present, else AVX2 rows; on other
// CPUs a oneDNN binary_add (scales at execution) when oneDNN has a JIT kernel for the
// dtype, else the loop below. SetIsaOverride (isa.h) forces one ISA's rows (scalar: the
// loop); without it, POSENC_ADD_IMPL=avx2|avx512|onednn|loop pins the choice.
// Tensors under 32 KiB of float32-equivalent work run on the calling thread, larger ones
// on KernelThreads() threads. A vector width on a CPU without AVX2/F16C, or kOneDnn for a dtype
// oneDNN has no JIT kernel for, falls back to the scalar loop.
// pe_by_parity: optionally the same rows laid out by SplitRowsByParity, which the AVX2
// bfloat16 rows read without shuffles or NaN tests; used where they run
// (AddReadsRowsByParity) and the scales are not NaN.
// REQUIRES: those rows finite (a NaN there may carry into the rounding; every table posenc
// builds or loads is checked).
// Returns INTERNAL only if oneDNN fails unexpectedly.
absl::Status AddEncodingInPlace(TensorView x, const float* pe, float input_scale,
                                float pe_scale,
                                AddImplementation implementation = AddImplementation::kAuto,
                                const float* pe_by_parity = nullptr);

// Whether AddEncodingInPlace with kAuto, on this thread's ISA choice, runs the AVX2
// bfloat16 rows that read pe_by_parity: a caller that caches rows caches this layout too.
bool AddReadsRowsByParity(DType dtype);

// Writes pe [rows, dim] to out [rows, dim] with each whole group of 16 columns reordered as
// its 8 even columns, then its 8 odd ones (as the lanes of widened bfloat16 pairs hold
// them); the columns past the last whole group stay in order.
void SplitRowsByParity(const float* pe, int64_t rows, int64_t dim, float* out);

// The same formula as a plain loop in float32 arithmetic, rounded once to x's dtype.
// Used as the fallback and as the reference in tests.
void AddEncodingLoop(TensorView x, const float* pe, float input_scale, float pe_scale);

// MULTIPLY fusion: x = (x * input_scale) * (pe * pe_scale), elementwise, pe broadcast over
// the batch, in place. REQUIRES as AddEncodingInPlace. The same choice of rows as the add
// (AVX-512 rows for 16-bit dtypes where present, else AVX2; SetIsaOverride and
// POSENC_ADD_IMPL apply; kOneDnn and kScalar run the loop), bit-identical to
// MultiplyEncodingLoop for every dtype. Always OK (the status mirrors the add's).
absl::Status MultiplyEncodingInPlace(TensorView x, const float* pe, float input_scale,
                                     float pe_scale,
                                     AddImplementation implementation = AddImplementation::kAuto);

// The multiply as a plain loop in float32 arithmetic, rounded once to x's dtype: the
// reference in tests.
void MultiplyEncodingLoop(TensorView x, const float* pe, float input_scale, float pe_scale);

// Which implementation AddEncodingInPlace or MultiplyEncodingInPlace used last on this thread ("avx2", "avx512",
// "onednn" or "loop"), for tests and benchmarks.
const char* LastAddImplementation();

}  // namespace posenc
