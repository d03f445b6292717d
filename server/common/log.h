// The server's log: one line per event on stderr, as text or as JSON (--log_format), for
// start, configuration, drain, stop and failed calls. Lines are written whole (one write
// each), so concurrent events never interleave. Thread-safe.
//
//   Log(LogLevel::kWarning, "call_failed", {{"method", "Encode"}, {"code", "NOT_FOUND"}});
//   text: 2026-12-01T08:44:17.123Z WARN call_failed method=Encode code=NOT_FOUND
//   json: {"ts":"2026-12-01T08:44:17.123Z","level":"warn","event":"call_failed",...}
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace posenc {

enum class LogFormat { kText, kJson };
enum class LogLevel { kInfo, kWarning, kError };

// Process-wide; text until set.
void SetLogFormat(LogFormat format);
// "text" or "json"; false for anything else.
bool ParseLogFormat(absl::string_view name, LogFormat* format);

using LogField = std::pair<absl::string_view, std::string>;
void Log(LogLevel level, absl::string_view event, std::initializer_list<LogField> fields);

// At most `per_second` events a second pass; Allow() says whether this one does and, when it
// does after a quiet spell, how many were dropped since the last that passed.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(int per_second) : per_second_(per_second) {}
  bool Allow(int64_t* suppressed);

 private:
  const int per_second_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_start_{};
  int in_window_ = 0;
  int64_t suppressed_ = 0;
};

}  // namespace posenc
