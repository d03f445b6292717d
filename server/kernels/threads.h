// The kernel thread pool's size (oneDNN's OpenMP runtime). Call once at start-up, before
// serving. Thread-safe afterwards (the pool is fixed).
#pragma once

#include <cstddef>

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

}  // namespace posenc
