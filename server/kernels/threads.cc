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

// Whether some kernel call holds the pool (see KernelThreadLease).
std::atomic<bool> pool_busy{false};

constexpr size_t kParallelBytes = size_t{256} << 10;

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

KernelThreadLease::KernelThreadLease(size_t work_bytes) {
  const int pool = KernelThreads();
  if (work_bytes < kParallelBytes || pool <= 1) return;
  if (pool_busy.exchange(true, std::memory_order_acquire)) return;
  holds_pool_ = true;
  threads_ = pool;
}

KernelThreadLease::~KernelThreadLease() {
  if (holds_pool_) pool_busy.store(false, std::memory_order_release);
}

}  // namespace posenc
