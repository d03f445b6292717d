// WorkPool: each lane runs its jobs in submission order (one thread per lane here), a busy
// lane never holds the other, and the destructor runs everything queued before it joins.
#include "server/service/work_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace posenc {
namespace {

using ::testing::ElementsAreArray;

TEST(WorkPoolTest, OneThreadRunsALaneInSubmissionOrder) {
  std::vector<int> order;
  std::mutex mu;
  {
    WorkPool pool(1, 1);
    for (int i = 0; i < 100; ++i) {
      pool.Submit(Lane::kCheap, [&, i] {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      });
    }
  }  // the destructor drains the queue
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[i] = i;
  EXPECT_THAT(order, ElementsAreArray(expected));
}

TEST(WorkPoolTest, ABlockedBulkLaneDoesNotHoldTheCheapLane) {
  WorkPool pool(1, 1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> bulk_started{false};
  pool.Submit(Lane::kBulk, [&, released] {
    bulk_started = true;
    released.wait();
  });
  pool.Submit(Lane::kBulk, [] {});  // waits behind the blocked job
  std::promise<void> cheap_ran;
  pool.Submit(Lane::kCheap, [&] { cheap_ran.set_value(); });
  EXPECT_EQ(cheap_ran.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  while (!bulk_started) std::this_thread::yield();
  EXPECT_EQ(pool.Queued(Lane::kBulk), 1u);
  EXPECT_GT(pool.OldestWait(Lane::kBulk), WorkPool::Clock::duration::zero());
  EXPECT_EQ(pool.Queued(Lane::kCheap), 0u);
  EXPECT_EQ(pool.OldestWait(Lane::kCheap), WorkPool::Clock::duration::zero());
  release.set_value();
}

TEST(WorkPoolTest, DestructorRunsEveryQueuedJobOnEveryLane) {
  std::atomic<int> ran{0};
  {
    WorkPool pool(2, 3);
    for (int i = 0; i < 1000; ++i) {
      pool.Submit(i % 2 ? Lane::kCheap : Lane::kBulk, [&] { ++ran; });
    }
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(WorkPoolTest, JobsMaySubmitMoreWork) {
  std::promise<void> done;
  WorkPool pool(1, 1);
  pool.Submit(Lane::kBulk, [&] { pool.Submit(Lane::kCheap, [&] { done.set_value(); }); });
  EXPECT_EQ(done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
}

}  // namespace
}  // namespace posenc
