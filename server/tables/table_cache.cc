#include "server/tables/table_cache.h"

#include <condition_variable>
#include <optional>

namespace posenc {

// One computation in flight; later callers for the same key wait on it.
struct TableCache::Pending {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<absl::StatusOr<std::shared_ptr<const Table>>> result;
};

TableCache::TableCache(size_t budget_bytes, TableCacheObserver* observer)
    : budget_bytes_(budget_bytes), observer_(observer) {}

size_t TableCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t TableCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t TableCache::EvictFor(size_t incoming) {
  size_t evicted = 0;
  while (!lru_.empty() && bytes_ + incoming > budget_bytes_) {
    auto it = entries_.find(lru_.back());
    bytes_ -= it->second.table->Bytes();
    entries_.erase(it);
    lru_.pop_back();
    ++evicted;
  }
  return evicted;
}

// The owner's last step: cache the table (if it fits), wake the waiters, tell the observer.
void TableCache::Publish(const std::string& key, Pending& pending,
                         const absl::StatusOr<std::shared_ptr<const Table>>& result) {
  size_t evicted = 0;
  size_t total = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(key);
    if (result.ok() && (*result)->Bytes() <= budget_bytes_) {
      evicted = EvictFor((*result)->Bytes());
      lru_.push_front(key);
      entries_.emplace(key, Entry{*result, lru_.begin()});
      bytes_ += (*result)->Bytes();
    }
    total = bytes_;
  }
  {
    std::lock_guard<std::mutex> lock(pending.mu);
    pending.result = result;
    pending.done = true;
  }
  pending.done_cv.notify_all();
  if (observer_) {  // outside the cache lock (table_cache.h)
    if (evicted) observer_->OnEvict(evicted);
    observer_->OnBytes(total);
  }
}

absl::StatusOr<std::shared_ptr<const Table>> TableCache::GetOrCompute(
    const std::string& key, const std::function<absl::StatusOr<Table>()>& compute) {
  std::shared_ptr<Pending> pending;
  std::shared_ptr<const Table> hit;
  bool owner = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
      hit = it->second.table;
    } else if (auto it = pending_.find(key); it != pending_.end()) {
      pending = it->second;
    } else {
      pending = std::make_shared<Pending>();
      pending_.emplace(key, pending);
      owner = true;
    }
  }
  if (hit) {  // observers run outside the cache lock (table_cache.h)
    if (observer_) observer_->OnHit();
    return hit;
  }

  if (!owner) {  // Another caller computes this key: wait for its result.
    if (observer_) observer_->OnHit();
    std::unique_lock<std::mutex> lock(pending->mu);
    pending->done_cv.wait(lock, [&] { return pending->done; });
    return *pending->result;
  }

  if (observer_) observer_->OnMiss();
  absl::StatusOr<Table> computed = compute();  // outside every lock
  absl::StatusOr<std::shared_ptr<const Table>> result =
      computed.ok() ? absl::StatusOr<std::shared_ptr<const Table>>(
                          std::make_shared<const Table>(std::move(computed).value()))
                    : absl::StatusOr<std::shared_ptr<const Table>>(computed.status());

  Publish(key, *pending, result);
  return result;
}

}  // namespace posenc
