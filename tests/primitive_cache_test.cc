// PrimitiveCache: one creation per key however many callers miss at once, other keys not
// held up by a slow creation, least recently used eviction at the capacity.
#include "server/kernels/primitive_cache.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace posenc {
namespace {

using Cache = PrimitiveCache<std::string, std::shared_ptr<const int>>;

TEST(PrimitiveCacheTest, ConcurrentMissesCreateOnce) {
  Cache cache(8);
  std::atomic<int> created{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::future<std::shared_ptr<const int>>> callers;
  for (int i = 0; i < 8; ++i) {
    callers.push_back(std::async(std::launch::async, [&] {
      return cache.Find("k", [&] {
        ++created;
        released.wait();  // every other caller arrives while this creation is running
        return std::make_shared<const int>(42);
      });
    }));
  }
  // The creator is blocked; give the other callers time to reach Find and wait.
  while (created.load() == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release.set_value();
  const std::shared_ptr<const int> first = callers[0].get();
  for (size_t i = 1; i < callers.size(); ++i) EXPECT_EQ(callers[i].get(), first);
  EXPECT_EQ(*first, 42);
  EXPECT_EQ(created.load(), 1);
}

TEST(PrimitiveCacheTest, ASlowCreationDoesNotBlockOtherKeys) {
  Cache cache(8);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> slow_started{false};
  auto slow = std::async(std::launch::async, [&] {
    return cache.Find("slow", [&] {
      slow_started = true;
      released.wait();
      return std::make_shared<const int>(1);
    });
  });
  while (!slow_started.load()) std::this_thread::yield();
  // Runs to completion while "slow" is still being made (it would deadlock if creation
  // held the cache's lock).
  EXPECT_EQ(*cache.Find("fast", [] { return std::make_shared<const int>(2); }), 2);
  release.set_value();
  EXPECT_EQ(*slow.get(), 1);
}

TEST(PrimitiveCacheTest, EvictsTheLeastRecentlyUsed) {
  Cache cache(2);
  int created = 0;
  auto make = [&](int v) {
    return [&created, v] {
      ++created;
      return std::make_shared<const int>(v);
    };
  };
  cache.Find("a", make(1));
  cache.Find("b", make(2));
  cache.Find("a", make(-1));  // a hit: a becomes the most recently used
  EXPECT_EQ(created, 2);
  cache.Find("c", make(3));  // evicts b, not a
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(*cache.Find("a", make(-1)), 1);
  EXPECT_EQ(created, 3);
  EXPECT_EQ(*cache.Find("b", make(20)), 20);  // made again
  EXPECT_EQ(created, 4);
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace posenc
