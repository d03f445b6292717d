// A bounded, thread-safe cache of things that are costly to make and cheap to share: the
// oneDNN primitives, one per shape signature (oneDNN 2.6 JIT-compiles each, which "can take
// quite some time"), and DeBERTa's bucket rows, one per spec and geometry. Least recently
// used entries go beyond `capacity`, so no stream of client shapes grows it. A value is
// made once per key, outside the lock: concurrent misses on one key wait for the first
// caller's creation (as TableCache does), and other keys are not held up by it.
#pragma once

#include <cstddef>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace posenc {

template <typename Key, typename Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value for `key`, made by `create()` (which must not throw) when absent.
  template <typename Create>
  Value Find(const Key& key, Create&& create) {
    std::shared_ptr<Slot> slot;
    bool owner = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = slots_.find(key); it != slots_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
        slot = it->second.slot;
      } else {
        slot = std::make_shared<Slot>();
        slot->ready = slot->made.get_future().share();
        lru_.push_front(key);
        slots_.emplace(key, Entry{slot, lru_.begin()});
        owner = true;
        while (slots_.size() > capacity_) {
          slots_.erase(lru_.back());  // an evicted slot still being made lives on in `slot`
          lru_.pop_back();
        }
      }
    }
    if (owner) slot->made.set_value(create());
    return slot->ready.get();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return slots_.size();
  }

 private:
  struct Slot {
    std::promise<Value> made;
    std::shared_future<Value> ready;
  };
  struct Entry {
    std::shared_ptr<Slot> slot;
    typename std::list<Key>::iterator lru_pos;
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Key> lru_;  // front = most recently used
  std::map<Key, Entry> slots_;
};

}  // namespace posenc
