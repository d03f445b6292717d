// What the oneDNN users in server/kernels share: the CPU engine, made once, and the dtype
// mapping. Internal to server/kernels (the only place dnnl.hpp appears).
#pragma once

#include "oneapi/dnnl/dnnl.hpp"
#include "server/tensor/dtype.h"

namespace posenc::onednn {

// The process's CPU engine, or null where oneDNN cannot make one (nothing it throws
// escapes).
const dnnl::engine* Engine();

// FLOAT16 -> f16, BFLOAT16 -> bf16, everything else -> f32 (callers pass float types only).
dnnl::memory::data_type DataType(DType t);

// oneDNN's OpenMP runtime sizes its team from the calling thread's setting, which
// omp_set_num_threads on the main thread does not reach (gRPC threads start with the
// default): set it to `threads` before each execution.
void UseThreads(int threads);

}  // namespace posenc::onednn
