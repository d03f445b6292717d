// The kernel thread pool's size (oneDNN's OpenMP runtime). Call once at start-up, before
// serving. Thread-safe afterwards (the pool is fixed).
#pragma once

namespace posenc {

// Sets how many threads kernels use; n < 1 means the number of cores.
void SetKernelThreads(int n);
// The count set above, on every thread (OpenMP's own setting is per thread: kernels pass
// this to their parallel regions). Before any SetKernelThreads: OpenMP's default.
int KernelThreads();

}  // namespace posenc
