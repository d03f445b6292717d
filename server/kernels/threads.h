// The kernel thread pool's size (oneDNN's OpenMP runtime). Call once at start-up, before
// serving. Thread-safe afterwards (the pool is fixed).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace posenc {

// Sets how many threads kernels use; n < 1 means the number of cores.
void SetKernelThreads(int n);
// The count set above, on every thread (OpenMP's own setting is per thread: kernels pass
// this to their parallel regions). Before any SetKernelThreads: OpenMP's default.
int KernelThreads();

// The threads one kernel call may use, held for the call's lifetime:
//  - 1 below 256 KiB of tensor (waking a thread team costs more than it saves);
//  - else the whole kernel pool, if no other call holds it;
//  - else 1: concurrent requests each run on their own (gRPC) thread instead of stacking
//    thread teams on the same cores.
// Thread-safe; not copyable.
class KernelThreadLease {
 public:
  explicit KernelThreadLease(size_t tensor_bytes);
  ~KernelThreadLease();
  KernelThreadLease(const KernelThreadLease&) = delete;
  KernelThreadLease& operator=(const KernelThreadLease&) = delete;

  int threads() const { return threads_; }

 private:
  int threads_ = 1;
  bool holds_pool_ = false;
};

// Runs body(begin, end) over [0, n) in `threads` contiguous chunks, one per OpenMP thread
// (the split `schedule(static)` makes). With one thread it runs inline, never entering the
// OpenMP runtime: even a parallel region of one thread cost about a microsecond, a tenth of
// a small RoPE request. body may allocate its per-thread scratch on entry.
template <typename Body>
void ParallelFor(int threads, int64_t n, const Body& body) {
  if (n <= 0) return;
  if (threads <= 1 || n == 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t team = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = (n + team - 1) / team;
    const int64_t begin = std::min(n, id * chunk), end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

}  // namespace posenc
