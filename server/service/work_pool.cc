#include "server/service/work_pool.h"

#include <utility>

namespace posenc {

WorkPool::WorkPool(int cheap_threads, int bulk_threads) {
  for (int i = 0; i < cheap_threads; ++i) cheap_.threads.emplace_back(Serve, std::ref(cheap_));
  for (int i = 0; i < bulk_threads; ++i) bulk_.threads.emplace_back(Serve, std::ref(bulk_));
}

WorkPool::~WorkPool() {
  for (Queue* q : {&cheap_, &bulk_}) {
    {
      std::lock_guard<std::mutex> lock(q->mu);
      q->stopping = true;
    }
    q->ready.notify_all();
  }
  for (Queue* q : {&cheap_, &bulk_}) {
    for (std::thread& t : q->threads) t.join();
  }
}

void WorkPool::Submit(Lane lane, Job job) {
  Queue& q = QueueOf(lane);
  {
    std::lock_guard<std::mutex> lock(q.mu);
    q.jobs.emplace_back(Clock::now(), std::move(job));
  }
  q.ready.notify_one();
}

void WorkPool::Serve(Queue& q) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(q.mu);
      q.ready.wait(lock, [&] { return q.stopping || !q.jobs.empty(); });
      if (q.jobs.empty()) return;  // stopping, and everything queued has run
      job = std::move(q.jobs.front().second);
      q.jobs.pop_front();
    }
    std::move(job)();
  }
}

WorkPool::Clock::duration WorkPool::OldestWait(Lane lane) const {
  const Queue& q = QueueOf(lane);
  std::lock_guard<std::mutex> lock(q.mu);
  if (q.jobs.empty()) return Clock::duration::zero();
  return Clock::now() - q.jobs.front().first;
}

size_t WorkPool::Queued(Lane lane) const {
  const Queue& q = QueueOf(lane);
  std::lock_guard<std::mutex> lock(q.mu);
  return q.jobs.size();
}

}  // namespace posenc
