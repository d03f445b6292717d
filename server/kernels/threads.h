// The kernel thread pool's size (oneDNN's OpenMP runtime). Call once at start-up, before
// serving. Thread-safe afterwards (the pool is fixed).
#pragma once

namespace posenc {

// Sets how many threads kernels use; n < 1 means the number of cores.
void SetKernelThreads(int n);
int KernelThreads();

}  // namespace posenc
