// Additive absolute encodings: x = x * input_scale + pe * pe_scale, with pe broadcast over
// the batch, in place on the caller's bytes (the CONCAT variant is in convert_kernel.h).
// Free functions; thread-safe (oneDNN primitives are created once per shape signature and
// shared; each calling thread uses its own stream).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "server/kernels/kernel_impl.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// A layout of [rows, dim] float32 encoding rows that some add rows read faster than the
// rows in order. Opaque to callers: they ask AddRowLayoutFor which layout (if any) the add
// will read, write rows in it with LayOut, and hand them to the add beside the rows in
// order (LaidOutRows). Each row keeps its place (row r at out + r * dim), so a slice of
// laid-out rows is the laid-out slice. Layouts are static objects, compared by address.
class AddRowLayout {
 public:
  using LayOutFn = void (*)(const float* rows, int64_t count, int64_t dim, float* out);
  constexpr AddRowLayout(const char* name, LayOutFn lay_out) : name_(name), lay_out_(lay_out) {}
  // Unique among layouts, for keys of cached copies.
  const char* name() const { return name_; }
  // Writes rows [count, dim] in this layout to out [count, dim].
  void LayOut(const float* rows, int64_t count, int64_t dim, float* out) const {
    lay_out_(rows, count, dim, out);
  }

 private:
  const char* name_;
  LayOutFn lay_out_;
};

// The same rows as an add's pe, in `layout`; or none.
struct LaidOutRows {
  const AddRowLayout* layout = nullptr;
  const float* rows = nullptr;
};

// REQUIRES: x is [nb, seq, dim] of FLOAT32/FLOAT16/BFLOAT16; pe points to [seq, dim]
// float32 rows that stay alive for the call, finite (a NaN there may carry into the
// rounding; every table posenc builds or loads is checked).
// `implementation` (kernel_impl.h): kAuto takes the hand-written rows in seq-major order
// (each pe row read once for all batch rows), bit-identical to AddEncodingLoop, up to the
// ISA ceiling: AVX-512 rows for float16 (F, BW, VL, DQ) and bfloat16 (also AVX512_BF16)
// where present, else AVX2 rows (float32 has only AVX2 rows: it is memory-bound); scalar:
// the loop below; on a CPU without AVX2 a oneDNN binary_add (scales at execution) when
// oneDNN has a JIT kernel for the dtype, else the loop. kAvx512 runs AVX2 rows for a dtype
// without AVX-512 rows. kOneDnn: oneDNN's binary_add, not bit-identical to the loop (within
// rounding); where oneDNN has no JIT kernel for the dtype, kAuto's rows.
// Tensors under 256 KiB of float32-equivalent work run on the calling thread, larger ones
// on KernelThreads() threads.
// laid_out: optionally the same rows in AddRowLayoutFor(x.dtype, implementation)'s layout;
// read instead of pe where the chosen rows read that layout and the scales are not NaN.
// Rows in another layout are not read.
// first_non_finite: optionally set to what FirstNonFinite (finite_kernel.h) says of the
// result, the index of its first inf or NaN or -1. The hand-written rows check each row as
// they write it, while it is in cache, instead of in a second pass over memory; the loop and
// oneDNN make the pass.
// Returns INTERNAL only if oneDNN fails unexpectedly.
absl::Status AddEncodingInPlace(TensorView x, const float* pe, float input_scale, float pe_scale,
                                KernelImpl implementation = KernelImpl::kAuto,
                                LaidOutRows laid_out = {}, int64_t* first_non_finite = nullptr);

// The layout AddEncodingInPlace(x of `dtype`, implementation) reads its rows in on this
// thread's choice (the override), or null where it reads them as given. A caller that
// keeps rows across calls (a table cache) keeps them in this layout too, keyed by its name.
const AddRowLayout* AddRowLayoutFor(DType dtype, KernelImpl implementation = KernelImpl::kAuto);

// The same formula as a plain loop in float32 arithmetic, rounded once to x's dtype.
// Used as the fallback and as the reference in tests.
void AddEncodingLoop(TensorView x, const float* pe, float input_scale, float pe_scale);

// MULTIPLY fusion: x = (x * input_scale) * (pe * pe_scale), elementwise, pe broadcast over
// the batch, in place. REQUIRES as AddEncodingInPlace. The add's rows with a product in
// place of the sum (AVX-512 rows for 16-bit dtypes where present, else AVX2; scalar: the
// loop; no oneDNN code, so kOneDnn runs kAuto's rows), bit-identical to
// MultiplyEncodingLoop for every dtype. laid_out and first_non_finite as for the add (the
// layout is AddRowLayoutFor's). Always OK (the status mirrors the add's).
absl::Status MultiplyEncodingInPlace(TensorView x, const float* pe, float input_scale,
                                     float pe_scale, KernelImpl implementation = KernelImpl::kAuto,
                                     LaidOutRows laid_out = {},
                                     int64_t* first_non_finite = nullptr);

// The multiply as a plain loop in float32 arithmetic, rounded once to x's dtype: the
// reference in tests.
void MultiplyEncodingLoop(TensorView x, const float* pe, float input_scale, float pe_scale);

// What the last AddEncodingInPlace or MultiplyEncodingInPlace on this thread ran (kScalar,
// kAvx2, kAvx512 or kOneDnn; kAuto before any call), and the layout its rows were read in
// (null: as given), for tests and benchmarks.
KernelImpl LastAddImplementation();
const AddRowLayout* LastAddRowLayout();

}  // namespace posenc
