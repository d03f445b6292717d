// The server's log: one line per event on stderr, as text or as JSON (--log_format), for
// start, configuration, drain, stop and failed calls. Lines are written whole (one write
// each), so concurrent events never interleave. Thread-safe.
//
//   Log(LogLevel::kWarning, "call_failed", {{"method", "Encode"}, {"code", "NOT_FOUND"}});
//   text: 2026-12-01T08:44:17.123Z WARN call_failed method=Encode code=NOT_FOUND
//   json: {"ts":"2026-12-01T08:44:17.123Z","level":"warn","event":"call_failed",...}
// Numbers stay numbers in JSON: Log(..., {{"threads", 2}}) gives "threads":2.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace posenc {

enum class LogFormat { kText, kJson };
enum class LogLevel { kInfo, kWarning, kError };

// Process-wide; text until set.
void SetLogFormat(LogFormat format);
// "text" or "json"; false for anything else.
bool ParseLogFormat(absl::string_view name, LogFormat* format);

// One key=value of a line. Integers and finite floating-point values are numbers in JSON
// ({"threads":2}); everything else is a string ({"grace":"8s"}).
struct LogField {
  LogField(absl::string_view k, std::string v) : key(k), value(std::move(v)) {}
  LogField(absl::string_view k, const char* v) : key(k), value(v) {}
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool> &&
                                             !std::is_same_v<T, char>,
                                         int> = 0>
  LogField(absl::string_view k, T v)
      : key(k), value(absl::StrCat(v)), number(std::is_integral_v<T> || std::isfinite(v)) {}

  absl::string_view key;
  std::string value;
  bool number = false;
};
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
