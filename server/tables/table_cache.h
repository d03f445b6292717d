// A byte-budgeted LRU cache of immutable precomputed tables (sinusoidal rows, RoPE cos/sin).
// Thread-safe (internal synchronisation). The lock covers lookup and insert, never compute:
// a miss computes outside the lock, and concurrent misses on the same key wait for the one
// computation instead of repeating it, while readers of other keys go on.
// Tables are handed out as shared_ptr<const Table>, so eviction never frees a table in use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "server/common/table_cache_observer.h"

namespace posenc {

// A dense float32 table [rows, cols], computed in float64 and rounded once.
struct Table {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;  // rows * cols

  const float* Row(int64_t r) const { return data.data() + r * cols; }
  size_t Bytes() const { return data.size() * sizeof(float); }
};

// GetTable bounds: at most kMaxTableLength positions of kMaxTableDim columns. A stream's
// work is length x dim (at most 2^60 values, so the int64 product of the two cannot
// overflow); it goes out in chunks within the message limit.
inline constexpr int64_t kMaxTableLength = int64_t{1} << 40;
inline constexpr int64_t kMaxTableDim = int64_t{1} << 20;
static_assert(kMaxTableLength <= INT64_MAX / kMaxTableDim, "length x dim must fit in int64");

// TableCacheObserver (server/common/table_cache_observer.h): called outside the cache lock.

class TableCache {
 public:
  // REQUIRES: observer, if given, outlives the cache.
  explicit TableCache(size_t budget_bytes, TableCacheObserver* observer = nullptr);
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;

  // Returns the table under `key`, computing it with `compute` on a miss. `key` must
  // name every parameter that defines the table. A table larger than the whole budget
  // is returned but not kept. An error from `compute` is returned and not cached.
  absl::StatusOr<std::shared_ptr<const Table>> GetOrCompute(
      const std::string& key, const std::function<absl::StatusOr<Table>()>& compute);

  size_t budget_bytes() const { return budget_bytes_; }
  size_t bytes() const;
  size_t entries() const;

 private:
  struct Pending;
  struct Entry {
    std::shared_ptr<const Table> table;
    std::list<std::string>::iterator lru_pos;
  };

  // REQUIRES: mu_ held. Evicts least recently used entries until `incoming` more bytes
  // fit; returns how many were evicted.
  size_t EvictFor(size_t incoming);
  void Publish(const std::string& key, Pending& pending,
               const absl::StatusOr<std::shared_ptr<const Table>>& result);

  const size_t budget_bytes_;
  TableCacheObserver* const observer_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // front = most recently used
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, std::shared_ptr<Pending>> pending_;
  size_t bytes_ = 0;
};

}  // namespace posenc
