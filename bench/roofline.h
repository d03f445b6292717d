// The memory roofline posenc-bench compares every kernel with: an in-place x = x*a + b pass
// (read + write) over a buffer of the kernel's size, a write-only pass for kernels that
// only write, or a read-only sum for kernels that only read, best of one thread and the
// kernel thread count. Not thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>

#include "bench/bench_common.h"

namespace posenc::bench {

// What a roofline pass moves: kReadWrite reads and writes every byte (GB/s count both),
// kWriteOnly writes them (the better of streaming and plain stores), kReadOnly reads them.
enum class RooflineKind { kReadWrite, kWriteOnly, kReadOnly };

// The best GB/s of a pass of `kind` at a buffer size, over 1 thread and the kernel threads.
// Measured anew on every call (buffers are kept): memory bandwidth on a shared machine
// drifts, so each kernel is compared with a roofline taken right beside it. `prepare`, if
// any, runs untimed before every timed pass, as it does before the kernel the roofline
// judges: a kernel that refills its tensor first meets the caches that refill leaves (dirty
// lines of the tensor's end, nothing else), and so does its roofline.
class Roofline {
 public:
  double Gbps(size_t bytes, double budget_s, RooflineKind kind = RooflineKind::kReadWrite,
              const std::function<void()>& prepare = nullptr);
  // One read+write pass over `bytes` (a multiple of 4) at x on the kernel threads: the
  // roofline's own pass as a kernel case, the A/A row whose ratio is the bench's noise.
  static void ReadWritePass(void* x, size_t bytes);

 private:
  std::map<size_t, std::unique_ptr<Buffer>> buffers_;
};

}  // namespace posenc::bench
