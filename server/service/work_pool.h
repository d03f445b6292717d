// The threads that run the service's work, off gRPC's own callback threads, in two lanes:
// cheap calls (small tensors, health-like work) never queue behind expensive ones (graph
// solves, large kernels). Each lane is a FIFO served by its own fixed set of threads.
// Thread-safe. The destructor runs what is queued, then joins the threads.
//
//   WorkPool pool(/*cheap_threads=*/2, /*bulk_threads=*/2);
//   pool.Submit(Lane::kBulk, [] { ... });
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace posenc {

enum class Lane { kCheap, kBulk };

class WorkPool {
 public:
  using Job = absl::AnyInvocable<void() &&>;
  using Clock = std::chrono::steady_clock;

  // REQUIRES: cheap_threads >= 1, bulk_threads >= 1.
  WorkPool(int cheap_threads, int bulk_threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `job` on `lane`. Never blocks and never refuses: admission (Admission) bounds
  // how many calls can be queued before this is reached.
  void Submit(Lane lane, Job job);

  // How long the oldest job still waiting in `lane` has waited (zero when none waits).
  Clock::duration OldestWait(Lane lane) const;
  size_t Queued(Lane lane) const;

 private:
  struct Queue {
    mutable std::mutex mu;
    std::condition_variable ready;
    std::deque<std::pair<Clock::time_point, Job>> jobs;
    bool stopping = false;
    std::vector<std::thread> threads;
  };
  static void Serve(Queue& queue);
  Queue& QueueOf(Lane lane) { return lane == Lane::kCheap ? cheap_ : bulk_; }
  const Queue& QueueOf(Lane lane) const { return lane == Lane::kCheap ? cheap_ : bulk_; }

  Queue cheap_, bulk_;
};

}  // namespace posenc
