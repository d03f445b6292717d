// The kernel threads: their count (posenc's kernel team, and oneDNN's OpenMP runtime), the
// lease a call takes them with, and ParallelFor. Call SetKernelThreads once at start-up,
// before serving. Thread-safe afterwards (the pool is fixed).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"

namespace posenc {

// Sets how many threads kernels use; n < 1 means the number of cores.
void SetKernelThreads(int n);
// The count set above, on every thread (OpenMP's own setting is per thread: oneDNN calls
// pass this to it). Before any SetKernelThreads: OpenMP's default.
int KernelThreads();

// The threads one kernel call may use, held for the call's lifetime:
//  - 1 below 256 KiB of work: below it the team saves a call a microsecond or two, and
//    its worker then spins on a core the call's own gRPC threads (and a client on the
//    same host) need (docs/performance.md, "Kernel choices");
//  - else the whole kernel pool, if no other call holds it;
//  - else 1: concurrent requests each run on their own (gRPC) thread instead of stacking
//    thread teams on the same cores.
// Thread-safe; not copyable.
// work_bytes: the tensor's size as float32 (WorkBytes), not its own size: a 16-bit kernel
// widens, computes and narrows every element, so it costs per element what a float32 one
// does.
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

namespace threads_internal {
// Runs body over [0, n) in `chunks` contiguous chunks (chunk i: [i*c, min(n, (i+1)*c)),
// c = ceil(n / chunks), empty ones skipped) on the kernel team and the calling thread, and
// returns when all are done. REQUIRES: 2 <= chunks <= n, chunks < 65536.
void RunChunks(int chunks, int64_t n, absl::FunctionRef<void(int64_t, int64_t)> body);
}  // namespace threads_internal

// Runs body(begin, end) over [0, n) in `threads` contiguous chunks, each on one thread of
// the kernel team (posenc's own: KernelThreads() - 1 workers and the caller) or, where no
// worker has claimed it yet, on the caller: a worker that is asleep or off its core does
// not delay a call (one preempted inside a chunk still does). With one thread it runs
// inline. Why not an OpenMP region: entering one costs several times a spinning worker's
// round trip, a large share of a small RoPE call (docs/performance.md, "Kernel choices").
// Workers spin about 50 us after each chunk, then sleep until the next call. body may
// allocate its per-chunk scratch on entry.
template <typename Body>
void ParallelFor(int threads, int64_t n, const Body& body) {
  if (n <= 0) return;
  if (threads <= 1 || n == 1) {
    body(int64_t{0}, n);
    return;
  }
  const int chunks = static_cast<int>(std::min<int64_t>({threads, n, 65535}));
  threads_internal::RunChunks(chunks, n, body);
}

}  // namespace posenc
