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
//  - 1 below 256 KiB of work (waking a thread team costs more than it saves);
//  - else the whole kernel pool, if no other call holds it;
//  - else 1: concurrent requests each run on their own (gRPC) thread instead of stacking
//    thread teams on the same cores.
// Thread-safe; not copyable.
// work_bytes: the tensor's size as float32 (WorkBytes), not its own size: a 16-bit kernel
// widens, computes and narrows every element, so it costs per element what a float32 one
// does (a [1,128,768] bfloat16 add took 0.014 ms on one thread against the float32 add's
// 0.005 ms on two, AVX2).
class KernelThreadLease {
 public:
  explicit KernelThreadLease(size_t work_bytes);
  ~KernelThreadLease();
  KernelThreadLease(const KernelThreadLease&) = delete;
  KernelThreadLease& operator=(const KernelThreadLease&) = delete;

  int threads() const { return threads_; }

 private:
  int threads_ = 1;
  bool holds_pool_ = false;
};

// The work size of `elements` elements for KernelThreadLease: 4 bytes each.
inline size_t WorkBytes(int64_t elements) { return static_cast<size_t>(elements) * 4; }

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
