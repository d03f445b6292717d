// The table cache's events, as an interface with no dependencies: metrics/ implements it
// without depending on tables/, and tables/ calls it without knowing about metrics.
// The cache calls every method outside its lock, so an observer may call back into it.
#pragma once

#include <cstddef>

namespace posenc {

class TableCacheObserver {
 public:
  virtual ~TableCacheObserver() = default;
  virtual void OnHit() = 0;
  virtual void OnMiss() = 0;
  virtual void OnEvict(size_t count) = 0;
  virtual void OnBytes(size_t total_bytes) = 0;
};

}  // namespace posenc
