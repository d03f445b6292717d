// The memory roofline posenc-bench compares every kernel with: an in-place x = x*a + b pass
// (read + write) over a buffer of the kernel's size, or a write-only pass for kernels that
// only write, best of one thread and the kernel thread count. Not thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <memory>

#include "bench/bench_common.h"

namespace posenc::bench {

// The best read+write GB/s of Rmw at a buffer size, over 1 thread and the kernel threads.
// Measured anew on every call (buffers are kept): memory bandwidth on a shared machine
// drifts, so each kernel is compared with a roofline taken right beside it.
class Roofline {
 public:
  // write_only: GB/s written by a write-only pass instead (bytes, not 2x bytes), the better
  // of streaming and plain stores.
  double Gbps(size_t bytes, double budget_s, bool write_only = false);

 private:
  std::map<size_t, std::unique_ptr<Buffer>> buffers_;
};

}  // namespace posenc::bench
