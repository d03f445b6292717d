#include "server/kernels/threads.h"

#include <omp.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace posenc {
namespace {

// omp_set_num_threads sets only the calling thread's value; threads started later (gRPC's)
// start from the default. The kernel team is sized from this, and oneDNN calls pass it to
// OpenMP explicitly (onednn_common.h).
std::atomic<int> kernel_threads{0};

// Whether some kernel call holds the pool (see KernelThreadLease).
std::atomic<bool> pool_busy{false};

constexpr size_t kParallelBytes = size_t{256} << 10;

// The workers behind ParallelFor, started on first use (KernelThreads() - 1 of them, at
// least one) and never stopped. One call at a time owns the team (run_mu_); another that
// finds it busy runs its chunks itself.
//
// A call publishes its job, then bumps generation_; workers and the caller claim chunks
// with one compare-and-swap on claim_, which packs the job's tag (high 32 bits), its chunk
// count (bits 16-31) and the next chunk (bits 0-15), so a worker that wakes late can never
// claim a chunk of a later job as one of an earlier. A claimant reads the job's fields
// after its claim and counts the chunk in done_ when it has run it; the caller returns
// when done_ reaches the chunk count, so the fields stay valid until then.
class KernelTeam {
 public:
  static KernelTeam& Get() {
    static KernelTeam* team = new KernelTeam(std::max(1, KernelThreads() - 1));  // never freed
    return *team;
  }

  void Run(int chunks, int64_t n, absl::FunctionRef<void(int64_t, int64_t)> body) {
    const int64_t size = (n + chunks - 1) / chunks;
    std::unique_lock<std::mutex> owner(run_mu_, std::try_to_lock);
    if (!owner.owns_lock()) {  // another call has the team: this one runs on its own
      for (int64_t begin = 0; begin < n; begin += size) body(begin, std::min(n, begin + size));
      return;
    }
    body_ = &body;
    n_ = n;
    chunk_size_ = size;
    const uint64_t tag = ++jobs_;
    done_.store(0, std::memory_order_relaxed);
    claim_.store(tag << 32 | static_cast<uint64_t>(chunks) << 16, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      const std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    while (ClaimAndRun()) {
    }
    // A worker still running a chunk: spin, then yield, in case it shares this core.
    for (int i = 0; done_.load(std::memory_order_acquire) < chunks; ++i) {
      if (i < 4096) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  explicit KernelTeam(int workers) {
    for (int i = 0; i < workers; ++i) std::thread([this] { Work(); }).detach();
  }

  // Claims and runs one chunk of the published job; false when none is left.
  bool ClaimAndRun() {
    uint64_t v = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = v & 0xffff, chunks = (v >> 16) & 0xffff;
      if (next >= chunks) return false;
      if (claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        const int64_t begin = static_cast<int64_t>(next) * chunk_size_;
        if (begin < n_) (*body_)(begin, std::min(n_, begin + chunk_size_));
        done_.fetch_add(1, std::memory_order_acq_rel);
        return true;
      }
    }
  }

  void Work() {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      WaitForJob(seen);
      seen = generation_.load(std::memory_order_acquire);
      while (ClaimAndRun()) {
      }
    }
  }

  // Spins about 50 us for a generation after `seen`, then sleeps until one is published.
  void WaitForJob(uint64_t seen) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (int i = 0;; ++i) {
      if (generation_.load(std::memory_order_acquire) != seen) return;
      _mm_pause();
      if (i % 64 == 63 && std::chrono::steady_clock::now() > deadline) break;
    }
    std::unique_lock<std::mutex> lock(sleep_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

  std::mutex run_mu_;  // held by the call that owns the team
  uint64_t jobs_ = 0;  // under run_mu_
  // The published job: written under run_mu_ before claim_ is stored.
  const absl::FunctionRef<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_size_ = 0;
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  std::atomic<uint64_t> generation_{0};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace

namespace threads_internal {
void RunChunks(int chunks, int64_t n, absl::FunctionRef<void(int64_t, int64_t)> body) {
  KernelTeam::Get().Run(chunks, n, body);
}
}  // namespace threads_internal

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
