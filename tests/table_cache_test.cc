// The table cache: hits, misses, LRU eviction under a byte budget, oversize tables, errors
// not cached, and one computation for concurrent misses on the same key.
#include "server/tables/table_cache.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace posenc {
namespace {

Table MakeTable(int64_t rows, int64_t cols, float value) {
  Table t;
  t.rows = rows;
  t.cols = cols;
  t.data.assign(rows * cols, value);
  return t;
}

struct CountingObserver : TableCacheObserver {
  std::atomic<int> hits{0}, misses{0}, evictions{0};
  std::atomic<size_t> bytes{0};
  void OnHit() override { ++hits; }
  void OnMiss() override { ++misses; }
  void OnEvict(size_t n) override { evictions += static_cast<int>(n); }
  void OnBytes(size_t b) override { bytes = b; }
};

TEST(TableCache, HitAfterMiss) {
  CountingObserver obs;
  TableCache cache(1 << 20, &obs);
  int computed = 0;
  auto make = [&] {
    ++computed;
    return absl::StatusOr<Table>(MakeTable(4, 4, 1.0f));
  };
  auto a = cache.GetOrCompute("k", make);
  auto b = cache.GetOrCompute("k", make);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(computed, 1);
  EXPECT_EQ(obs.hits, 1);
  EXPECT_EQ(obs.misses, 1);
  EXPECT_EQ(cache.bytes(), 64u);
  EXPECT_EQ(obs.bytes, 64u);
}

TEST(TableCache, EvictsLeastRecentlyUsedWithinBudget) {
  CountingObserver obs;
  TableCache cache(3 * 400, &obs);  // three tables of 100 floats
  auto get = [&](const std::string& key) {
    return *cache.GetOrCompute(key, [] { return absl::StatusOr<Table>(MakeTable(10, 10, 0)); });
  };
  get("a");
  get("b");
  get("c");
  get("a");  // a is now the most recent; b the least
  get("d");  // evicts b
  EXPECT_EQ(cache.entries(), 3u);
  EXPECT_EQ(obs.evictions, 1);
  const int misses = obs.misses;
  get("a");
  get("c");
  get("d");
  EXPECT_EQ(obs.misses, misses);  // all still there
  get("b");
  EXPECT_EQ(obs.misses, misses + 1);  // b was the one evicted
  EXPECT_LE(cache.bytes(), cache.budget_bytes());
}

TEST(TableCache, EvictedTableStaysValidForItsHolder) {
  TableCache cache(400);
  auto held = *cache.GetOrCompute("a", [] { return absl::StatusOr<Table>(MakeTable(10, 10, 7)); });
  cache.GetOrCompute("b", [] { return absl::StatusOr<Table>(MakeTable(10, 10, 0)); }).IgnoreError();
  EXPECT_EQ(held->data[99], 7.0f);
}

TEST(TableCache, OversizeTableIsReturnedButNotKept) {
  TableCache cache(100);
  auto t = cache.GetOrCompute("big", [] { return absl::StatusOr<Table>(MakeTable(10, 10, 1)); });
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->rows, 10);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(TableCache, ErrorsAreNotCached) {
  TableCache cache(1 << 20);
  int calls = 0;
  auto fail = [&] {
    ++calls;
    return absl::StatusOr<Table>(absl::InvalidArgumentError("no"));
  };
  EXPECT_FALSE(cache.GetOrCompute("k", fail).ok());
  EXPECT_FALSE(cache.GetOrCompute("k", fail).ok());
  EXPECT_EQ(calls, 2);
}

TEST(TableCache, ConcurrentMissesComputeOnce) {
  TableCache cache(1 << 20);
  std::atomic<int> computed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto t = cache.GetOrCompute("shared", [&] {
        ++computed;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return absl::StatusOr<Table>(MakeTable(8, 8, 3));
      });
      ASSERT_TRUE(t.ok());
      EXPECT_EQ((*t)->data[0], 3.0f);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(computed, 1);
}

TEST(TableCache, SlowComputeDoesNotBlockOtherKeys) {
  TableCache cache(1 << 20);
  cache.GetOrCompute("fast", [] { return absl::StatusOr<Table>(MakeTable(1, 1, 1)); }).IgnoreError();
  std::atomic<bool> release{false};
  std::thread slow([&] {
    cache.GetOrCompute("slow", [&] {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return absl::StatusOr<Table>(MakeTable(1, 1, 2));
    }).IgnoreError();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Would deadlock (and time out) if the slow computation held the cache lock.
  auto fast = cache.GetOrCompute("fast", [] { return absl::StatusOr<Table>(MakeTable(1, 1, 9)); });
  EXPECT_EQ((*fast)->data[0], 1.0f);
  release = true;
  slow.join();
}

}  // namespace
}  // namespace posenc
