// Finds a value that is not finite (inf or NaN), or a NaN, in a float tensor: posenc answers
// such a result with an error instead of returning it. One pass over the bytes; the
// hand-written AVX2 code tests 256 bytes of exponents at a time, the scalar loop one value;
// from 256 KiB of work the kernel threads share the pass (KernelThreadLease).
// `implementation` follows kernel_impl.h: kAuto and kAvx512 run the AVX2 code where the CPU
// has AVX2 (there is no AVX-512 code: the pass is bound by memory), kScalar the loop.
// Free functions; thread-safe.
#pragma once

#include <cstdint>

#include "server/kernels/kernel_impl.h"
#include "server/tensor/dtype.h"

namespace posenc {

// The index of the first of the n elements at `data` that is inf or NaN, or -1 when every
// one is finite. Float dtypes (FLOAT32, FLOAT16, BFLOAT16) only: others give -1.
int64_t FirstNonFinite(DType dtype, const void* data, int64_t n,
                       KernelImpl implementation = KernelImpl::kAuto);

// FirstNonFinite on the calling thread alone, never the kernel team: for a kernel that
// checks the rows it has just written while they are still in cache, from inside its own
// parallel loop.
int64_t FirstNonFiniteHere(DType dtype, const void* data, int64_t n,
                           KernelImpl implementation = KernelImpl::kAuto);

// The same for NaN only, where infinities are meaningful (an attention mask's -inf).
int64_t FirstNan(DType dtype, const void* data, int64_t n,
                 KernelImpl implementation = KernelImpl::kAuto);

}  // namespace posenc
