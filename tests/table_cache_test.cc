// The table cache: hits, misses, LRU eviction under a byte budget, oversize tables, errors
// not cached, and one computation for concurrent misses on the same key.
#include "server/tables/table_cache.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;

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
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
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
  CountingObserver obs;
  TableCache cache(400, &obs);  // room for one table of 100 floats
  auto held = *cache.GetOrCompute("a", [] { return absl::StatusOr<Table>(MakeTable(10, 10, 7)); });
  ASSERT_THAT(cache.GetOrCompute("b", [] { return absl::StatusOr<Table>(MakeTable(10, 10, 0)); }),
              IsOk());
  EXPECT_EQ(obs.evictions, 1);  // "a" made room for "b"
  EXPECT_EQ(cache.entries(), 1u);
  int recomputed = 0;
  auto again = cache.GetOrCompute("a", [&] {
    ++recomputed;
    return absl::StatusOr<Table>(MakeTable(10, 10, 8));
  });
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(recomputed, 1) << "\"a\" was still cached";
  EXPECT_EQ(held->data[99], 7.0f);  // the holder's copy is untouched
  EXPECT_NE(again->get(), held.get());
}

TEST(TableCache, OversizeTableIsReturnedButNotKept) {
  TableCache cache(100);
  auto t = cache.GetOrCompute("big", [] { return absl::StatusOr<Table>(MakeTable(10, 10, 1)); });
  ASSERT_THAT(t, IsOk());
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
  EXPECT_THAT(cache.GetOrCompute("k", fail), StatusIs(absl::StatusCode::kInvalidArgument, "no"));
  EXPECT_THAT(cache.GetOrCompute("k", fail), StatusIs(absl::StatusCode::kInvalidArgument, "no"));
  EXPECT_EQ(calls, 2);
}

// Spins (yielding) until `done` or 10 s pass; false on timeout.
template <typename Done>
bool WaitFor(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(TableCache, ConcurrentMissesComputeOnce) {
  CountingObserver obs;
  TableCache cache(1 << 20, &obs);
  constexpr int kThreads = 8;
  std::atomic<int> computed{0};
  std::atomic<bool> all_waiting{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      auto t = cache.GetOrCompute("shared", [&] {
        ++computed;
        // Every other caller must be waiting on this computation (each counts a hit before
        // it waits) before it finishes: the overlap is certain, not left to timing.
        all_waiting = WaitFor([&] { return obs.hits == kThreads - 1; });
        return absl::StatusOr<Table>(MakeTable(8, 8, 3));
      });
      ASSERT_THAT(t, IsOk());
      EXPECT_EQ((*t)->data[0], 3.0f);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(all_waiting) << "the other callers never waited on the computation";
  EXPECT_EQ(computed, 1);
  EXPECT_EQ(obs.misses, 1);
  EXPECT_EQ(obs.hits, kThreads - 1);
}

TEST(TableCache, SlowComputeDoesNotBlockOtherKeys) {
  TableCache cache(1 << 20);
  cache.GetOrCompute("fast", [] { return absl::StatusOr<Table>(MakeTable(1, 1, 1)); })
      .IgnoreError();
  std::atomic<bool> started{false}, release{false};
  std::thread slow([&] {
    cache
        .GetOrCompute("slow",
                      [&] {
                        started = true;
                        WaitFor([&] { return release.load(); });
                        return absl::StatusOr<Table>(MakeTable(1, 1, 2));
                      })
        .IgnoreError();
  });
  ASSERT_TRUE(WaitFor([&] { return started.load(); }));
  // Would deadlock (and time out) if the slow computation held the cache lock.
  auto fast = cache.GetOrCompute("fast", [] { return absl::StatusOr<Table>(MakeTable(1, 1, 9)); });
  EXPECT_EQ((*fast)->data[0], 1.0f);
  release = true;
  slow.join();
}

// The header's contract: observers run outside the cache lock, so one may call back into
// the cache. Each callback asks the cache for its size from another thread; under the lock
// that would not answer.
struct ReentrantObserver : TableCacheObserver {
  TableCache* cache = nullptr;
  std::atomic<int> blocked{0};
  void Probe() {
    auto answered = std::make_shared<std::promise<void>>();
    std::future<void> done = answered->get_future();
    // Detached: under the lock it could only finish after this callback returns.
    std::thread([c = cache, answered] {
      c->entries();
      answered->set_value();
    }).detach();
    if (done.wait_for(std::chrono::seconds(2)) != std::future_status::ready) ++blocked;
  }
  void OnHit() override { Probe(); }
  void OnMiss() override { Probe(); }
  void OnEvict(size_t) override { Probe(); }
  void OnBytes(size_t) override { Probe(); }
};

TEST(TableCache, ObserversRunOutsideTheLock) {
  ReentrantObserver obs;
  TableCache cache(400, &obs);
  obs.cache = &cache;
  auto make = [] { return absl::StatusOr<Table>(MakeTable(10, 10, 1)); };
  ASSERT_THAT(cache.GetOrCompute("a", make), IsOk());  // miss, bytes
  ASSERT_THAT(cache.GetOrCompute("a", make), IsOk());  // hit
  ASSERT_THAT(cache.GetOrCompute("b", make), IsOk());  // miss, evict, bytes
  EXPECT_EQ(obs.blocked, 0) << "an observer ran while the cache lock was held";
}

}  // namespace
}  // namespace posenc
