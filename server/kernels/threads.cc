#include "server/kernels/threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace posenc {
namespace {

// omp_set_num_threads sets only the calling thread's value; threads started later (gRPC's)
// start from the default. Kernels read this instead, and pass it to OpenMP explicitly.
std::atomic<int> kernel_threads{0};

}  // namespace

void SetKernelThreads(int n) {
  if (n < 1) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  kernel_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
}

int KernelThreads() {
  const int n = kernel_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

}  // namespace posenc
