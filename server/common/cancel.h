// Cancellation for long work (graph solves, table streams): a question the work asks
// between its pieces -- "has the caller gone (deadline passed, client cancelled, server
// stopping)?" -- so that it stops instead of finishing an answer nobody reads.
// Header-only; the callable must be safe to call from the working threads, concurrently (a
// graph solve asks from each kernel thread it runs on).
#pragma once

#include <functional>

namespace posenc {

// True once the work should stop. An empty function never cancels.
using CancelCheck = std::function<bool()>;

inline bool IsCancelled(const CancelCheck& check) { return check && check(); }

}  // namespace posenc
